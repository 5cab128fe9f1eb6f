"""Frozen records of what detection found.

They cross threads (the GUI's detector and sampler) and processes (stored with sessions, printed
by ``mptune detect --json``), so they are plain data with ``to_dict``/``from_dict``. ``from_dict``
ignores keys it does not know, so a profile stored by a newer mptune still loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tuner.hardware.capability import CapabilityUnits
from tuner.hardware.gpu_use import UnusedGpu, unused_gpu, unused_gpus
from tuner.policies import JAX, TENSORFLOW, TORCH
from tuner.record import coded, from_data, to_data
from tuner.setup import BACKEND_NAMES

#: The version of :meth:`HardwareProfile.to_dict`'s layout.
SCHEMA = 1

#: CPU flags that give bfloat16 or float16 arithmetic in hardware (see tuner.hardware.cpu).
BF16_MATRIX_FLAGS = frozenset({"amx_bf16"})
BF16_VECTOR_FLAGS = frozenset({"avx512_bf16", "bf16"})
FP16_FLAGS = frozenset({"amx_fp16", "avx512_fp16"})
#: Arm half-precision arithmetic: present on most aarch64 CPUs, seldom used by TensorFlow.
ARM_HALF_FLAGS = frozenset({"fp16", "asimdhp"})


#: How to install each Keras 3 backend: TensorFlow is a dependency of mptune itself, JAX and
#: PyTorch are its extras (pyproject.toml). On an NVIDIA GPU, JAX needs its CUDA build too
#: (``pip install 'jax[cuda12]'``).
INSTALL_HINTS: dict[str, str] = {
    TENSORFLOW: "pip install tensorflow",
    JAX: "pip install 'mptune[jax]'",
    TORCH: "pip install 'mptune[torch]'",
}


def _capability_text(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def _capability(value: Any) -> tuple[int, int]:
    """A compute capability as stored: ``"8.0"``, or ``[8, 0]``."""
    if isinstance(value, str):
        major, _, minor = value.partition(".")
        return int(major), int(minor or 0)
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU as NVML reports it; a field NVML does not support is ``None``.

    Memory is in MiB (NVML's bytes / 2**20); clocks are the maximum clocks.
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = coded(_capability_text, _capability)
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
        """The compute capability as NVIDIA writes it, e.g. ``"8.0"``."""
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`);
        ``compute_capability`` as ``"8.0"`` or ``None``."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        """Inverse of :meth:`to_dict`; also takes ``compute_capability`` as ``[8, 0]``."""
        return from_data(cls, data)


@dataclass(frozen=True)
class CpuInfo:
    """The CPU and the instruction sets that decide whether low precision can be fast.

    Attributes:
        model: the marketing name, e.g. ``"AMD EPYC 9654"``; ``None`` when the OS does not say.
        arch: ``platform.machine()``, e.g. ``"x86_64"`` or ``"aarch64"``.
        physical_cores: psutil's count; ``None`` when it cannot tell (some containers).
        logical_cores: hardware threads.
        ram_total_mb: total RAM in MiB.
        flags: only the relevant instruction sets present (see :mod:`tuner.hardware.cpu`).
    """

    model: str | None = None
    arch: str = ""
    physical_cores: int | None = None
    logical_cores: int | None = None
    ram_total_mb: float | None = None
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuInfo:
        """Inverse of :meth:`to_dict` (a field stored before it was read: its default)."""
        return from_data(cls, data)


@dataclass(frozen=True)
class SoftwareInfo:
    """Versions, and what TensorFlow was built with (read without importing anything).

    Attributes:
        jax, jaxlib, torch: the versions of the other Keras 3 backends' packages; ``None`` when
            not installed (a profile stored before they were read has ``None`` too).
        tf_cuda_libraries_missing: the CUDA libraries a CUDA build of TensorFlow loads that
            were found nowhere it looks (its ``nvidia-*`` pip packages, the loader's paths);
            ``()`` when all were found, ``None`` when not checked (no CUDA build, or a profile
            stored before they were looked for).
        jax_is_cuda_build, jax_cuda_version: whether JAX can run on CUDA (a
            ``jax-cudaNN-plugin``, or an old jaxlib built with CUDA) and for which CUDA major
            version (``"12"``); ``None`` when JAX is not installed or it was not read.
        torch_is_cuda_build, torch_cuda_version: the same for PyTorch, from its
            ``torch/version.py`` (``cuda = '12.6'``; ``None`` in a CPU or ROCm build).
    """

    python: str = ""
    tensorflow: str | None = None
    keras: str | None = None
    tf_keras: str | None = None
    tf_cuda_version: str | None = None
    tf_cudnn_version: str | None = None
    tf_is_cuda_build: bool | None = None
    tf_cuda_compute_capabilities: tuple[str, ...] = ()
    jax: str | None = None
    jaxlib: str | None = None
    torch: str | None = None
    tf_cuda_libraries_missing: tuple[str, ...] | None = None
    jax_is_cuda_build: bool | None = None
    jax_cuda_version: str | None = None
    torch_is_cuda_build: bool | None = None
    torch_cuda_version: str | None = None

    @property
    def backends(self) -> dict[str, str | None]:
        """Each Keras 3 backend (:data:`tuner.policies.BACKENDS`) and its installed version;
        ``None`` when it cannot run here. JAX needs ``jaxlib`` beside ``jax`` (its compiled
        half): ``jax`` alone counts as not installed."""
        return {
            TENSORFLOW: self.tensorflow,
            JAX: self.jax if self.jaxlib else None,
            TORCH: self.torch,
        }

    @property
    def missing_backends(self) -> dict[str, str]:
        """Each backend that is not installed, with the command that installs it."""
        return {name: INSTALL_HINTS[name] for name, v in self.backends.items() if not v}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`), and what they
        mean for the backends (``backends``, ``missing_backends``: not read back)."""
        return {
            **to_data(self),
            "backends": self.backends,
            "missing_backends": self.missing_backends,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SoftwareInfo:
        """Inverse of :meth:`to_dict`."""
        return from_data(cls, data)


@dataclass(frozen=True)
class PolicyAdvice:
    """A policy worth trying and why.

    Attributes:
        policy: one of :data:`tuner.policies.POLICIES`.
        reason: one sentence, for people.
    """

    policy: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyAdvice:
        """Inverse of :meth:`to_dict`."""
        return from_data(cls, data, policy=str(data["policy"]))


def _flatten_parentheses(text: str) -> str:
    # The reason goes inside the verdict's own parentheses; nested ones read badly.
    return re.sub(r"\s*\(([^()]*)\)", r", \1", text)


@dataclass(frozen=True)
class HardwareProfile:
    """Everything ``mptune detect`` reports.

    Attributes:
        gpus: every NVIDIA GPU NVML sees, by index; empty when none.
        gpu_unavailable_reason: why ``gpus`` is empty (``None`` when it is not).
        driver_version: the NVIDIA driver, e.g. ``"550.90.07"``.
        cuda_driver_version: the newest CUDA the driver supports, e.g. ``"12.4"``.
        cpu: the CPU.
        software: Python, TensorFlow, Keras and the other Keras backends.
        advice: every policy, most promising first (:func:`tuner.hardware.advice.advise`).
    """

    gpus: tuple[GpuInfo, ...] = ()
    gpu_unavailable_reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cpu: CpuInfo = field(default_factory=CpuInfo)
    software: SoftwareInfo = field(default_factory=SoftwareInfo)
    advice: tuple[PolicyAdvice, ...] = ()

    @property
    def verdict(self) -> str:
        """One sentence: what this machine means for mixed precision (GPU 0 decides), on
        TensorFlow, mptune's default backend (:meth:`verdict_for` another)."""
        return self.verdict_for(TENSORFLOW)

    def verdict_for(self, backend: str | None, detail: bool = True) -> str:
        """:attr:`verdict` for trials on ``backend``. Where the backend cannot use the GPU NVML
        sees, the verdict is the CPU's, where its trials would run (so that it never promises
        what the GPU would do above a warning that the GPU goes unused), then the GPU's once
        the backend can use it; ``detail``: with why it cannot and the command that fixes it
        (a face that says those on a line of their own leaves them out). ``None``: the
        hardware's verdict alone."""
        if self.gpus:
            verdict = self._gpu_verdict(self.gpus[0])
            unused = unused_gpu(self, backend) if backend else None
            if unused is None:
                return verdict
            name = BACKEND_NAMES.get(unused.backend, unused.backend)
            why = f" ({unused.reason})" if detail and unused.reason else ""
            fix = f" (fix it with {unused.fix})" if detail and unused.fix else ""
            return (
                f"{name} cannot use the GPU{why}, so trials would run on the CPU: "
                f"{self._cpu_verdict()}. Once it can{fix}, on the GPU: {verdict}"
            )
        reason = self.gpu_unavailable_reason or "reason unknown"
        head = (
            reason
            if reason.startswith("no NVIDIA GPU")
            else f"no NVIDIA GPU found ({_flatten_parentheses(reason)})"
        )
        return f"{head}: {self._cpu_verdict()}"

    @property
    def unused_gpus(self) -> tuple[UnusedGpu, ...]:
        """For each installed backend that cannot use the GPUs NVML sees, why and the fix
        (:mod:`tuner.hardware.gpu_use`); empty when every one can, or there is no GPU."""
        return unused_gpus(self)

    @staticmethod
    def _gpu_verdict(gpu: GpuInfo) -> str:
        name = gpu.name or f"GPU {gpu.index}"
        units = gpu.units
        if units is None:
            return f"{name}: compute capability unknown, so measure before trusting any policy"
        if units.bf16_tensor_cores:
            return f"{units.summary}: mixed precision should pay here"
        if units.fp16_tensor_cores:
            return (
                f"{units.summary}: mixed_float16 should pay here, mixed_bfloat16 has no "
                "Tensor Cores"
            )
        return (
            f"{name} has no Tensor Cores: float32 is expected to be fastest, and mixed "
            "precision saves memory only"
        )

    def _cpu_verdict(self) -> str:
        flags = set(self.cpu.flags)
        if flags & BF16_MATRIX_FLAGS:
            return "this CPU's AMX bfloat16 units should make mixed_bfloat16 pay"
        bf16 = sorted(flags & BF16_VECTOR_FLAGS)
        if bf16:
            return (
                f"on this CPU float32 is expected to be fastest, though {', '.join(bf16)} "
                "may make mixed_bfloat16 pay: measure"
            )
        fp16 = sorted(flags & FP16_FLAGS)
        if fp16:
            return f"this CPU's {', '.join(fp16)} may make mixed_float16 pay: measure"
        return "on this CPU float32 is expected to be fastest"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the layout ``mptune detect --json`` prints (``schema`` 1): the
        declared fields (:mod:`tuner.record`), then what is read from them."""
        return {
            **to_data(self),
            "verdict": self.verdict,
            "unused_gpus": [u.to_dict() for u in self.unused_gpus],
            "schema": SCHEMA,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareProfile:
        """Inverse of :meth:`to_dict` (``verdict`` and ``unused_gpus`` are recomputed, not
        read); a part stored empty or not at all is its default."""
        return from_data(cls, data)
