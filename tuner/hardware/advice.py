"""Which precision policies are worth trying on this machine, in order, and why.

This is a prior, not a verdict: the search measures every policy it is given, in this order.
The GPU rules follow :mod:`tuner.hardware.capability` (Tensor Core generations) and the
TensorFlow mixed precision guide. The CPU rules follow what oneDNN, TensorFlow's CPU kernel
library, accelerates, and what was measured on this project's machines (docs/benchmarks.md):
without bfloat16/float16 units mixed precision ran 2-4x slower than float32 on a small CNN.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.hardware.profile import (
    ARM_HALF_FLAGS,
    BF16_MATRIX_FLAGS,
    BF16_VECTOR_FLAGS,
    FP16_FLAGS,
    CpuInfo,
    GpuInfo,
    PolicyAdvice,
)
from tuner.policies import FLOAT32, JAX, MIXED_BFLOAT16, MIXED_FLOAT16, TENSORFLOW, TORCH
from tuner.setup import TF32


def advise(gpus: Sequence[GpuInfo], cpu: CpuInfo) -> tuple[PolicyAdvice, ...]:
    """Every policy in :data:`tuner.policies.POLICIES`, most promising first.

    Args:
        gpus: the GPUs NVML found; only the first counts, since trials run on GPU 0.
        cpu: the CPU; it decides when there is no GPU.

    Returns:
        Three :class:`PolicyAdvice`, each with a one-sentence reason.
    """
    if gpus:
        return _gpu_advice(gpus[0])
    return _cpu_advice(cpu)


def _gpu_advice(gpu: GpuInfo) -> tuple[PolicyAdvice, ...]:
    units = gpu.units
    cc = gpu.capability_text
    if units is None:
        name = gpu.name or f"GPU {gpu.index}"
        return (
            PolicyAdvice(
                FLOAT32, f"{name}'s compute capability is unknown, so float32 is the safe baseline"
            ),
            PolicyAdvice(
                MIXED_FLOAT16,
                "float16 pays on GPUs with Tensor Cores (compute capability 7.0 and newer)",
            ),
            PolicyAdvice(
                MIXED_BFLOAT16,
                "bfloat16 pays on GPUs with bfloat16 Tensor Cores "
                "(compute capability 8.0 and newer)",
            ),
        )
    where = f"compute capability {cc} ({units.architecture})"
    if units.bf16_tensor_cores:
        # float16 goes first: on the same Tensor Cores it is as fast or a little faster, and
        # its loss scaling is what the search exists to tune; bfloat16 is the simpler setup.
        return (
            PolicyAdvice(
                MIXED_FLOAT16,
                f"{where} has float16 Tensor Cores: usually the fastest "
                "policy there, but it needs loss scaling, which the "
                "search tunes",
            ),
            PolicyAdvice(
                MIXED_BFLOAT16,
                f"{where} has bfloat16 Tensor Cores too: about as fast "
                "as float16 and needs no loss scaling",
            ),
            PolicyAdvice(
                FLOAT32,
                f"the baseline; {cc} Tensor Cores also run float32 matmuls in TF32, which the "
                "search tries as its own setting (float32+tf32: float32 storage, TF32 matmuls)",
            ),
        )
    if units.fp16_tensor_cores:
        return (
            PolicyAdvice(
                MIXED_FLOAT16,
                f"{where} has float16 Tensor Cores: mixed_float16 is "
                "typically 2-3x faster than float32 on matmul-heavy "
                "models",
            ),
            PolicyAdvice(FLOAT32, "the baseline, and the fallback where float16 diverges"),
            PolicyAdvice(
                MIXED_BFLOAT16,
                f"{where} has no bfloat16 Tensor Cores: bfloat16 is "
                "emulated and usually slower than float32",
            ),
        )
    return (
        PolicyAdvice(FLOAT32, f"{where} has no Tensor Cores: float32 is usually fastest"),
        PolicyAdvice(
            MIXED_FLOAT16,
            "mixed_float16 can halve activation memory, but without "
            "Tensor Cores it rarely speeds training up",
        ),
        PolicyAdvice(
            MIXED_BFLOAT16, f"{where} has no bfloat16 units: bfloat16 is emulated and slow"
        ),
    )


def _cpu_advice(cpu: CpuInfo) -> tuple[PolicyAdvice, ...]:
    flags = set(cpu.flags)
    bf16_matrix = bool(flags & BF16_MATRIX_FLAGS)
    bf16_vector = sorted(flags & BF16_VECTOR_FLAGS)
    fp16_units = sorted(flags & FP16_FLAGS)
    arm_half = sorted(flags & ARM_HALF_FLAGS)

    if bf16_matrix:
        order = [
            PolicyAdvice(
                MIXED_BFLOAT16,
                "this CPU has AMX bfloat16 tile units (amx_bf16): "
                "oneDNN runs bfloat16 matmuls and convolutions on them, "
                "several times faster than float32",
            ),
            PolicyAdvice(FLOAT32, "the CPU baseline, which AMX bfloat16 units usually beat"),
        ]
    elif bf16_vector:
        order = [
            PolicyAdvice(
                FLOAT32,
                "no NVIDIA GPU and no AMX units: float32 is the CPU baseline and often the fastest",
            ),
            PolicyAdvice(
                MIXED_BFLOAT16,
                f"{', '.join(bf16_vector)} may make bfloat16 matmuls "
                "and convolutions faster through oneDNN; measure",
            ),
        ]
    else:
        order = [
            PolicyAdvice(
                FLOAT32,
                "no bf16/AMX units on this CPU: mixed precision measured 2-4x "
                "slower than float32 on a small CNN, so float32 is expected "
                "to be fastest",
            ),
            PolicyAdvice(
                MIXED_BFLOAT16,
                "no bfloat16 units on this CPU: bfloat16 is converted "
                "in software, usually the slowest policy",
            ),
        ]

    if fp16_units:
        fp16 = PolicyAdvice(
            MIXED_FLOAT16,
            f"this CPU has {', '.join(fp16_units)} (float16 "
            "arithmetic in hardware), which may make "
            "mixed_float16 faster through oneDNN; measure",
        )
    elif arm_half:
        fp16 = PolicyAdvice(
            MIXED_FLOAT16,
            f"this CPU has {', '.join(arm_half)} half-precision "
            "arithmetic, but TensorFlow's CPU kernels seldom use "
            "it for training; measure",
        )
    else:
        fp16 = PolicyAdvice(
            MIXED_FLOAT16,
            "no float16 units on this CPU: mixed_float16 "
            "measured about 4x slower than float32 on a small "
            "CNN",
        )
    # mixed_float16's usual place: last where bfloat16 has units, else between float32 and a
    # bfloat16 converted in software (which CPUs do worst). Float16 units lift it one place.
    order.insert(2 if bf16_matrix or bf16_vector else 1, fp16)
    if fp16_units:
        at = order.index(fp16)
        order[at - 1], order[at] = order[at], order[at - 1]
    return tuple(order)


def default_float32(backend: str, tf32_exists: bool) -> str:
    """The precision float32 training runs in with the backend's own defaults, where TF32
    exists (an NVIDIA GPU of compute capability 8.0 or later) or not: ``float32+tf32`` for
    TensorFlow (TF32 execution is on unless ``enable_tensor_float_32_execution(False)``) and
    JAX (float32 matmuls and convolutions at the default precision run in TF32 there; issue 25
    measured 409 TFLOP/s on an H100 against 52 for IEEE float32), else IEEE ``float32``.
    PyTorch's default is neither (``cudnn.allow_tf32`` is on, ``matmul.allow_tf32`` off:
    convolutions in TF32, matmuls in IEEE float32), a state the search does not measure: its
    float32 is IEEE, and the recommendation says so (:data:`DEFAULT_NOTES`)."""
    if tf32_exists and backend in (TENSORFLOW, JAX):
        return TF32
    return FLOAT32


#: What each backend's float32 runs in by default where TF32 exists, in words: for the
#: recommendation and ``mptune detect``.
DEFAULT_NOTES: dict[str, str] = {
    TENSORFLOW: "TensorFlow runs float32 matmuls and convolutions in TF32 by default here",
    JAX: "JAX runs float32 matmuls and convolutions in TF32 at its default precision here",
    TORCH: (
        "PyTorch runs float32 convolutions in TF32 and matmuls in IEEE float32 by default "
        "here (torch.backends.cudnn.allow_tf32 on, torch.backends.cuda.matmul.allow_tf32 off); "
        "mptune measures float32 with both off (IEEE) and float32+tf32 with both on"
    ),
}


def default_lines(backends: list[str]) -> str:
    """What float32 runs in by default on a GPU where TF32 exists, for each of ``backends``
    (the installed ones), in one line for ``mptune detect``."""
    return "; ".join(DEFAULT_NOTES[b].split(" (")[0].removesuffix(" here") for b in backends)
