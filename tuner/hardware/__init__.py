"""Hardware detection: NVIDIA GPUs through NVML, the CPU, the software, and advice.

Never imports TensorFlow, so ``mptune detect`` and the GUI start fast.
"""

from __future__ import annotations

from tuner.hardware.advice import advise
from tuner.hardware.capability import CapabilityUnits, units_for
from tuner.hardware.cpu import read_cpu
from tuner.hardware.nvml import (FakeNvmlBackend, NvmlBackend, NvmlUnavailable, PynvmlBackend,
                                 backend_from_env, read_gpus)
from tuner.hardware.profile import (CpuInfo, GpuInfo, HardwareProfile, PolicyAdvice,
                                    SoftwareInfo)
from tuner.hardware.software import read_software

__all__ = [
    "CapabilityUnits", "CpuInfo", "FakeNvmlBackend", "GpuInfo", "HardwareProfile",
    "NvmlBackend", "NvmlUnavailable", "PolicyAdvice", "PynvmlBackend", "SoftwareInfo",
    "advise", "backend_from_env", "detect", "units_for",
]


def detect(backend: NvmlBackend | None = None) -> HardwareProfile:
    """Read this machine. Never raises for hardware reasons: no GPU is a state, with a reason.

    Args:
        backend: the NVML backend; ``None`` uses :func:`backend_from_env` (the real NVML unless
            ``MPTUNE_FAKE_NVML`` names a scripted machine).
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
