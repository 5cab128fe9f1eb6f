"""The CPU: model, cores, RAM, and the instruction sets that make low precision fast.

Only instruction sets that change what a precision policy costs are kept:

* x86: ``avx2``, ``fma`` and ``f16c`` (oneDNN's baseline kernels and float16 conversion),
  ``avx512f``, ``avx512_bf16`` (bfloat16 dot products), ``avx512_fp16`` (float16 arithmetic),
  ``amx_tile``, ``amx_bf16`` and ``amx_fp16`` (Intel AMX matrix tiles).
* Arm (aarch64): ``fp16`` and ``asimdhp`` (half-precision scalar and SIMD arithmetic; Linux
  spells the scalar one ``fphp``), ``bf16`` (bfloat16 dot products and matrix multiply),
  ``sve``.

Linux is read from ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on Arm), macOS from one
``sysctl`` call; elsewhere the flags are empty. psutil gives cores and RAM.
"""

from __future__ import annotations

import logging
import platform
import subprocess
import sys

import psutil

from tuner.hardware.profile import CpuInfo

logger = logging.getLogger(__name__)

#: The relevant x86 flags, as /proc/cpuinfo spells them, oldest first.
X86_FLAGS: tuple[str, ...] = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
)
#: The relevant Arm flags (the names Arm's architecture manual uses).
ARM_FLAGS: tuple[str, ...] = ("fp16", "asimdhp", "bf16", "sve")
#: Linux's arm64 hwcap names that differ from those (arch/arm64/kernel/cpuinfo.c).
_ARM_LINUX_NAMES = {"fphp": "fp16"}

# aarch64 /proc/cpuinfo has no model name, only implementer and part numbers. The common server
# and board parts, from Linux's arch/arm64/include/asm/cputype.h.
_ARM_IMPLEMENTERS = {
    0x41: "Arm",
    0x4E: "NVIDIA",
    0x51: "Qualcomm",
    0x61: "Apple",
    0x48: "HiSilicon",
    0xC0: "Ampere",
    0x46: "Fujitsu",
}
_ARM_PARTS = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",
}

# macOS sysctl names, mapped to the Linux spelling so that the advice reads one vocabulary.
_SYSCTL_KEYS = (
    "machdep.cpu.brand_string",
    "machdep.cpu.features",
    "machdep.cpu.leaf7_features",
    "hw.optional.arm.FEAT_FP16",
    "hw.optional.arm.FEAT_BF16",
)
_MAC_X86 = {"AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "AVX512F": "avx512f"}
_MAC_ARM = {
    "hw.optional.arm.FEAT_FP16": ("fp16", "asimdhp"),
    "hw.optional.arm.FEAT_BF16": ("bf16",),
}


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def _arm_model(implementer: int | None, part: int | None) -> str | None:
    if implementer is None:
        return None
    vendor = _ARM_IMPLEMENTERS.get(implementer, f"implementer {implementer:#x}")
    name = _ARM_PARTS.get((implementer, part if part is not None else -1))
    if name:
        return f"{vendor} {name}"
    return f"{vendor} CPU part {part:#x}" if part is not None else f"{vendor} CPU"


def parse_cpuinfo(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The model name and the relevant flags from ``/proc/cpuinfo`` text.

    Args:
        text: the file's contents; only the first processor's block is needed (every core of
            one machine lists the same instruction sets).

    Returns:
        ``(model, flags)``: the ``model name`` line (on aarch64, built from the implementer and
        part numbers), or ``None``; and the relevant flags in :data:`X86_FLAGS` /
        :data:`ARM_FLAGS` order.
    """
    model: str | None = None
    x86: set[str] | None = None
    arm: set[str] | None = None
    implementer: int | None = None
    part: int | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        value = value.strip()
        if key == "model name" and model is None and value:
            model = value
        elif key == "flags" and x86 is None:
            x86 = set(value.split())
        elif key == "features" and arm is None:
            arm = {_ARM_LINUX_NAMES.get(word, word) for word in value.split()}
        elif key == "cpu implementer" and implementer is None:
            implementer = _int(value)
        elif key == "cpu part" and part is None:
            part = _int(value)
        if (model or part is not None) and (x86 is not None or arm is not None):
            break  # the rest of the file repeats this for every core
    if model is None:
        model = _arm_model(implementer, part)
    flags = tuple(f for f in X86_FLAGS if f in (x86 or ()))
    flags += tuple(f for f in ARM_FLAGS if f in (arm or ()))
    return model, flags


def parse_sysctl(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The model and relevant flags from ``sysctl NAME...`` output (``name: value`` lines)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    model = values.get("machdep.cpu.brand_string") or None
    words = set(
        (
            values.get("machdep.cpu.features", "")
            + " "
            + values.get("machdep.cpu.leaf7_features", "")
        )
        .upper()
        .split()
    )
    found = {linux for mac, linux in _MAC_X86.items() if mac in words}
    for key, linux_names in _MAC_ARM.items():
        if values.get(key) == "1":
            found.update(linux_names)
    return model, tuple(f for f in X86_FLAGS + ARM_FLAGS if f in found)


def _read_macos() -> tuple[str | None, tuple[str, ...]]:
    try:
        # One process for every name; names this Mac lacks go to stderr and are skipped.
        proc = subprocess.run(
            ["sysctl", *_SYSCTL_KEYS], capture_output=True, text=True, check=False, timeout=2
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("sysctl failed: %s", exc)
        return None, ()
    return parse_sysctl(proc.stdout)


def _read_linux(path: str) -> tuple[str | None, tuple[str, ...]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_cpuinfo(fh.read())
    except OSError as exc:
        logger.debug("cannot read %s: %s", path, exc)
        return None, ()


def read_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> CpuInfo:
    """Read this machine's CPU; never raises (what cannot be read is ``None`` or empty).

    Args:
        cpuinfo_path: where Linux keeps the CPU description (a parameter for tests).
    """
    model: str | None = None
    flags: tuple[str, ...] = ()
    if sys.platform.startswith("linux"):
        model, flags = _read_linux(cpuinfo_path)
    elif sys.platform == "darwin":
        model, flags = _read_macos()
    else:
        # Only off Linux: there platform.processor() spawns `uname -p`, and says little.
        model = platform.processor() or None
    try:
        physical = psutil.cpu_count(logical=False)
        logical = psutil.cpu_count(logical=True)
    except Exception as exc:  # noqa: BLE001 - an odd container must not break detection
        logger.debug("psutil.cpu_count failed: %s", exc)
        physical = logical = None
    try:
        ram: float | None = psutil.virtual_memory().total / 2**20
    except Exception as exc:  # noqa: BLE001
        logger.debug("psutil.virtual_memory failed: %s", exc)
        ram = None
    return CpuInfo(
        model=model,
        arch=platform.machine(),
        physical_cores=physical,
        logical_cores=logical,
        ram_total_mb=ram,
        flags=flags,
    )
