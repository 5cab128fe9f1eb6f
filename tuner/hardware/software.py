"""Python, TensorFlow and Keras versions, the Keras 3 backends installed, and what TensorFlow was
built with.

Nothing here imports TensorFlow, JAX or PyTorch (each takes seconds, and detection must not):
versions come from the installed packages' metadata, and the CUDA/cuDNN build facts from
TensorFlow's generated ``tensorflow/python/platform/build_info.py``, loaded on its own (it
imports only ``collections`` and defines one dict, ``build_info``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
import os
import platform
import sys
from pathlib import Path
from typing import Any

from tuner.hardware.profile import INSTALL_HINTS as INSTALL_HINTS
from tuner.hardware.profile import SoftwareInfo
from tuner.policies import BACKENDS
from tuner.setup import BACKEND_NAMES

logger = logging.getLogger(__name__)

#: Distributions that install the ``tensorflow`` package, most common first. On Windows the
#: ``tensorflow`` wheel depends on ``tensorflow-intel``, which holds the files.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-gpu",
    "tf-nightly",
    "intel-tensorflow",
)
BUILD_INFO = Path("python") / "platform" / "build_info.py"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tensorflow_version() -> str | None:
    for distribution in TENSORFLOW_DISTRIBUTIONS:
        version = _version(distribution)
        if version:
            return version
    return None


def read_backends() -> dict[str, str | None]:
    """Each Keras 3 backend (:data:`~tuner.policies.BACKENDS`) and its installed version, or
    ``None`` where it is not installed (JAX: ``jax`` without ``jaxlib`` counts as missing); read
    from the packages' metadata, importing none of them."""
    return dict(_backend_versions().backends)


def _backend_versions() -> SoftwareInfo:
    return SoftwareInfo(
        python=platform.python_version(),
        tensorflow=_tensorflow_version(),
        jax=_version("jax"),
        jaxlib=_version("jaxlib"),
        torch=_version("torch"),
    )


def missing_backend_message(name: str) -> str:
    """One line: backend ``name`` is not installed, and the command that installs it."""
    return (
        f"the {BACKEND_NAMES[name]} backend ({name}) is not installed here: install it with "
        f"{INSTALL_HINTS[name]}"
    )


def check_backend(name: str, installed: dict[str, str | None] | None = None) -> str:
    """``name``'s installed version.

    Args:
        name: a Keras 3 backend.
        installed: :func:`read_backends`'s answer; ``None`` reads it.

    Raises:
        ValueError: ``name`` is not a backend, or it is not installed (one line, with the
            install command).
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    version = (read_backends() if installed is None else installed).get(name)
    if not version:
        raise ValueError(missing_backend_message(name))
    return version


def find_tensorflow_dir() -> Path | None:
    """The installed ``tensorflow`` package directory, found without importing it."""
    try:
        # find_spec of a top-level name locates the package without running its __init__.
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError) as exc:
        logger.debug("find_spec('tensorflow') failed: %s", exc)
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / BUILD_INFO).is_file():
                return Path(location)
    # A layout find_spec does not see (an odd path hook): ask the distributions' records.
    for distribution in TENSORFLOW_DISTRIBUTIONS:
        try:
            located = Path(
                str(importlib.metadata.distribution(distribution).locate_file("tensorflow"))
            )
        except importlib.metadata.PackageNotFoundError:
            continue
        if (located / BUILD_INFO).is_file():
            return located
    return None


def read_build_info(tensorflow_dir: Path | None) -> dict[str, Any]:
    """TensorFlow's ``build_info`` dict, loaded from its one file.

    Args:
        tensorflow_dir: the ``tensorflow`` package directory, or ``None``.

    Returns:
        The dict (keys such as ``cuda_version``, ``cudnn_version``, ``is_cuda_build``,
        ``cuda_compute_capabilities``); empty when the file is missing or unreadable.
    """
    if tensorflow_dir is None:
        return {}
    path = Path(tensorflow_dir) / BUILD_INFO
    if not path.is_file():
        return {}
    # A private module name, never put in sys.modules: a later real `import tensorflow` must
    # not find a stand-in.
    spec = importlib.util.spec_from_file_location("_mptune_tf_build_info", path)
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - an odd build must not break detection
        logger.debug("cannot load %s: %s", path, exc)
        return {}
    info = getattr(module, "build_info", None)
    return dict(info) if isinstance(info, dict) else {}


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


# -- whether each backend can reach an NVIDIA GPU, read without importing it -----------------
#: Where the dynamic loader looks besides LD_LIBRARY_PATH and /etc/ld.so.conf: its defaults,
#: Debian's multiarch folders, the CUDA toolkit's, and this environment's (conda puts CUDA there).
SYSTEM_LIBRARY_GLOBS: tuple[str, ...] = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/lib/*-linux-gnu",
    "/usr/lib/*-linux-gnu",
    "/usr/local/lib",
    "/usr/local/cuda*/lib64",
    "/usr/local/cuda*/targets/*/lib",
    "/usr/lib/wsl/lib",
)
LD_SO_CONF = Path("/etc/ld.so.conf")


def _ld_so_conf_dirs(conf: Path, seen: set[Path]) -> list[Path]:
    """The folders /etc/ld.so.conf names, following its ``include`` lines."""
    if conf in seen or not conf.is_file():
        return []
    seen.add(conf)
    dirs: list[Path] = []
    try:
        lines = conf.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            base = Path(pattern) if pattern.startswith("/") else conf.parent / pattern
            for included in sorted(Path(base.anchor).glob(str(base.relative_to(base.anchor)))):
                dirs += _ld_so_conf_dirs(included, seen)
        elif line:
            dirs.append(Path(line))
    return dirs


def library_dirs(tensorflow_dir: Path | None) -> list[Path]:
    """Where a shared library TensorFlow loads may be found: the ``nvidia-*`` pip packages
    beside it (its RUNPATH points there), LD_LIBRARY_PATH, /etc/ld.so.conf and the loader's
    default folders. Generous on purpose: a library found here that does not load is the
    worker's to report; one missing from all of them is missing."""
    dirs: list[Path] = []
    if tensorflow_dir is not None:
        dirs += sorted((Path(tensorflow_dir).parent / "nvidia").glob("*/lib"))
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    dirs += _ld_so_conf_dirs(LD_SO_CONF, set())
    for pattern in SYSTEM_LIBRARY_GLOBS:
        dirs += sorted(Path("/").glob(pattern.lstrip("/")))
    dirs.append(Path(sys.prefix) / "lib")
    return list(dict.fromkeys(dirs))


