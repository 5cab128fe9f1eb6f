"""Shared by the benchmarks: write a section of docs/benchmarks.md between markers."""

from __future__ import annotations

import platform
import re
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"

_HEADER = """# Benchmarks

Each section below is written by a script in `bench/`; rerun it to refresh the figures. Figures
are ratios measured side by side in one run on one machine, so they compare like with like;
absolute numbers depend on the machine named in each section.
"""


def machine_line() -> str:
    """One line naming the machine the figures come from, with the CPU's low-precision units."""
    from tuner.hardware import detect

    profile = detect()
    cpu = profile.cpu
    flags = ", ".join(cpu.flags) or "no relevant instruction sets"
    gpu = (
        f"; GPU {profile.gpus[0].name} (compute capability {profile.gpus[0].capability_text})"
        if profile.gpus
        else "; no NVIDIA GPU"
    )
    return (
        f"{cpu.model or platform.machine()} ({flags}), {cpu.logical_cores} logical cores, "
        f"{(cpu.ram_total_mb or 0) / 1024:.0f} GiB RAM{gpu}, Python {platform.python_version()}"
    )


def write_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the section called ``name`` in the benchmarks page."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
