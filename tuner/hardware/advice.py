"""Which precision policies are worth trying on this machine, in order, and why.

This is a prior, not a verdict: the search measures every policy it is given. The rules follow
the hardware tables in :mod:`tuner.hardware.capability` and, for CPUs, what was measured on this
project's machines (docs/benchmarks.md): without bfloat16/float16 units mixed precision ran 2-4x
slower than float32 on a small CNN.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.hardware.profile import CpuInfo, GpuInfo, PolicyAdvice
from tuner.policies import FLOAT32, MIXED_BFLOAT16, MIXED_FLOAT16


def advise(gpus: Sequence[GpuInfo], cpu: CpuInfo) -> tuple[PolicyAdvice, ...]:
    """Every policy, most promising first, each with a one-sentence reason. Only the first GPU
    counts: it is the one trials run on by default."""
    if gpus:
        return _gpu_advice(gpus[0])
    return _cpu_advice(cpu)


def _gpu_advice(gpu: GpuInfo) -> tuple[PolicyAdvice, ...]:
    cc = gpu.compute_capability
    name = gpu.name or f"GPU {gpu.index}"
    if cc is None:
        return (
            PolicyAdvice(FLOAT32, f"{name}: compute capability unknown, so float32 is the safe "
                                  "baseline"),
            PolicyAdvice(MIXED_FLOAT16, "float16 pays on GPUs with Tensor Cores (7.0 and newer)"),
            PolicyAdvice(MIXED_BFLOAT16, "bfloat16 pays on Ampere (8.0) and newer"),
        )
    text = f"{cc[0]}.{cc[1]}"
    if cc >= (8, 0):
        return (
            PolicyAdvice(MIXED_FLOAT16, f"compute capability {text} has float16 Tensor Cores: "
                                        "usually the fastest, with dynamic loss scaling"),
            PolicyAdvice(MIXED_BFLOAT16, f"compute capability {text} has bfloat16 Tensor Cores: "
                                         "as fast as float16 on most layers and needs no loss "
                                         "scaling"),
            PolicyAdvice(FLOAT32, f"the baseline; on {text} TensorFlow already runs float32 "
                                  "matmuls as TF32 on Tensor Cores"),
        )
    if cc >= (7, 0):
        return (
            PolicyAdvice(MIXED_FLOAT16, f"compute capability {text} has float16 Tensor Cores: "
                                        "mixed_float16 should be 2-3x faster than float32"),
            PolicyAdvice(FLOAT32, "the baseline"),
            PolicyAdvice(MIXED_BFLOAT16, f"compute capability {text} has no bfloat16 Tensor "
                                         "Cores: bfloat16 is emulated and slow"),
        )
    return (
        PolicyAdvice(FLOAT32, f"compute capability {text} has no Tensor Cores: float32 is "
                              "usually fastest"),
        PolicyAdvice(MIXED_FLOAT16, "no Tensor Cores: mixed_float16 can halve activation "
                                    "memory, but rarely speeds training up"),
        PolicyAdvice(MIXED_BFLOAT16, f"compute capability {text} has no bfloat16 units: "
                                     "emulated, slow"),
    )


def _cpu_advice(cpu: CpuInfo) -> tuple[PolicyAdvice, ...]:
    flags = set(cpu.flags)
    bf16_matrix = "amx_bf16" in flags
    bf16_vector = bool(flags & {"avx512_bf16", "bf16"})
    fp16_units = bool(flags & {"amx_fp16", "avx512_fp16"})
    f32 = PolicyAdvice(FLOAT32, "no NVIDIA GPU: training runs on the CPU, where float32 is the "
                                "baseline")
    if bf16_matrix:
        bf16 = PolicyAdvice(MIXED_BFLOAT16, "this CPU has AMX bfloat16 matrix units: oneDNN "
                                            "runs bfloat16 matmuls and convolutions much faster "
                                            "than float32")
    elif bf16_vector:
        names = ", ".join(sorted(flags & {"avx512_bf16", "bf16"}))
        bf16 = PolicyAdvice(MIXED_BFLOAT16, f"this CPU has {names}, which may make bfloat16 "
                                            "matmuls and convolutions faster through oneDNN; "
                                            "measure")
    else:
        bf16 = PolicyAdvice(MIXED_BFLOAT16, "no bfloat16 units on this CPU: bfloat16 is "
                                            "converted in software, measured about 4x slower "
                                            "than float32 on a small CNN")
    if fp16_units:
        names = ", ".join(sorted(flags & {"amx_fp16", "avx512_fp16"}))
        fp16 = PolicyAdvice(MIXED_FLOAT16, f"this CPU has {names}: float16 arithmetic in "
                                           "hardware; measure")
    else:
        fp16 = PolicyAdvice(MIXED_FLOAT16, "no float16 units on this CPU: mixed_float16 measured "
                                           "2-4x slower than float32 on a small CNN")
    if bf16_matrix:
        order = [bf16, f32, fp16]
    elif fp16_units and not bf16_vector:
        order = [fp16, f32, bf16]
    elif bf16_vector:
        order = [f32, bf16, fp16]
    else:
        order = [f32, fp16, bf16]
    return tuple(order)