def _major(version: Any) -> str | None:
    text = _text(version)
    return text.split(".")[0] if text else None


def tf_cuda_libraries_missing(
    info: dict[str, Any], tensorflow_dir: Path | None
) -> tuple[str, ...] | None:
    """The CUDA runtime, cuBLAS and cuDNN libraries a CUDA build of TensorFlow loads (by
    their sonames, ``libcudnn.so.9``) that are in none of :func:`library_dirs`; ``()`` when
    all are there, ``None`` when not a CUDA build or not Linux (where TensorFlow's pip wheel
    is no CUDA build anyway). A plain ``pip install tensorflow`` on Linux is a CUDA build
    without them: its GPU support comes with ``pip install 'tensorflow[and-cuda]'``."""
    cuda, cudnn = _major(info.get("cuda_version")), _major(info.get("cudnn_version"))
    if not info.get("is_cuda_build") or not cuda or not sys.platform.startswith("linux"):
        return None
    wanted = [f"libcudart.so.{cuda}", f"libcublas.so.{cuda}"]
    if cudnn:
        wanted.append(f"libcudnn.so.{cudnn}")
    dirs = library_dirs(tensorflow_dir)
    return tuple(name for name in wanted if not any((d / name).exists() for d in dirs))


#: JAX's CUDA plugins, newest CUDA first: ``pip install 'jax[cuda12]'`` installs the first.
JAX_CUDA_PLUGINS = {"13": "jax-cuda13-plugin", "12": "jax-cuda12-plugin"}


def jax_cuda() -> tuple[bool | None, str | None]:
    """Whether the installed JAX can run on CUDA, and for which CUDA major version: a
    ``jax-cudaNN-plugin`` (JAX 0.4.26 and later), or an older jaxlib built with CUDA (its
    version reads ``0.4.20+cuda12.cudnn89``). ``(None, None)`` when jaxlib is not installed."""
    jaxlib = _version("jaxlib")
    if not jaxlib:
        return None, None
    for cuda, plugin in JAX_CUDA_PLUGINS.items():
        if _version(plugin):
            return True, cuda
    local = jaxlib.partition("+")[2]
    if local.startswith("cuda"):
        return True, local[len("cuda") :].split(".")[0] or None
    return False, None


def torch_cuda() -> tuple[bool | None, str | None]:
    """Whether the installed PyTorch is a CUDA build, and its CUDA version, from
    ``torch/version.py`` (``cuda = '12.6'``, ``None`` in a CPU or ROCm build), read as text;
    the version's ``+cpu`` tag where that file cannot be read. ``(None, None)``: not
    installed, or it cannot tell."""
    version = _version("torch")
    if not version:
        return None, None
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        cuda = _assigned(Path(location) / "version.py", "cuda")
        if cuda is not _UNREAD:
            return (cuda is not None), (str(cuda) if cuda is not None else None)
    if version.endswith("+cpu"):
        return False, None
    return None, None


_UNREAD = object()


def _assigned(path: Path, name: str) -> Any:
    """The constant a module assigns to ``name`` (``cuda = '12.6'`` or
    ``cuda: Optional[str] = None``), read without running it; :data:`_UNREAD` when not found."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return _UNREAD
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(
            value, ast.Constant
        ):
            return value.value
    return _UNREAD


def read_software(tensorflow_dir: Path | None = None) -> SoftwareInfo:
    """Read the versions; never raises.

    Args:
        tensorflow_dir: the ``tensorflow`` package directory to read ``build_info`` from;
            ``None`` finds the installed one.
    """
    tensorflow_dir = tensorflow_dir if tensorflow_dir is not None else find_tensorflow_dir()
    info = read_build_info(tensorflow_dir)
    is_cuda = info.get("is_cuda_build")
    capabilities = info.get("cuda_compute_capabilities") or ()
    backends = _backend_versions()
    jax_is_cuda, jax_cuda_version = jax_cuda()
    torch_is_cuda, torch_cuda_version = torch_cuda()
    return SoftwareInfo(
        python=platform.python_version(),
        tensorflow=backends.tensorflow,
        keras=_version("keras"),
        tf_keras=_version("tf-keras"),
        tf_cuda_version=_text(info.get("cuda_version")),
        tf_cudnn_version=_text(info.get("cudnn_version")),
        tf_is_cuda_build=bool(is_cuda) if is_cuda is not None else None,
        tf_cuda_compute_capabilities=tuple(str(c) for c in capabilities),
        jax=backends.jax,
        jaxlib=backends.jaxlib,
        torch=backends.torch,
        tf_cuda_libraries_missing=tf_cuda_libraries_missing(info, tensorflow_dir),
        jax_is_cuda_build=jax_is_cuda,
        jax_cuda_version=jax_cuda_version,
        torch_is_cuda_build=torch_is_cuda,
        torch_cuda_version=torch_cuda_version,
    )
