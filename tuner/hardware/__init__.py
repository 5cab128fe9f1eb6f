"""Hardware detection: NVIDIA GPUs through NVML, the CPU, the software, and policy advice.

Never imports TensorFlow, Keras or Qt, so ``mptune detect`` and the GUI start fast; a whole
:func:`detect` takes milliseconds. Set ``MPTUNE_FAKE_NVML`` to play scripted GPUs
(:mod:`tuner.hardware.nvml`).
"""

from __future__ import annotations

from tuner.hardware import report
from tuner.hardware.advice import advise
from tuner.hardware.capability import CapabilityUnits, units_for
from tuner.hardware.cpu import read_cpu
from tuner.hardware.nvml import (
    SCENARIOS,
    FakeNvmlBackend,
    GpuReading,
    NvmlBackend,
    NvmlUnavailable,
    PynvmlBackend,
    backend_from_env,
    read_gpus,
)
from tuner.hardware.profile import (
    CpuInfo,
    GpuInfo,
    HardwareProfile,
    PolicyAdvice,
    SoftwareInfo,
)
from tuner.hardware.software import read_software

__all__ = [
    "SCENARIOS",
    "CapabilityUnits",
    "CpuInfo",
    "FakeNvmlBackend",
    "GpuInfo",
    "GpuReading",
    "HardwareProfile",
    "NvmlBackend",
    "NvmlUnavailable",
    "PolicyAdvice",
    "PynvmlBackend",
    "SoftwareInfo",
    "advise",
    "backend_from_env",
    "detect",
    "read_cpu",
    "read_gpus",
    "read_software",
    "report",
    "units_for",
]


def detect(backend: NvmlBackend | None = None) -> HardwareProfile:
    """Read this machine. Never raises for hardware reasons: no GPU is a state, with a reason.

    Args:
        backend: the NVML backend; ``None`` uses :func:`backend_from_env` (the real NVML unless
            ``MPTUNE_FAKE_NVML`` names a scripted machine). It is shut down before returning.

    Returns:
        The GPUs (or why there are none), CPU, software, and the advice for this machine.
    """
    reading = read_gpus(backend if backend is not None else backend_from_env())
    cpu = read_cpu()
    return HardwareProfile(
        gpus=reading.gpus,
        gpu_unavailable_reason=reading.unavailable_reason,
        driver_version=reading.driver_version,
        cuda_driver_version=reading.cuda_driver_version,
        cpu=cpu,
        software=read_software(),
        advice=advise(reading.gpus, cpu),
    )
