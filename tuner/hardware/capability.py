"""What an NVIDIA compute capability means for low-precision training.

Sources for the table:

* NVIDIA CUDA C++ Programming Guide, "Compute Capabilities" (feature and architecture per
  capability) and "Arithmetic Instructions" (the throughput table: 16-bit floating-point
  add/multiply results per clock per SM, which gives the float16 rate relative to float32).
* NVIDIA architecture whitepapers: Volta V100 (first Tensor Cores, float16), Turing TU102
  (second-generation Tensor Cores), Ampere GA100 (third generation: bfloat16 and TF32), Ada
  Lovelace AD102 (fourth generation: FP8), Hopper H100 (fourth generation with the FP8
  Transformer Engine), Blackwell (fifth generation: FP8, FP6, FP4).
* TensorFlow mixed precision guide: float16 speed-ups need compute capability 7.0 or higher;
  bfloat16 needs Ampere (8.0) or newer.

Consumer Pascal (6.1) runs float16 arithmetic at 1/64 of its float32 rate (the throughput
table), so mixed precision there saves memory only; the P100 (6.0), Jetson TX1/Nano (5.3) and
Jetson TX2 (6.2) run it at twice the float32 rate, but none of them has Tensor Cores.

A compute capability does not always decide the units: the Turing TU116/TU117 chips (GeForce
GTX 16 series, MX450/MX550, T400-T1200) are capability 7.5 but were built without Tensor Cores
(NVIDIA's GTX 1660 Ti launch material: TU116 has dedicated FP16 units instead). ``units_for``
takes the GPU's name to catch them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tuner.record import from_data, to_data


@dataclass(frozen=True)
class CapabilityUnits:
    """The low-precision units of a compute capability.

    Attributes:
        architecture: NVIDIA's architecture name, e.g. ``"Ampere"``.
        tensor_cores: whether the GPU has Tensor Cores at all.
        fp16_tensor_cores: Tensor Cores that multiply float16 (what mixed_float16 needs).
        bf16_tensor_cores: Tensor Cores that multiply bfloat16 (what mixed_bfloat16 needs).
        tf32: TF32 Tensor Core mode, which TensorFlow uses for float32 matmuls by default.
        fp8: FP8 Tensor Cores (not a Keras policy; reported for completeness).
        summary: the above in a few words, for people.
    """

    architecture: str
    tensor_cores: bool
    fp16_tensor_cores: bool
    bf16_tensor_cores: bool
    tf32: bool
    fp8: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapabilityUnits:
        """Inverse of :meth:`to_dict`; keys this version does not know are ignored."""
        return from_data(cls, data)


#: What Keras 3 does with FP8 Tensor Cores (:attr:`CapabilityUnits.fp8`), for people.
#: ``model.quantize("float8")`` on a built model gives its ``Dense`` and ``EinsumDense`` layers
#: the ``float8_from_<policy>`` policy (E4M3 forward, E5M2 gradients, delayed scaling from an
#: amax history; keras/src/layers/core/dense.py, Keras 3.3 and later); XLA turns those
#: quantize-matmul patterns into FP8 GEMMs on compute capability 8.9 and later with CUDA 12 or
#: later, so it can pay on JAX and on TensorFlow with ``jit_compile=True``; the PyTorch backend
#: emulates it.
FP8_IN_KERAS = (
    "FP8 Tensor Cores: Keras trains Dense and EinsumDense layers in float8 after "
    'model.quantize("float8") on the built model, as FP8 matmuls on JAX or on TensorFlow with '
    "XLA (jit_compile=True; PyTorch emulates it, no gain); whether it pays depends on the "
    "layers' sizes: mptune does not search it yet, so measure it against mixed_bfloat16"
)


@dataclass(frozen=True)
class _Row:
    first: tuple[int, int]
    units: CapabilityUnits


def _row(
    first: tuple[int, int],
    architecture: str,
    *,
    tc: bool = False,
    fp16: bool = False,
    bf16: bool = False,
    tf32: bool = False,
    fp8: bool = False,
    summary: str,
) -> _Row:
    return _Row(first, CapabilityUnits(architecture, tc, fp16, bf16, tf32, fp8, summary))


_NO_TC_SLOW_FP16 = "no Tensor Cores and no fast float16 arithmetic"
_NO_TC_FAST_FP16 = "no Tensor Cores; float16 arithmetic at twice the float32 rate"

#: Each row covers capabilities from ``first`` up to the next row's ``first``.
_TABLE: tuple[_Row, ...] = (
    _row((1, 0), "Tesla/Fermi", summary=_NO_TC_SLOW_FP16),
    _row((3, 0), "Kepler", summary=_NO_TC_SLOW_FP16),
    _row((5, 0), "Maxwell", summary=_NO_TC_SLOW_FP16),
    _row((5, 3), "Maxwell", summary=_NO_TC_FAST_FP16 + " (Jetson TX1/Nano)"),
    _row((6, 0), "Pascal", summary=_NO_TC_FAST_FP16 + " (P100)"),
    _row(
        (6, 1), "Pascal", summary="no Tensor Cores; float16 arithmetic at 1/64 of the float32 rate"
    ),
    _row((6, 2), "Pascal", summary=_NO_TC_FAST_FP16 + " (Jetson TX2)"),
    # 7.2 (Jetson Xavier) is Volta too.
    _row((7, 0), "Volta", tc=True, fp16=True, summary="float16 Tensor Cores"),
    _row((7, 5), "Turing", tc=True, fp16=True, summary="float16 Tensor Cores"),
    # 8.6 (GeForce RTX 30, A10, A40) and 8.7 (Jetson Orin) are Ampere too.
    _row(
        (8, 0),
        "Ampere",
        tc=True,
        fp16=True,
        bf16=True,
        tf32=True,
        summary="float16 and bfloat16 Tensor Cores, TF32",
    ),
    _row(
        (8, 9),
        "Ada Lovelace",
        tc=True,
        fp16=True,
        bf16=True,
        tf32=True,
        fp8=True,
        summary="float16, bfloat16 and FP8 Tensor Cores, TF32",
    ),
    _row(
        (9, 0),
        "Hopper",
        tc=True,
        fp16=True,
        bf16=True,
        tf32=True,
        fp8=True,
        summary="float16, bfloat16 and FP8 Tensor Cores, TF32",
    ),
    # 10.x (B200), 11.0 (Jetson Thor) and 12.x (GeForce RTX 50, RTX PRO) are all Blackwell.
    _row(
        (10, 0),
        "Blackwell",
        tc=True,
        fp16=True,
        bf16=True,
        tf32=True,
        fp8=True,
        summary="float16, bfloat16, FP8 and FP4 Tensor Cores, TF32",
    ),
)

#: The newest major capability the table knows by name; newer ones get its units.
NEWEST_KNOWN_MAJOR = 12

#: TU116/TU117 products, as NVML names them ("NVIDIA GeForce GTX 1660 Ti", "NVIDIA T1000").
_TURING_WITHOUT_TENSOR_CORES = re.compile(
    r"GTX\s*16\d0|\bMX\s*[45]50\b|\bT(?:400|550|600|1000|1200)\b", re.IGNORECASE
)


def units_for(capability: tuple[int, int], name: str | None = None) -> CapabilityUnits:
    """The low-precision units of a GPU.

    Args:
        capability: the CUDA compute capability, ``(major, minor)``.
        name: the GPU's name, if known; only used to recognise the capability-7.5 chips that
            have no Tensor Cores.

    Returns:
        The last table row at or below ``capability``. A capability newer than the table gets
        the newest row's units (each architecture so far kept every older unit), with the
        architecture named as unknown.
    """
    cc = (int(capability[0]), int(capability[1]))
    units = _TABLE[0].units
    for row in _TABLE:
        if row.first <= cc:
            units = row.units
    if cc[0] > NEWEST_KNOWN_MAJOR:
        return CapabilityUnits(
            f"newer than {units.architecture}",
            units.tensor_cores,
            units.fp16_tensor_cores,
            units.bf16_tensor_cores,
            units.tf32,
            units.fp8,
            units.summary + " (assumed from the newest known GPUs)",
        )
    if cc == (7, 5) and name and _TURING_WITHOUT_TENSOR_CORES.search(name):
        return CapabilityUnits(
            "Turing", False, False, False, False, False, _NO_TC_FAST_FP16 + " (TU116/TU117 chip)"
        )
    return units
