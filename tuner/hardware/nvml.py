"""NVML behind one small interface, with a real backend and a scripted fake.

The real backend wraps ``pynvml`` (the ``nvidia-ml-py`` package). The fake backend plays
scripted GPUs, including fields NVML answers "Not Supported" (as on WSL2 and some laptops) and
errors, so every GPU code path runs in tests on a machine without a GPU. ``MPTUNE_FAKE_NVML``
selects the fake for the CLI and the GUI: a key of :data:`SCENARIOS` or a JSON scenario file.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tuner.hardware.capability import units_for
from tuner.hardware.profile import GpuInfo

FAKE_ENV = "MPTUNE_FAKE_NVML"
NOT_SUPPORTED = "not_supported"
T = TypeVar("T")


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message is the reason, for the user."""


class NvmlFieldError(Exception):
    """One NVML query failed (not supported, or an error); that field becomes ``None``."""


class NvmlBackend(abc.ABC):
    """The NVML calls mptune needs."""

    @abc.abstractmethod
    def init(self) -> None:
        """Start NVML. Raises :class:`NvmlUnavailable` with the reason."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop NVML; safe to call when ``init`` failed."""

    @abc.abstractmethod
    def driver_version(self) -> str | None: ...

    @abc.abstractmethod
    def cuda_driver_version(self) -> str | None:
        """The CUDA version the driver supports, e.g. ``"12.4"``."""

    @abc.abstractmethod
    def device_count(self) -> int: ...

    @abc.abstractmethod
    def device(self, index: int) -> GpuInfo:
        """Everything about GPU ``index``; unsupported fields are ``None``."""

    @abc.abstractmethod
    def memory(self, index: int) -> tuple[float | None, float | None]:
        """``(used_mb, total_mb)`` of GPU ``index``: the cheap call a sampler repeats."""


