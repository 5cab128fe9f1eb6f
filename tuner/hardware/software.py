"""Python, TensorFlow and Keras versions, the Keras 3 backends installed, and what TensorFlow was
built with.

Nothing here imports TensorFlow, JAX or PyTorch (each takes seconds, and detection must not):
versions come from the installed packages' metadata, and the CUDA/cuDNN build facts from
TensorFlow's generated ``tensorflow/python/platform/build_info.py``, loaded on its own (it
imports only ``collections`` and defines one dict, ``build_info``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import platform
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


def read_software(tensorflow_dir: Path | None = None) -> SoftwareInfo:
    """Read the versions; never raises.

    Args:
        tensorflow_dir: the ``tensorflow`` package directory to read ``build_info`` from;
            ``None`` finds the installed one.
    """
    info = read_build_info(tensorflow_dir if tensorflow_dir is not None else find_tensorflow_dir())
    is_cuda = info.get("is_cuda_build")
    capabilities = info.get("cuda_compute_capabilities") or ()
    backends = _backend_versions()
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
    )
