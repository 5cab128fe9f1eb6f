"""What an NVIDIA compute capability means for low-precision training.

Sources for the table:

* NVIDIA CUDA C++ Programming Guide, "Compute Capabilities" and the arithmetic-instruction
  throughput table (half-precision rate per architecture; Tensor Core generations).
* NVIDIA architecture whitepapers: Volta V100 (first Tensor Cores, float16), Turing TU102
  (second-generation Tensor Cores), Ampere GA100 (bfloat16 and TF32 Tensor Cores), Ada Lovelace
  AD102 (fourth-generation Tensor Cores, FP8), Hopper H100 (FP8 Transformer Engine), Blackwell
  (FP8, FP6, FP4).
* TensorFlow mixed precision guide: float16 speed-ups need compute capability 7.0 or higher;
  bfloat16 needs Ampere (8.0) or newer.

Consumer Pascal (6.1) runs float16 arithmetic at 1/64 of its float32 rate (CUDA programming guide
throughput table), so mixed precision there saves memory only; the P100 (6.0) runs it at twice
the float32 rate but has no Tensor Cores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class CapabilityUnits:
    """The low-precision units of a compute capability."""

    architecture: str
    tensor_cores: bool
    fp16_tensor_cores: bool
    bf16_tensor_cores: bool
    tf32: bool
    fp8: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# (first capability of the row, architecture, tensor cores, fp16 TC, bf16 TC, tf32, fp8, summary)
_TABLE: tuple[tuple[tuple[int, int], str, bool, bool, bool, bool, bool, str], ...] = (
    ((3, 0), "Kepler", False, False, False, False, False,
     "no Tensor Cores and no fast float16 arithmetic"),
    ((5, 0), "Maxwell", False, False, False, False, False,
     "no Tensor Cores and no fast float16 arithmetic"),
    ((6, 0), "Pascal", False, False, False, False, False,
     "no Tensor Cores; float16 arithmetic at twice the float32 rate (P100)"),
    ((6, 1), "Pascal", False, False, False, False, False,
     "no Tensor Cores; float16 arithmetic at 1/64 of the float32 rate"),
    ((7, 0), "Volta", True, True, False, False, False, "float16 Tensor Cores"),
    ((7, 5), "Turing", True, True, False, False, False, "float16 Tensor Cores"),
    ((8, 0), "Ampere", True, True, True, True, False,
     "float16 and bfloat16 Tensor Cores, TF32"),
    ((8, 9), "Ada Lovelace", True, True, True, True, True,
     "float16, bfloat16 and FP8 Tensor Cores, TF32"),
    ((9, 0), "Hopper", True, True, True, True, True,
     "float16, bfloat16 and FP8 Tensor Cores, TF32"),
    ((10, 0), "Blackwell", True, True, True, True, True,
     "float16, bfloat16, FP8 and FP4 Tensor Cores, TF32"),
)


def units_for(capability: tuple[int, int]) -> CapabilityUnits:
    """The units of ``capability``: the last table row at or below it (an unknown newer
    capability gets the newest row)."""
    row = _TABLE[0]
    for candidate in _TABLE:
        if candidate[0] <= tuple(capability):
            row = candidate
    _, arch, tc, fp16, bf16, tf32, fp8, summary = row
    return CapabilityUnits(arch, tc, fp16, bf16, tf32, fp8, summary)
