"""``mptune detect``'s readable summary."""

from __future__ import annotations

from tuner.hardware.profile import HardwareProfile


def _na(value: object, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def render_text(profile: HardwareProfile) -> str:
    lines: list[str] = []
    if profile.gpus:
        lines.append(f"NVIDIA driver {_na(profile.driver_version)}, CUDA "
                     f"{_na(profile.cuda_driver_version)}")
        for gpu in profile.gpus:
            units = gpu.units.summary if gpu.units else "unknown units"
            arch = f" {gpu.units.architecture}" if gpu.units else ""
            lines.append(f"GPU {gpu.index}: {_na(gpu.name)} (compute capability "
                         f"{_na(gpu.capability_text)}{arch}): {units}")
            lines.append(f"       memory {_na(gpu.memory_used_mb, '{:,.0f}')} / "
                         f"{_na(gpu.memory_total_mb, '{:,.0f}')} MB used, power limit "
                         f"{_na(gpu.power_limit_w, '{:.0f} W')}, clocks SM "
                         f"{_na(gpu.sm_clock_mhz, '{} MHz')} / memory "
                         f"{_na(gpu.memory_clock_mhz, '{} MHz')}, MIG "
                         f"{_na(None if gpu.mig_mode is None else ('on' if gpu.mig_mode else 'off'))}")
    else:
        lines.append(f"GPU: none ({profile.gpu_unavailable_reason})")
    cpu = profile.cpu
    lines.append(f"CPU: {_na(cpu.model)} ({cpu.arch}), {_na(cpu.physical_cores)} cores / "
                 f"{_na(cpu.logical_cores)} threads, {_na(cpu.ram_total_mb, '{:,.0f}')} MB RAM")
    lines.append(f"     instruction sets: {', '.join(cpu.flags) or 'none of the relevant ones'}")
    sw = profile.software
    build = (f"built with CUDA {_na(sw.tf_cuda_version)}, cuDNN {_na(sw.tf_cudnn_version)}"
             if sw.tf_is_cuda_build else "CPU-only build" if sw.tf_is_cuda_build is False
             else "build info n/a")
    lines.append(f"Software: Python {sw.python}, TensorFlow {_na(sw.tensorflow)} ({build}), "
                 f"Keras {_na(sw.keras)}" + (f", tf_keras {sw.tf_keras}" if sw.tf_keras else ""))
    lines.append("")
    lines.append("Advice (most promising first):")
    for i, advice in enumerate(profile.advice, 1):
        lines.append(f"  {i}. {advice.policy:15s} {advice.reason}")
    lines.append("")
    lines.append(f"Verdict: {profile.verdict}")
    return "\n".join(lines)
