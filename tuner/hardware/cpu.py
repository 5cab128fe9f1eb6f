"""The CPU: model, cores, RAM, and the instruction sets that make low precision fast."""

from __future__ import annotations

import platform
import subprocess
import sys

import psutil

from tuner.hardware.profile import CpuInfo

#: Flags that matter for low-precision training, as /proc/cpuinfo spells them.
X86_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_fp16")
ARM_FLAGS = ("fp16", "asimdhp", "bf16", "sve", "sve2", "i8mm")


def parse_cpuinfo(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The model name and the relevant flags from ``/proc/cpuinfo`` text (x86 or Arm)."""
    model = None
    raw: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None and value.strip():
            model = value.strip()
        elif key in ("flags", "features") and not raw:
            raw = set(value.split())
    wanted = X86_FLAGS if raw & set(X86_FLAGS) or "sse2" in raw else ARM_FLAGS
    return model, tuple(f for f in wanted if f in raw)


def _macos_cpu() -> tuple[str | None, tuple[str, ...]]:
    try:
        brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                               text=True, timeout=2).stdout.strip() or None
        bf16 = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True,
                              text=True, timeout=2).stdout.strip() == "1"
    except (OSError, subprocess.SubprocessError):
        return None, ()
    return brand, (("bf16",) if bf16 else ())


def read_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> CpuInfo:
    """Read this machine's CPU."""
    model, flags = None, ()
    if sys.platform.startswith("linux"):
        try:
            with open(cpuinfo_path, encoding="utf-8", errors="replace") as fh:
                model, flags = parse_cpuinfo(fh.read())
        except OSError:
            pass
    elif sys.platform == "darwin":
        model, flags = _macos_cpu()
    memory = psutil.virtual_memory()
    return CpuInfo(
        model=model or platform.processor() or None,
        arch=platform.machine(),
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True),
        ram_total_mb=memory.total / 2**20,
        flags=flags,
    )
