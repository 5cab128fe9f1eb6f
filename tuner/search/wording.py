"""Small pieces of wording the search's stages and its recommendation share."""

from __future__ import annotations

import math

from tuner.setup import LossScale, Setup


def and_join(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def pct(value: float | None) -> str:
    return "n/a" if value is None else ("inf" if math.isinf(value) else f"{value:.1%}")


def where(setup: Setup) -> str:
    """``float32: batch size 256``, with the loss scale where it is not the policy's default
    and the knobs that are not at theirs: ``float32+tf32: batch size 256 (XLA)``."""
    extras = []
    if setup.loss_scale != LossScale.default_for(setup.policy):
        extras.append(f"loss scale {setup.loss_scale}")
    extras += setup.knob_words()
    detail = f" ({', '.join(extras)})" if extras else ""
    return f"{setup.precision}: batch size {setup.batch_size}{detail}"
