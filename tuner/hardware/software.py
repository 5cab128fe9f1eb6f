"""Python, TensorFlow and Keras versions, and what TensorFlow was built with, without importing
TensorFlow (that takes seconds; detection must not)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from pathlib import Path
from typing import Any

from tuner.hardware.profile import SoftwareInfo


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tensorflow_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def read_build_info(tensorflow_dir: Path | None) -> dict[str, Any]:
    """TensorFlow's ``build_info`` dict, loaded from its one file (it only imports
    ``collections``); empty when there is none."""
    if tensorflow_dir is None:
        return {}
    path = tensorflow_dir / "python" / "platform" / "build_info.py"
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("_mptune_tf_build_info", path)
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - an odd build must not break detection
        return {}
    info = getattr(module, "build_info", {})
    return dict(info) if isinstance(info, dict) else {}


def read_software(tensorflow_dir: Path | None = None) -> SoftwareInfo:
    info = read_build_info(tensorflow_dir if tensorflow_dir is not None else _tensorflow_dir())
    tensorflow = _version("tensorflow") or _version("tensorflow-cpu")
    return SoftwareInfo(
        python=platform.python_version(),
        tensorflow=tensorflow,
        keras=_version("keras"),
        tf_keras=_version("tf-keras"),
        tf_cuda_version=info.get("cuda_version") or None,
        tf_cudnn_version=info.get("cudnn_version") or None,
        tf_is_cuda_build=info.get("is_cuda_build"),
        tf_cuda_compute_capabilities=tuple(info.get("cuda_compute_capabilities") or ()),
    )
