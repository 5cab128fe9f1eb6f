"""A trial worker's environment: its Keras backend, its device, its memory limit on JAX, and the
persistent compilation caches it shares with the workers before and after it."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from tuner.trials.spec import TrialSpec

logger = logging.getLogger(__name__)


def worker_environment(spec: TrialSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the setup's Keras backend, quiet TensorFlow, the chosen
    device, GPU memory allocated as it is used (so that the peak means something), our package
    importable."""
    env = dict(os.environ if base is None else base)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    backend = spec.setup.backend
    env["KERAS_BACKEND"] = backend
    env["PYTHONUNBUFFERED"] = "1"
    if backend == "jax":
        # JAX takes 75% of the card at its first allocation unless told otherwise: allocated
        # as used instead, so that the peak means something.
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        if spec.device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        elif spec.memory_limit_mb is not None:
            env.update(_jax_memory_limit(spec))
    env.update(compile_cache_environment(backend, env))
    # CUDA numbers GPUs fastest first by default, NVML by PCI bus id: in bus order both name
    # the same card gpu:N (a trial pinned to a GPU, its memory read per card).
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    elif spec.device.startswith("gpu:"):
        index = int(spec.device.split(":")[1])
        visible = [v for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


#: Where compiled programs are kept between workers (``off``: not kept); by default
#: ``<user cache dir>/mptune/compile/<backend>``.
COMPILE_CACHE_ENV = "MPTUNE_COMPILE_CACHE"


def compile_cache_directory(backend: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The directory a ``backend`` worker keeps its compiled programs in, or None when
    :data:`COMPILE_CACHE_ENV` says ``off``."""
    chosen = (os.environ if env is None else env).get(COMPILE_CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen) / backend
    import platformdirs

    return Path(platformdirs.user_cache_dir("mptune", appauthor=False)) / "compile" / backend


def compile_cache_environment(backend: str, env: dict[str, str]) -> dict[str, str]:
    """A worker's persistent compilation cache, so that a fresh worker does not compile again
    what an earlier one compiled (issues 25 and 34): JAX's XLA cache (every compiled step, its
    minimum compile time lowered to 0 so that CPU trials share it too), TensorFlow's XLA cache
    (``--tf_xla_persistent_cache_directory`` in ``TF_XLA_FLAGS``: the steps it compiles with
    XLA) and PyTorch Inductor's (``torch.compile``). A directory the user chose with the
    framework's own variable or flag is left as it is."""
    directory = compile_cache_directory(backend, env)
    if directory is None:
        return {}
    if backend == "jax" and "JAX_COMPILATION_CACHE_DIR" not in env:
        return {
            "JAX_COMPILATION_CACHE_DIR": str(directory),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        }
    if backend == "torch" and "TORCHINDUCTOR_CACHE_DIR" not in env:
        return {"TORCHINDUCTOR_CACHE_DIR": str(directory)}
    flags = env.get("TF_XLA_FLAGS", "")
    if backend == "tensorflow" and TF_CACHE_FLAG not in flags:
        return {"TF_XLA_FLAGS": f"{flags} {TF_CACHE_FLAG}={directory}".strip()}
    return {}


#: TensorFlow's flag (in ``TF_XLA_FLAGS``) for the directory its XLA executables are kept in.
TF_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def _jax_memory_limit(spec: TrialSpec) -> dict[str, str]:
    """A JAX worker's memory limit, which JAX takes only as a fraction of the card, before its
    GPU client starts: the card's arena preallocated at exactly ``memory_limit_mb`` (an
    allocation past it fails in JAX as out of memory, as past a TensorFlow or PyTorch limit).
    JAX documents the fraction for preallocation; with preallocation off it is not said to
    cap anything. The card's size comes from NVML, in the bus order CUDA is told to use;
    without it nothing is set and the limit is reported as not held."""
    from tuner.hardware import backend_from_env, read_gpus

    index = int(spec.device.split(":")[1]) if spec.device.startswith("gpu:") else 0
    gpus = read_gpus(backend_from_env()).gpus
    total = next((g.memory_total_mb for g in gpus if g.index == index), None)
    if not total or spec.memory_limit_mb is None:
        if not gpus and not spec.device.startswith("gpu:"):
            return {}  # no GPU known: the trial runs on the CPU, where the limit holds
        logger.warning(
            "JAX cannot hold the memory limit of %s MB: the size of GPU %d is unknown (NVML)",
            spec.memory_limit_mb,
            index,
        )
        return {}
    fraction = f"{min(1.0, spec.memory_limit_mb / total):.4f}"
    # XLA_CLIENT_MEM_FRACTION is the name JAX documents now; the old name for older releases.
    return {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "true",
        "XLA_CLIENT_MEM_FRACTION": fraction,
        "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction,
    }
