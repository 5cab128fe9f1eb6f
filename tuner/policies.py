"""The precision policies mptune knows, in one place.

The names are Keras 3's ``keras.mixed_precision`` policy names. A name from a user is checked
in one place, :meth:`tuner.setup.Policy.parse`.
"""

from __future__ import annotations

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"

#: Full half-precision policies (issue 71): weights, optimizer state and compute all in the
#: half type, not mixed. A user's setup mptune reads back, names and measures, and a candidate
#: only where its trainable weights stay float32 (a frozen backbone, LoRA): never a default.
BFLOAT16 = "bfloat16"
FLOAT16 = "float16"
FULL_HALF: tuple[str, ...] = (BFLOAT16, FLOAT16)

#: Every policy the default search tries, simplest first: when two setups are equally fast the
#: earlier one wins.
POLICIES: tuple[str, ...] = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)
#: Every policy mptune knows (a setup, a record, an export may name): the searched ones, then
#: the full half ones.
KNOWN_POLICIES: tuple[str, ...] = (*POLICIES, *FULL_HALF)
#: The full half policy beside each mixed one: the same compute dtype, with its variables in
#: it too.
FULL_OF_MIXED: dict[str, str] = {MIXED_BFLOAT16: BFLOAT16, MIXED_FLOAT16: FLOAT16}

#: The Keras 3 backends trials can run on (``KERAS_BACKEND`` values), the default first.
TENSORFLOW = "tensorflow"
JAX = "jax"
TORCH = "torch"
BACKENDS: tuple[str, ...] = (TENSORFLOW, JAX, TORCH)
#: The Python package (import name) each backend needs beside Keras.
BACKEND_PACKAGES: dict[str, str] = {TENSORFLOW: "tensorflow", JAX: "jax", TORCH: "torch"}

#: The precision of float32 storage with TensorFloat-32 matmuls
#: (:attr:`tuner.setup.Setup.precision`): tried as a variant of float32 on NVIDIA GPUs of
#: compute capability 8.0 and later, nowhere else.
TF32 = "float32+tf32"
