"""``mptune detect``'s readable summary: plain text, about 100 columns wide."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tuner.hardware.advice import default_lines
from tuner.hardware.capability import FP8_IN_KERAS
from tuner.hardware.gpu_use import unused_gpu, unused_gpus
from tuner.hardware.profile import GpuInfo, HardwareProfile, SoftwareInfo
from tuner.policies import JAX, TENSORFLOW
from tuner.setup import BACKEND_NAMES

WIDTH = 100
#: Stands for a space that must not break a line: a command is copied whole or not at all.
_GLUE = "\x1f"


class Measured(Protocol):
    """What searches measured of a policy here (:class:`tuner.search.measured.PolicyMeasured`:
    the hardware layer does not import the search)."""

    @property
    def speedup_vs_float32(self) -> float: ...

    def words(self) -> str: ...


@dataclass(frozen=True)
class AdviceRow:
    """One policy's advice as the faces list it: its reason (the hardware prior's) and what
    searches on this kind of machine measured of it (None: not measured here)."""

    policy: str
    reason: str
    measured: str | None = None


def advice_rows(
    profile: HardwareProfile, measured: Mapping[str, Measured] | None = None
) -> list[AdviceRow]:
    """The advice in the order both faces list it: with ``measured``, the policies measured
    here first, fastest first, then those not measured yet in the prior's order; else the
    prior's order (most promising first)."""
    advice = list(profile.advice)
    if measured:
        # Measurement outranks the prior.
        advice.sort(
            key=lambda a: (
                a.policy not in measured,
                -measured[a.policy].speedup_vs_float32 if a.policy in measured else 0.0,
            )
        )
    return [
        AdviceRow(
            a.policy,
            a.reason,
            measured[a.policy].words() if measured and a.policy in measured else None,
        )
        for a in advice
    ]


def advice_heading(measured: Mapping[str, Measured] | None = None) -> str:
    """What the advice list is: ``Advice (most promising first)``, or measured first."""
    if measured:
        return "Advice (measured on this machine first, fastest first; then the prior)"
    return "Advice (most promising first)"


