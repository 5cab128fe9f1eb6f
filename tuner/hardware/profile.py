"""Frozen records of what detection found. They cross threads (the GUI's sampler) and
processes (stored with sessions), so they are plain data with ``to_dict``/``from_dict``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.hardware.capability import CapabilityUnits

SCHEMA = 1


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU as NVML reports it; a field NVML does not support is ``None``."""

    index: int
    name: str | None = None
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = None
    memory_total_mb: float | None = None
    memory_used_mb: float | None = None
    memory_free_mb: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    mig_mode: bool | None = None
    units: CapabilityUnits | None = None

    @property
    def capability_text(self) -> str | None:
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["compute_capability"] = self.capability_text
        data["units"] = self.units.to_dict() if self.units else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        values = dict(data)
        cc = values.get("compute_capability")
        if isinstance(cc, str):
            major, minor = cc.split(".")
            values["compute_capability"] = (int(major), int(minor))
        units = values.get("units")
        values["units"] = CapabilityUnits(**units) if isinstance(units, dict) else None
        return cls(**values)


@dataclass(frozen=True)
class CpuInfo:
    """The CPU and the instruction sets that decide whether low precision can be fast."""

    model: str | None
    arch: str
    physical_cores: int | None
    logical_cores: int | None
    ram_total_mb: float | None
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuInfo:
        return cls(**{**data, "flags": tuple(data.get("flags", ()))})


@dataclass(frozen=True)
class SoftwareInfo:
    """Versions, and what TensorFlow was built with (read without importing it)."""

    python: str
    tensorflow: str | None = None
    keras: str | None = None
    tf_keras: str | None = None
    tf_cuda_version: str | None = None
    tf_cudnn_version: str | None = None
    tf_is_cuda_build: bool | None = None
    tf_cuda_compute_capabilities: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tf_cuda_compute_capabilities"] = list(self.tf_cuda_compute_capabilities)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SoftwareInfo:
        return cls(**{**data, "tf_cuda_compute_capabilities":
                      tuple(data.get("tf_cuda_compute_capabilities", ()))})


@dataclass(frozen=True)
class PolicyAdvice:
    """A policy worth trying and why, in one sentence."""

    policy: str
    reason: str


@dataclass(frozen=True)
class HardwareProfile:
    """Everything ``mptune detect`` reports."""

    gpus: tuple[GpuInfo, ...]
    gpu_unavailable_reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    cpu: CpuInfo
    software: SoftwareInfo
    advice: tuple[PolicyAdvice, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        """One sentence: what this machine means for mixed precision."""
        if self.gpus:
            gpu = self.gpus[0]
            units = gpu.units
            if units is None:
                return f"{gpu.name or 'GPU'}: compute capability unknown; measure to know"
            if units.bf16_tensor_cores:
                return f"{units.summary}: mixed precision should pay here"
            if units.fp16_tensor_cores:
                return (f"{units.summary}: mixed_float16 should pay here; bfloat16 has no "
                        "Tensor Cores")
            return (f"{gpu.name or 'GPU'} has no Tensor Cores: float32 is expected to be "
                    "fastest, mixed precision saves memory only")
        flags = set(self.cpu.flags)
        cpu_says = ("this CPU has bfloat16 units (" + ", ".join(
            sorted(flags & {"amx_bf16", "avx512_bf16", "bf16"})) + "): measure whether "
                    "mixed_bfloat16 pays") if flags & {"amx_bf16", "avx512_bf16", "bf16"} \
            else "on this CPU float32 is expected to be fastest"
        return f"no NVIDIA GPU found ({self.gpu_unavailable_reason}): {cpu_says}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "gpus": [g.to_dict() for g in self.gpus],
            "gpu_unavailable_reason": self.gpu_unavailable_reason,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "cpu": self.cpu.to_dict(),
            "software": self.software.to_dict(),
            "advice": [asdict(a) for a in self.advice],
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareProfile:
        return cls(
            gpus=tuple(GpuInfo.from_dict(g) for g in data.get("gpus", ())),
            gpu_unavailable_reason=data.get("gpu_unavailable_reason"),
            driver_version=data.get("driver_version"),
            cuda_driver_version=data.get("cuda_driver_version"),
            cpu=CpuInfo.from_dict(data["cpu"]),
            software=SoftwareInfo.from_dict(data["software"]),
            advice=tuple(PolicyAdvice(**a) for a in data.get("advice", ())),
        )
