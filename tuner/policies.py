"""The precision policies mptune knows, in one place.

The names are Keras 3's ``keras.mixed_precision`` policy names, so a value read from a config
file or the command line can be handed to ``set_global_policy`` unchanged.
"""

from __future__ import annotations

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"

#: Every policy, simplest first: when two setups are equally fast the earlier one wins.
POLICIES: tuple[str, ...] = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)


def check_policy(name: str) -> str:
    """Return ``name`` if it is a known policy.

    Raises:
        ValueError: with a message listing the known policies.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
    return name