def _na(value: object, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _on_off(value: bool | None) -> str:
    return "n/a" if value is None else ("on" if value else "off")


def _wrap(text: str, indent: str, first: str = "", keep: str | None = None) -> list[str]:
    # A hanging indent: continuation lines line up under the text, not under the label.
    # ``keep`` (a command) is never broken across lines.
    if keep:
        text = text.replace(keep, keep.replace(" ", _GLUE))
    lines = textwrap.wrap(
        text, WIDTH, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
    ) or [first.rstrip()]
    return [line.replace(_GLUE, " ") for line in lines]


def _gpu_lines(gpu: GpuInfo) -> list[str]:
    units = gpu.units
    arch = f", {units.architecture}" if units else ""
    head = (
        f"GPU {gpu.index}: {_na(gpu.name)} (compute capability {_na(gpu.capability_text)}"
        f"{arch}): {units.summary if units else 'units unknown'}"
    )
    memory = (
        f"memory {_na(gpu.memory_used_mb, '{:,.0f}')} / "
        f"{_na(gpu.memory_total_mb, '{:,.0f}')} MiB used"
    )
    board = (
        f"power limit {_na(gpu.power_limit_w, '{:.0f} W')}, max clocks SM "
        f"{_na(gpu.sm_clock_mhz, '{} MHz')} / memory {_na(gpu.memory_clock_mhz, '{} MHz')}, "
        f"MIG {_on_off(gpu.mig_mode)}"
    )
    indent = "       "
    lines = _wrap(head, indent) + _wrap(memory, indent, indent) + _wrap(board, indent, indent)
    if units is not None and units.fp8:
        lines += _wrap(FP8_IN_KERAS, indent, indent)
    return lines


def backends_text(software: SoftwareInfo) -> str:
    """The Keras 3 backends installed, with their versions, then the missing ones with the
    command that installs each: ``Keras backends: TensorFlow 2.21.0, JAX 0.6.2 (jaxlib
    0.6.2); not installed: PyTorch (pip install 'mptune[torch]')``."""
    installed, missing = [], []
    hints = software.missing_backends
    for name, version in software.backends.items():
        label = BACKEND_NAMES[name]
        if version:
            jaxlib = f" (jaxlib {software.jaxlib})" if name == JAX else ""
            installed.append(f"{label} {version}{jaxlib}")
        else:
            partial = f"jax {software.jax} without jaxlib: " if name == JAX and software.jax else ""
            missing.append(f"{label} ({partial}{hints[name]})")
    text = f"Keras backends: {', '.join(installed) or 'none'}"
    return text + (f"; not installed: {', '.join(missing)}" if missing else "")


def _gpu_section(profile: HardwareProfile) -> list[str]:
    """The driver and each GPU, then a warning for each backend that cannot use them; or why
    there is no GPU."""
    if not profile.gpus:
        return _wrap(f"GPU: none - {_na(profile.gpu_unavailable_reason)}", "     ")
    lines = [
        f"NVIDIA driver {_na(profile.driver_version)}, CUDA {_na(profile.cuda_driver_version)}"
    ]
    installed = [name for name, version in profile.software.backends.items() if version]
    for gpu in profile.gpus:
        lines += _gpu_lines(gpu)
        if installed and gpu.compute_capability and tuple(gpu.compute_capability) >= (8, 0):
            # What the user's float32 runs in today, which speed-ups are stated against.
            lines += _wrap(f"float32 by default: {default_lines(installed)}", "       ", "       ")
    # Where the user looks first: a GPU that a backend installed here cannot use.
    for unused in unused_gpus(profile):
        reason = f": {unused.reason}" if unused.reason else ""
        lines += _wrap(f"Warning: {unused.headline}{reason}", "         ")
        if unused.fix:
            lines += _wrap(f"fix: {unused.fix}", "         ", "         ", keep=unused.fix)
    return lines


def render_text(
    profile: HardwareProfile,
    backend: str = TENSORFLOW,
    measured: Mapping[str, Measured] | None = None,
) -> str:
    """The profile as a few lines for people; missing fields read ``n/a``.

    Args:
        profile: what :func:`tuner.hardware.detect` found.
        backend: the backend the verdict is for (the one trials would run on).
        measured: per policy, what searches on this kind of machine measured of it
            (:func:`tuner.search.measured.measured_here`); each advice says it, and the
            policies measured are listed first, fastest first.

    Returns:
        GPUs (or why there are none), CPU, software, the numbered advice and the verdict,
        without a trailing newline.
    """
    lines = _gpu_section(profile)
    cpu = profile.cpu
    lines += _wrap(
        f"CPU: {_na(cpu.model)} ({cpu.arch or 'n/a'}), {_na(cpu.physical_cores)} cores "
        f"/ {_na(cpu.logical_cores)} threads, {_na(cpu.ram_total_mb, '{:,.0f}')} MiB "
        "RAM",
        "     ",
    )
    lines += _wrap(
        f"instruction sets: {', '.join(cpu.flags) or 'none of the relevant ones'}", "     ", "     "
    )
    sw = profile.software
    if sw.tf_is_cuda_build:
        build = f"built with CUDA {_na(sw.tf_cuda_version)}, cuDNN {_na(sw.tf_cudnn_version)}"
    elif sw.tf_is_cuda_build is False:
        build = "CPU-only build"
    else:
        build = "build info n/a"
    tf_keras = f", tf_keras {sw.tf_keras}" if sw.tf_keras else ""
    lines += _wrap(
        f"Software: Python {sw.python}, TensorFlow {_na(sw.tensorflow)} ({build}), "
        f"Keras {_na(sw.keras)}{tf_keras}",
        "          ",
    )
    if sw.tf_cuda_compute_capabilities:
        kernels = ", ".join(sw.tf_cuda_compute_capabilities)
        lines += _wrap(f"TensorFlow CUDA kernels for {kernels}", "          ", "          ")
    lines += _wrap(backends_text(sw), "          ", "          ")
    lines.append("")
    rows = advice_rows(profile, measured)
    lines.append(f"{advice_heading(measured)}:")
    width = max((len(row.policy) for row in rows), default=0) + 2
    for i, row in enumerate(rows, 1):
        label = f"  {i}. {row.policy:<{width}}"
        lines += _wrap(row.reason, " " * len(label), label)
        if row.measured:
            lines += _wrap(row.measured, " " * len(label), " " * len(label))
    lines.append("")
    mine = unused_gpu(profile, backend)
    lines += _wrap(
        f"Verdict: {profile.verdict_for(backend)}", "         ", keep=mine.fix if mine else None
    )
    return "\n".join(lines)