def _field(query: Callable[[], T]) -> T | None:
    """One NVML query; "not supported" and errors become ``None``."""
    try:
        return query()
    except NvmlFieldError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version_text(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


class PynvmlBackend(NvmlBackend):
    """The real NVML, through ``pynvml``."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("the NVML bindings (nvidia-ml-py) are not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise NvmlUnavailable("NVML library not found: no NVIDIA driver installed") from None
        except pynvml.NVMLError_DriverNotLoaded:
            raise NvmlUnavailable("the NVIDIA driver is not loaded") from None
        except pynvml.NVMLError_NoPermission:
            raise NvmlUnavailable("no permission to use NVML") from None
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML failed to initialise: {exc}") from None
        self._nvml = pynvml

    def shutdown(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError as exc:
            raise NvmlFieldError(str(exc)) from None

    def driver_version(self) -> str | None:
        return _field(lambda: _text(self._call("nvmlSystemGetDriverVersion")))

    def cuda_driver_version(self) -> str | None:
        return _field(lambda: _cuda_version_text(int(self._call("nvmlSystemGetCudaDriverVersion"))))

    def device_count(self) -> int:
        try:
            return int(self._call("nvmlDeviceGetCount"))
        except NvmlFieldError as exc:
            raise NvmlUnavailable(f"NVML could not count the GPUs: {exc}") from None

    def device(self, index: int) -> GpuInfo:
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        memory = _field(lambda: self._call("nvmlDeviceGetMemoryInfo", handle))
        cc = _field(lambda: tuple(self._call("nvmlDeviceGetCudaComputeCapability", handle)))
        power = _field(lambda: self._call("nvmlDeviceGetPowerManagementLimit", handle))
        mig = _field(lambda: self._call("nvmlDeviceGetMigMode", handle))
        return GpuInfo(
            index=index,
            name=_field(lambda: _text(self._call("nvmlDeviceGetName", handle))),
            uuid=_field(lambda: _text(self._call("nvmlDeviceGetUUID", handle))),
            compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
            memory_total_mb=memory.total / 2**20 if memory else None,
            memory_used_mb=memory.used / 2**20 if memory else None,
            memory_free_mb=memory.free / 2**20 if memory else None,
            power_limit_w=power / 1000 if power is not None else None,
            sm_clock_mhz=_field(lambda: int(self._call(
                "nvmlDeviceGetMaxClockInfo", handle, self._nvml.NVML_CLOCK_SM))),
            memory_clock_mhz=_field(lambda: int(self._call(
                "nvmlDeviceGetMaxClockInfo", handle, self._nvml.NVML_CLOCK_MEM))),
            mig_mode=bool(mig[0]) if mig else None,
            units=units_for(cc) if cc else None,
        )

    def memory(self, index: int) -> tuple[float | None, float | None]:
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            info = self._call("nvmlDeviceGetMemoryInfo", handle)
        except NvmlFieldError:
            return None, None
        return info.used / 2**20, info.total / 2**20


#: Ready-made fake machines (realistic figures from the vendors' specifications).
SCENARIOS: dict[str, dict[str, Any]] = {
    "pascal_6.1": {"driver": "535.183.01", "cuda": "12.2", "gpus": [
        {"name": "NVIDIA GeForce GTX 1080", "compute_capability": [6, 1], "memory_total_mb": 8192,
         "memory_used_mb": 312, "power_limit_w": 180, "sm_clock_mhz": 1885,
         "memory_clock_mhz": 5005, "mig_mode": NOT_SUPPORTED}]},
    "volta_7.0": {"driver": "535.183.01", "cuda": "12.2", "gpus": [
        {"name": "Tesla V100-SXM2-16GB", "compute_capability": [7, 0], "memory_total_mb": 16384,
         "memory_used_mb": 410, "power_limit_w": 300, "sm_clock_mhz": 1530,
         "memory_clock_mhz": 877, "mig_mode": NOT_SUPPORTED}]},
    "ampere_8.0": {"driver": "550.90.07", "cuda": "12.4", "gpus": [
        {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": [8, 0], "memory_total_mb": 40960,
         "memory_used_mb": 620, "power_limit_w": 400, "sm_clock_mhz": 1410,
         "memory_clock_mhz": 1215, "mig_mode": False}]},
    "hopper_9.0": {"driver": "560.35.03", "cuda": "12.6", "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0], "memory_total_mb": 81559,
         "memory_used_mb": 540, "power_limit_w": 700, "sm_clock_mhz": 1980,
         "memory_clock_mhz": 2619, "mig_mode": False}]},
    "wsl2": {"driver": "556.12", "cuda": "12.5", "gpus": [
        {"name": "NVIDIA GeForce RTX 3060", "compute_capability": [8, 6],
         "memory_total_mb": 12288, "memory_used_mb": 1100, "uuid": NOT_SUPPORTED,
         "power_limit_w": NOT_SUPPORTED, "sm_clock_mhz": 1777,
         "memory_clock_mhz": NOT_SUPPORTED, "mig_mode": NOT_SUPPORTED}]},
    "no_driver": {"init_error": "NVML library not found: no NVIDIA driver installed"},
    "no_gpus": {"driver": "550.90.07", "cuda": "12.4", "gpus": []},
}


class FakeNvmlBackend(NvmlBackend):
    """Scripted GPUs behind the same interface as :class:`PynvmlBackend`.

    A scenario is a dict: ``driver``, ``cuda`` (versions), ``gpus`` (a list of dicts with the
    :class:`GpuInfo` field names; ``compute_capability`` as ``[major, minor]``), and optionally
    ``init_error`` (NVML fails to start with that reason) or ``count_error``. A GPU field whose
    value is ``"not_supported"`` or ``"error"`` behaves as NVML answering so.
    """

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.scenario = scenario
        self.started = False
        self.memory_calls = 0

    @classmethod
    def from_json(cls, path: str | Path) -> FakeNvmlBackend:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def named(cls, name: str) -> FakeNvmlBackend:
        return cls(SCENARIOS[name])

    def init(self) -> None:
        if self.scenario.get("init_error"):
            raise NvmlUnavailable(str(self.scenario["init_error"]))
        self.started = True

    def shutdown(self) -> None:
        self.started = False

    def _gpu(self, index: int) -> dict[str, Any]:
        return dict(self.scenario.get("gpus", [])[index])

    @staticmethod
    def _value(raw: dict[str, Any], key: str) -> Any:
        value = raw.get(key)
        if value in (NOT_SUPPORTED, "error"):
            raise NvmlFieldError(f"{key}: {value}")
        return value

    def driver_version(self) -> str | None:
        return _field(lambda: self._value(self.scenario, "driver"))

    def cuda_driver_version(self) -> str | None:
        return _field(lambda: self._value(self.scenario, "cuda"))

    def device_count(self) -> int:
        if self.scenario.get("count_error"):
            raise NvmlUnavailable(f"NVML could not count the GPUs: {self.scenario['count_error']}")
        return len(self.scenario.get("gpus", []))

    def device(self, index: int) -> GpuInfo:
        raw = self._gpu(index)
        cc = _field(lambda: self._value(raw, "compute_capability"))
        total = _field(lambda: self._value(raw, "memory_total_mb"))
        used = _field(lambda: self._value(raw, "memory_used_mb"))
        cc_tuple = (int(cc[0]), int(cc[1])) if cc else None
        return GpuInfo(
            index=index,
            name=_field(lambda: self._value(raw, "name")),
            uuid=_field(lambda: self._value(raw, "uuid") or f"GPU-fake-{index:04d}"),
            compute_capability=cc_tuple,
            memory_total_mb=total,
            memory_used_mb=used,
            memory_free_mb=total - used if total is not None and used is not None else None,
            power_limit_w=_field(lambda: self._value(raw, "power_limit_w")),
            sm_clock_mhz=_field(lambda: self._value(raw, "sm_clock_mhz")),
            memory_clock_mhz=_field(lambda: self._value(raw, "memory_clock_mhz")),
            mig_mode=_field(lambda: self._value(raw, "mig_mode")),
            units=units_for(cc_tuple) if cc_tuple else None,
        )

    def memory(self, index: int) -> tuple[float | None, float | None]:
        self.memory_calls += 1
        raw = self._gpu(index)
        return (_field(lambda: self._value(raw, "memory_used_mb")),
                _field(lambda: self._value(raw, "memory_total_mb")))


def backend_from_env() -> NvmlBackend:
    """The fake backend when ``MPTUNE_FAKE_NVML`` names a scenario or a JSON file, else NVML."""
    value = os.environ.get(FAKE_ENV, "").strip()
    if not value:
        return PynvmlBackend()
    if value in SCENARIOS:
        return FakeNvmlBackend.named(value)
    return FakeNvmlBackend.from_json(value)


@dataclass(frozen=True)
class GpuReading:
    """What NVML said: the GPUs, or why there are none."""

    gpus: tuple[GpuInfo, ...]
    unavailable_reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None


def read_gpus(backend: NvmlBackend) -> GpuReading:
    """Read every GPU; never raises: any NVML failure becomes the reason there are none."""
    try:
        backend.init()
    except NvmlUnavailable as exc:
        return GpuReading((), str(exc), None, None)
    except Exception as exc:  # noqa: BLE001 - a broken NVML must not break detection
        return GpuReading((), f"NVML failed: {type(exc).__name__}: {exc}", None, None)
    try:
        driver, cuda = backend.driver_version(), backend.cuda_driver_version()
        count = backend.device_count()
        gpus = []
        for index in range(count):
            try:
                gpus.append(backend.device(index))
            except NvmlFieldError:
                gpus.append(GpuInfo(index=index))
        reason = None if gpus else "no NVIDIA GPU found by NVML"
        return GpuReading(tuple(gpus), reason, driver, cuda)
    except NvmlUnavailable as exc:
        return GpuReading((), str(exc), None, None)
    except Exception as exc:  # noqa: BLE001
        return GpuReading((), f"NVML failed: {type(exc).__name__}: {exc}", None, None)
    finally:
        backend.shutdown()
