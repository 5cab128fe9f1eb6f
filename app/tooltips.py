"""Tooltips that explain the mixed-precision terms, in one place."""

from __future__ import annotations

TOOLTIPS = {
    "policy": (
        "A precision policy says which dtype layers compute in. float32: everything in "
        "32-bit. mixed_float16: compute in 16-bit float, keep weights in float32 (needs "
        "loss scaling). mixed_bfloat16: compute in bfloat16, which has float32's range "
        "and needs no loss scaling."
    ),
    "loss_scale": (
        "Loss scaling multiplies the loss before backpropagation so that small float16 "
        "gradients do not underflow to zero, then divides the gradients again. "
        "dynamic: Keras' LossScaleOptimizer halves the scale and skips the step when "
        "gradients overflow, and grows it after GROWTH_STEPS good steps. fixed:N: a "
        "constant scale that never skips a step (an overflow becomes NaN)."
    ),
    "batch_size": (
        "Samples per training step. Larger batches usually raise throughput until "
        "the device is busy or memory runs out; multiples of 8 suit Tensor Cores."
    ),
    "objective": (
        "speed: most samples per second. memory: least peak memory per sample among "
        "setups within 80% of the fastest. balanced: the same within 95%."
    ),
    "compute_capability": (
        "NVIDIA's compute capability names a GPU generation: 7.x has float16 "
        "Tensor Cores, 8.0 and newer bfloat16 and TF32 too, 8.9/9.0 FP8."
    ),
    "cpu_flags": (
        "Instruction sets that decide whether low precision can be fast on a CPU: "
        "avx512_bf16 and amx_bf16 for bfloat16, avx512_fp16 and amx_fp16 for float16."
    ),
    "no_gpu": "Without an NVIDIA GPU, trials run on the CPU with TensorFlow's CPU kernels.",
    "loss_gap": (
        "The relative difference between a setup's loss and float32's at the same batch "
        "size, seed and data, over the last quarter of the compared steps. A gap over "
        "the tolerance rejects the setup."
    ),
    "skipped": (
        "Steps the dynamic loss scaler skipped because gradients overflowed: they cost "
        "time and trained nothing."
    ),
    "measure_seconds": "How long each trial measures its steps, after the warm-up.",
}
