"""NVML behind one small interface, with a real backend and a scripted fake.

The real backend wraps ``pynvml`` (the ``nvidia-ml-py`` package). The fake backend plays
scripted GPUs, including fields NVML answers "Not Supported" (as on WSL2 and some laptops) and
errors, so every GPU code path runs in tests on a machine without a GPU. ``MPTUNE_FAKE_NVML``
selects the fake for the CLI and the GUI: a key of :data:`SCENARIOS` or a JSON scenario file.
"""

from __future__ import annotations

import abc
import copy
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tuner.hardware.capability import units_for
from tuner.hardware.profile import GpuInfo

logger = logging.getLogger(__name__)

#: The environment variable that swaps the real NVML for a scripted machine.
FAKE_ENV = "MPTUNE_FAKE_NVML"
#: A scripted field value meaning "NVML answers Not Supported".
NOT_SUPPORTED = "not_supported"
#: A scripted field value meaning "NVML fails on this query".
ERROR = "error"

NO_DRIVER = "NVML library not found (no NVIDIA driver installed)"
NO_GPU = "no NVIDIA GPU found by NVML"

T = TypeVar("T")


class NvmlUnavailable(Exception):
    """NVML cannot be used here.

    Attributes:
        reason: why, in words for the user (also the exception's message).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NvmlFieldError(Exception):
    """One NVML query failed (not supported, or an error); that field becomes ``None``."""


class NvmlBackend(abc.ABC):
    """The NVML calls mptune needs.

    Call :meth:`init` first and :meth:`shutdown` last; the queries in between are used from one
    thread at a time. Per-field failures are ``None``, never exceptions.
    """

    @abc.abstractmethod
    def init(self) -> None:
        """Start NVML.

        Raises:
            NvmlUnavailable: the library is missing, no driver is loaded, or NVML fails to start.
        """

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop NVML; safe to call when :meth:`init` failed or was never called."""

    @abc.abstractmethod
    def driver_version(self) -> str | None:
        """The NVIDIA driver version, e.g. ``"550.90.07"``."""

    @abc.abstractmethod
    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, e.g. ``"12.4"``."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """How many GPUs NVML sees.

        Raises:
            NvmlUnavailable: NVML cannot count them.
        """

    @abc.abstractmethod
    def device(self, index: int) -> GpuInfo:
        """Everything about GPU ``index``; unsupported or failing fields are ``None``."""

    @abc.abstractmethod
    def memory(self, index: int) -> tuple[float | None, float | None]:
        """``(used_mb, total_mb)`` of GPU ``index``; ``(None, None)`` when it cannot be read.

        The cheap call a background sampler repeats every half second; it never raises.
        """

    def use(self, index: int) -> tuple[float | None, float | None]:
        """``(utilisation, power)`` of GPU ``index``, both in percent: the share of the last
        sample period a kernel ran, and the power drawn of its enforced limit; ``None`` where
        either cannot be read (a backend that reads neither says so here). Never raises: the
        sampler repeats it beside :meth:`memory`, so that a GPU waiting for its input shows
        while it happens (issue 35)."""
        return None, None


def _field(query: Callable[[], T]) -> T | None:
    """One NVML query; "not supported", errors and odd values become ``None``."""
    try:
        return query()
    except Exception as exc:  # noqa: BLE001 - one field must never cost the whole GPU
        logger.debug("NVML field unavailable: %s", exc)
        return None


def _text(value: Any) -> str:
    # nvidia-ml-py returns str since 11.515; older versions returned bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version as people write it: ``12040`` -> ``"12.4"``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _free(total: float | None, used: float | None) -> float | None:
    return total - used if total is not None and used is not None else None


def _capability(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        major, _, minor = value.partition(".")
        return int(major), int(minor or 0)
    return int(value[0]), int(value[1])


def _number(value: Any) -> float | None:
    return float(value) if value is not None else None


def _integer(value: Any) -> int | None:
    return int(value) if value is not None else None


class PynvmlBackend(NvmlBackend):
    """The real NVML, through ``pynvml`` (imported on the first :meth:`init`, not at import).

    ``init``/``shutdown`` pairs nest like NVML's own, so a detector and a sampler may share
    one backend.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._starts = 0
        self._handles: dict[int, Any] = {}
        self._lock = threading.Lock()

    def init(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("the NVML bindings (nvidia-ml-py) are not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise NvmlUnavailable(NO_DRIVER) from None
        except pynvml.NVMLError_DriverNotLoaded:
            raise NvmlUnavailable("NVIDIA driver not loaded") from None
        except pynvml.NVMLError_NoPermission:
            raise NvmlUnavailable("no permission to use NVML") from None
        except Exception as exc:  # noqa: BLE001 - any NVMLError or loader error: same outcome
            raise NvmlUnavailable(f"NVML failed to initialise: {_text(exc)}") from None
        with self._lock:
            self._nvml = pynvml
            self._starts += 1

    def shutdown(self) -> None:
        with self._lock:
            if self._starts == 0:
                return
            self._starts -= 1
            if self._starts == 0:
                self._handles.clear()
            nvml = self._nvml
        try:
            nvml.nvmlShutdown()
        except Exception as exc:  # noqa: BLE001 - nothing useful to do about it
            logger.debug("nvmlShutdown failed: %s", exc)

    def _call(self, name: str, *args: Any) -> Any:
        if self._nvml is None:
            raise NvmlFieldError("NVML is not initialised")
        try:
            # getattr inside the try: an old nvidia-ml-py may lack a newer function.
            return getattr(self._nvml, name)(*args)
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends
            raise NvmlFieldError(f"{name}: {_text(exc)}") from None

    def _handle(self, index: int) -> Any:
        # Handles stay valid until shutdown; caching them keeps the sampler's call to one.
        handle = self._handles.get(index)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            self._handles[index] = handle
        return handle

    def driver_version(self) -> str | None:
        return _field(lambda: _text(self._call("nvmlSystemGetDriverVersion")))

    def cuda_driver_version(self) -> str | None:
        return _field(lambda: cuda_version_text(int(self._call("nvmlSystemGetCudaDriverVersion"))))

    def device_count(self) -> int:
        try:
            return int(self._call("nvmlDeviceGetCount"))
        except NvmlFieldError as exc:
            raise NvmlUnavailable(f"NVML could not count the GPUs: {exc}") from None

    def device(self, index: int) -> GpuInfo:
        handle = _field(lambda: self._handle(index))
        if handle is None:
            return GpuInfo(index=index)
        nvml = self._nvml
        name = _field(lambda: _text(self._call("nvmlDeviceGetName", handle)))
        memory = _field(lambda: self._call("nvmlDeviceGetMemoryInfo", handle))
        cc = _field(lambda: _capability(self._call("nvmlDeviceGetCudaComputeCapability", handle)))
        power_mw = _field(lambda: float(self._call("nvmlDeviceGetPowerManagementLimit", handle)))
        # nvmlDeviceGetMigMode answers (current, pending); the current mode is what runs.
        mig = _field(lambda: bool(self._call("nvmlDeviceGetMigMode", handle)[0]))
        total = _field(lambda: memory.total / 2**20) if memory is not None else None
        used = _field(lambda: memory.used / 2**20) if memory is not None else None
        return GpuInfo(
            index=index,
            name=name,
            uuid=_field(lambda: _text(self._call("nvmlDeviceGetUUID", handle))),
            compute_capability=cc,
            memory_total_mb=total,
            memory_used_mb=used,
            memory_free_mb=_free(total, used),
            power_limit_w=power_mw / 1000 if power_mw is not None else None,
            sm_clock_mhz=_field(
                lambda: int(self._call("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM))
            ),
            memory_clock_mhz=_field(
                lambda: int(self._call("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM))
            ),
            mig_mode=mig,
            units=units_for(cc, name) if cc else None,
        )

    def memory(self, index: int) -> tuple[float | None, float | None]:
        info = _field(lambda: self._call("nvmlDeviceGetMemoryInfo", self._handle(index)))
        if info is None:
            return None, None
        return _field(lambda: info.used / 2**20), _field(lambda: info.total / 2**20)

    def use(self, index: int) -> tuple[float | None, float | None]:
        handle = _field(lambda: self._handle(index))
        if handle is None:
            return None, None
        rates = _field(lambda: self._call("nvmlDeviceGetUtilizationRates", handle))
        drawn = _field(lambda: self._call("nvmlDeviceGetPowerUsage", handle))  # mW
        limit = _field(lambda: self._call("nvmlDeviceGetEnforcedPowerLimit", handle))  # mW
        power = 100.0 * drawn / limit if drawn is not None and limit else None
        return (_field(lambda: float(rates.gpu)) if rates is not None else None), power


def _gpu(
    name: str,
    cc: list[int],
    total: float,
    used: float,
    power: float | str,
    sm: int,
    mem: int | str,
    mig: bool | str,
    uuid: str,
) -> dict[str, Any]:
    return {
        "name": name,
        "uuid": uuid,
        "compute_capability": cc,
        "memory_total_mb": total,
        "memory_used_mb": used,
        "power_limit_w": power,
        "sm_clock_mhz": sm,
        "memory_clock_mhz": mem,
        "mig_mode": mig,
        # A GPU at work that waits for its input now and then (FakeNvmlBackend.use plays them).
        "utilization_percent": list(FAKE_UTILIZATION),
        "power_percent": list(FAKE_POWER),
    }


#: What a scripted GPU's use reads, sample after sample: busy, then a dip where it waits.
FAKE_UTILIZATION = (96, 97, 95, 98, 62, 9, 4, 71, 97, 96)
FAKE_POWER = (88, 90, 87, 91, 60, 24, 21, 66, 89, 90)


def _a100(uuid: str) -> dict[str, Any]:
    """An A100 SXM4 40GB (three scenarios have one or more)."""
    return _gpu("NVIDIA A100-SXM4-40GB", [8, 0], 40960, 620, 400, 1410, 1215, False, uuid)


#: Ready-made fake machines. Names, memory (MiB, as nvidia-smi shows it), power limits and
#: maximum clocks follow the vendors' specifications for these boards.
SCENARIOS: dict[str, dict[str, Any]] = {
    "pascal_6.1": {
        "driver": "535.183.01",
        "cuda": "12.2",
        "gpus": [
            _gpu(
                "NVIDIA GeForce GTX 1080",
                [6, 1],
                8192,
                312,
                180,
                1911,
                5005,
                NOT_SUPPORTED,
                "GPU-6d2c3a4e-5b7f-4b1e-9a52-8f1c0e5d7a10",
            )
        ],
    },
    "volta_7.0": {
        "driver": "535.183.01",
        "cuda": "12.2",
        "gpus": [
            _gpu(
                "Tesla V100-SXM2-16GB",
                [7, 0],
                16160,
                410,
                300,
                1530,
                877,
                NOT_SUPPORTED,
                "GPU-0f3b9c2d-7a4e-4c6e-8d31-2b9e4f6a1c70",
            )
        ],
    },
    "ampere_8.0": {
        "driver": "550.90.07",
        "cuda": "12.4",
        "gpus": [_a100("GPU-8a1e5f30-c2d9-4d2b-b7c4-5e3d2f1a0b80")],
    },
    # As a real H100 SXM reported it through NVML (bench/bench_gpu.py, 2026-11-24): its name,
    # compute capability, memory, driver 580.159.04 with CUDA 13.0, SM clock 1980 MHz at most.
    "hopper_9.0": {
        "driver": "580.159.04",
        "cuda": "13.0",
        "gpus": [
            _gpu(
                "NVIDIA H100 80GB HBM3",
                [9, 0],
                81559,
                540,
                700,
                1980,
                2619,
                False,
                "GPU-3c7d1e92-e61a-4f5a-a6b8-9d0e1c2b3a90",
            )
        ],
    },
    # WSL2's NVML answers Not Supported for much of the board's state.
    # A box with four of one model: ``--parallel auto`` runs four trials at once, one a card.
    "ampere_8.0_x4": {
        "driver": "550.90.07",
        "cuda": "12.4",
        "gpus": [_a100(f"GPU-8a1e5f30-c2d9-4d2b-b7c4-5e3d2f1a0b8{i}") for i in range(4)],
    },
    # Two A100s and a T4: ``--parallel auto`` uses the two cards of the searched GPU's model.
    "mixed_a100_t4": {
        "driver": "550.90.07",
        "cuda": "12.4",
        "gpus": [
            *(_a100(f"GPU-3c1e5f30-c2d9-4d2b-b7c4-5e3d2f1a0c9{i}") for i in range(2)),
            _gpu(
                "Tesla T4",
                [7, 5],
                15360,
                410,
                70,
                1590,
                5001,
                False,
                "GPU-0f5b1d2e-7a3c-4e8b-9d61-2c4a6e8f1b37",
            ),
        ],
    },
    "wsl2": {
        "driver": "556.12",
        "cuda": "12.5",
        "gpus": [
            _gpu(
                "NVIDIA GeForce RTX 3060",
                [8, 6],
                12288,
                1100,
                NOT_SUPPORTED,
                1777,
                NOT_SUPPORTED,
                NOT_SUPPORTED,
                NOT_SUPPORTED,
            )
        ],
    },
    "no_driver": {"init_error": NO_DRIVER},
    "no_gpus": {"driver": "550.90.07", "cuda": "12.4", "gpus": []},
}


class FakeNvmlBackend(NvmlBackend):
    """Scripted GPUs behind the same interface as :class:`PynvmlBackend`.

    A scenario is a dict: ``driver`` and ``cuda`` (versions), ``gpus`` (a list of dicts with
    :class:`~tuner.hardware.profile.GpuInfo`'s field names; ``compute_capability`` as
    ``[major, minor]`` or ``"8.0"``), and optionally ``init_error`` (NVML fails to start with
    that reason) or ``count_error``. Any field whose value is ``"not_supported"`` or ``"error"``
    behaves as NVML answering so: it becomes ``None``. A GPU's ``utilization_percent`` and
    ``power_percent`` (what :meth:`use` reads) are a number or a list played in turn, one item a
    call, so that a script can show a GPU that waits for its input now and then.

    Attributes:
        scenario: the script (a private copy).
        started: whether :meth:`init` succeeded and :meth:`shutdown` has not run since.
        memory_calls: how often :meth:`memory` was called (tests check the sampler with it).
    """

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.scenario = copy.deepcopy(scenario)
        self.started = False
        self.memory_calls = 0
        self.use_calls = 0

    @classmethod
    def from_json(cls, path: str | Path) -> FakeNvmlBackend:
        """A backend playing the JSON scenario file at ``path``.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not JSON (TypeError: not a JSON object).
        """
        scenario = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(scenario, dict):
            raise TypeError(f"{path}: a scenario is a JSON object, not {type(scenario).__name__}")
        return cls(scenario)

    @classmethod
    def named(cls, name: str) -> FakeNvmlBackend:
        """A backend playing ``SCENARIOS[name]``."""
        return cls(SCENARIOS[name])

    def init(self) -> None:
        if self.scenario.get("init_error"):
            raise NvmlUnavailable(str(self.scenario["init_error"]))
        self.started = True

    def shutdown(self) -> None:
        self.started = False

    def _gpus(self) -> list[dict[str, Any]]:
        gpus = self.scenario.get("gpus") or []
        return gpus if isinstance(gpus, list) else []

    @staticmethod
    def _value(raw: dict[str, Any], key: str) -> Any:
        value = raw.get(key)
        if value in (NOT_SUPPORTED, ERROR):
            raise NvmlFieldError(f"{key}: {value}")
        return value

    def driver_version(self) -> str | None:
        return _field(lambda: self._value(self.scenario, "driver"))

    def cuda_driver_version(self) -> str | None:
        return _field(lambda: self._value(self.scenario, "cuda"))

    def device_count(self) -> int:
        if self.scenario.get("count_error"):
            raise NvmlUnavailable(f"NVML could not count the GPUs: {self.scenario['count_error']}")
        return len(self._gpus())

    def device(self, index: int) -> GpuInfo:
        raw = self._gpus()[index]
        cc = _field(lambda: _capability(self._value(raw, "compute_capability")))
        total = _field(lambda: _number(self._value(raw, "memory_total_mb")))
        used = _field(lambda: _number(self._value(raw, "memory_used_mb")))
        name = _field(lambda: self._value(raw, "name"))
        mig = _field(lambda: self._value(raw, "mig_mode"))
        return GpuInfo(
            index=index,
            name=name,
            uuid=_field(lambda: self._value(raw, "uuid")),
            compute_capability=cc,
            memory_total_mb=total,
            memory_used_mb=used,
            memory_free_mb=_free(total, used),
            power_limit_w=_field(lambda: _number(self._value(raw, "power_limit_w"))),
            sm_clock_mhz=_field(lambda: _integer(self._value(raw, "sm_clock_mhz"))),
            memory_clock_mhz=_field(lambda: _integer(self._value(raw, "memory_clock_mhz"))),
            mig_mode=bool(mig) if mig is not None else None,
            units=units_for(cc, name) if cc else None,
        )

    def memory(self, index: int) -> tuple[float | None, float | None]:
        self.memory_calls += 1
        raw = _field(lambda: self._gpus()[index]) or {}
        return (
            _field(lambda: _number(self._value(raw, "memory_used_mb"))),
            _field(lambda: _number(self._value(raw, "memory_total_mb"))),
        )

    def use(self, index: int) -> tuple[float | None, float | None]:
        turn, self.use_calls = self.use_calls, self.use_calls + 1
        raw = _field(lambda: self._gpus()[index]) or {}
        return (
            _field(lambda: _played(self._value(raw, "utilization_percent"), turn)),
            _field(lambda: _played(self._value(raw, "power_percent"), turn)),
        )


def _played(value: Any, turn: int) -> float | None:
    """A scripted reading: the number, or a list's item for this turn (in a loop)."""
    if isinstance(value, list):
        return _number(value[turn % len(value)]) if value else None
    return _number(value)


def backend_from_env() -> NvmlBackend:
    """The backend the environment asks for.

    Returns:
        A :class:`FakeNvmlBackend` when ``MPTUNE_FAKE_NVML`` is a key of :data:`SCENARIOS` or a
        JSON scenario file; else the real :class:`PynvmlBackend`. A value that is neither gives
        a fake whose ``init`` fails with the reason, so detection reports the mistake instead
        of raising.
    """
    value = os.environ.get(FAKE_ENV, "").strip()
    if not value:
        return PynvmlBackend()
    if value in SCENARIOS:
        return FakeNvmlBackend.named(value)
    try:
        return FakeNvmlBackend.from_json(value)
    except (OSError, ValueError, TypeError) as exc:
        return FakeNvmlBackend(
            {
                "init_error": (
                    f"{FAKE_ENV}={value!r} is neither a built-in scenario nor a readable JSON "
                    f"scenario file: {exc}"
                )
            }
        )


@dataclass(frozen=True)
class GpuReading:
    """What NVML said: the GPUs, or why there are none.

    Attributes:
        gpus: every GPU, by index.
        unavailable_reason: why ``gpus`` is empty; ``None`` when it is not.
        driver_version: the NVIDIA driver version.
        cuda_driver_version: the newest CUDA the driver supports.
    """

    gpus: tuple[GpuInfo, ...]
    unavailable_reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None


def _shutdown(backend: NvmlBackend) -> None:
    try:
        backend.shutdown()
    except Exception as exc:  # noqa: BLE001 - a failed shutdown must not undo the reading
        logger.debug("NVML shutdown failed: %s", exc)


def read_gpus(backend: NvmlBackend) -> GpuReading:
    """Read every GPU, then shut the backend down.

    Never raises: any NVML failure becomes the reason there are no GPUs; a GPU that fails
    after it was counted is kept, with the fields that could be read.
    """
    try:
        backend.init()
    except NvmlUnavailable as exc:
        _shutdown(backend)
        return GpuReading((), exc.reason, None, None)
    except Exception as exc:  # noqa: BLE001 - a broken NVML must not break detection
        _shutdown(backend)
        return GpuReading((), f"NVML failed to initialise: {type(exc).__name__}: {exc}", None, None)
    try:
        driver, cuda = backend.driver_version(), backend.cuda_driver_version()
        count = backend.device_count()
        gpus = []
        for index in range(count):
            try:
                gpus.append(backend.device(index))
            except Exception as exc:  # noqa: BLE001 - one bad board keeps its index
                logger.debug("GPU %d unreadable: %s", index, exc)
                gpus.append(GpuInfo(index=index))
        return GpuReading(tuple(gpus), None if gpus else NO_GPU, driver, cuda)
    except NvmlUnavailable as exc:
        return GpuReading((), exc.reason, None, None)
    except Exception as exc:  # noqa: BLE001
        return GpuReading((), f"NVML failed: {type(exc).__name__}: {exc}", None, None)
    finally:
        _shutdown(backend)
