"""Tooltips that explain the mixed-precision terms, in one place."""

from __future__ import annotations

from tuner import api

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
        "Dynamic: Keras' LossScaleOptimizer halves the scale and skips the step when "
        "gradients overflow, and doubles it after a number of clean steps. Fixed: a "
        "constant scale that never skips a step (an overflow becomes NaN). A float16 search "
        "tries each ticked candidate; add your own from its kind and numbers."
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
        "size, seed and data, over the last quarter (at least 4) of the compared steps. A "
        "gap over the tolerance rejects the setup."
    ),
    "skipped": (
        "Steps the dynamic loss scaler skipped because gradients overflowed: they cost "
        "time and trained nothing."
    ),
    "measure_seconds": "How long each trial measures its steps, after the warm-up.",
    "parallel": (
        "How many independent trials run at once, each on a GPU of its own (auto: every GPU "
        "of the searched GPU's model; one on a CPU, where trials side by side would slow each "
        "other's figures)."
    ),
    "backend": (
        "The Keras 3 backend every trial runs on. A session is measured on one backend: its "
        "recommendation and exports are for that backend (exported code sets KERAS_BACKEND "
        "before importing Keras). JAX always compiles the training step with XLA; on PyTorch, "
        "XLA means torch.compile and Keras runs one step per call."
    ),
    "backend_tensorflow": "TensorFlow: Keras' default backend, and the one tf_keras needs.",
    "backend_jax": "JAX: every training step compiled by XLA.",
    "backend_torch": "PyTorch: eager steps, or torch.compile when XLA is tried.",
    "global_batch": (
        "Keep the samples per optimizer update at B. The search then tries only per-step "
        "batch sizes that divide B and accumulates gradients over B / batch steps, so that "
        "batch x accumulation steps = B and a learning rate tuned for B stays valid. Off: "
        "the batch size itself is tuned, and the learning rate may need scaling with it."
    ),
    "precision": (
        "The policy the trial ran, or float32+tf32: float32 storage with TensorFloat-32 "
        "matmuls (NVIDIA compute capability 8.0 and newer): Tensor Core matmuls with "
        "float32's range and float16's 10-bit mantissa, nothing else in the model changes."
    ),
    "knobs": "",  # from the knobs' declarations: _knobs_tip()
    "unsupported": (
        "The model cannot run this setup's knob (XLA could not compile it, for example) "
        "while the same setup without it trains: the search drops the knob for this "
        "model. Nothing else is wrong with the setup."
    ),
    "stopped": (
        "This trial was stopped before it finished (by Stop, or by a search that ended "
        "while it ran): it has no figures and counts for nothing. Resume runs its setup "
        "again if the search still needs it."
    ),
    # Each switched knob's control and choices, from its row (Knob.switch): "xla", "xla_auto".
    **{knob.name: knob.switch.tooltip for knob in api.SWITCHED if knob.switch is not None},
    **{
        f"{knob.name}_{mode}": words
        for knob in api.SWITCHED
        if knob.switch is not None
        for mode, words in knob.switch.modes.items()
    },
}


def _knobs_tip() -> str:
    """The trial tables' knobs column, from the knobs' declarations (``api.KNOBS``): each
    knob's word in a label, set to an example value, and the same in words."""
    parts = []
    for knob in api.KNOBS:
        setup = api.Setup("float32", 64, **{knob.name: knob.example()})
        word = knob.short(setup)
        if word is not None:  # TF32 is said by the precision (float32+tf32)
            parts.append(f"{word}: {knob.say(setup)}")
    return (
        "Execution knobs that differ from Keras' defaults: "
        + "; ".join(parts)
        + "; and jax or torch: the Keras backend, when it is not TensorFlow."
    )


TOOLTIPS["knobs"] = _knobs_tip()
