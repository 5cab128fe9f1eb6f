"""Whether a trial's steps moved the model's trainable weights (issue 71's ``not_training``
trap), found by measurement: a sample of each trainable weight read before the trial's first
step and again after its measured steps. None moved over steps that applied updates: the
trial's setup does not train. Under a full half policy the precision says why
(:func:`tuner.trials.hazards.rounds_away`: Keras 3.15's Adam family casts its hyperparameters
to the variables' dtype, where AdamW's beta_2 0.999 is 1.0 in bfloat16 and every update is 0).

This module imports Keras; only the worker uses it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.trials.hazards import Hazard, not_training, rounds_away

#: Values read from each trainable weight, evenly spaced over it: a weight that moves moves
#: everywhere its gradient or its decay reaches, and reading all of a large model's weights
#: twice would cost what the trial does not.
SAMPLE = 4096
#: The half dtypes a weight may be kept in.
HALF = ("bfloat16", "float16")


def snapshot(model: Any) -> list[np.ndarray]:
    """A sample of each of ``model``'s trainable weights (:data:`SAMPLE` values, evenly
    spaced, read on the device), as float32 arrays."""
    from keras import ops

    taken = []
    try:
        for weight in model.trainable_weights:
            size = int(np.prod(weight.shape)) if weight.shape else 1
            flat = ops.reshape(weight.value, (-1,))
            stride = max(1, size // SAMPLE)
            taken.append(np.asarray(ops.convert_to_numpy(flat[::stride]), dtype=np.float32))
    except Exception:  # noqa: BLE001 - a check beside the trial's figures, never its failure
        return []
    return taken


def unmoved(before: list[np.ndarray], after: list[np.ndarray]) -> list[bool]:
    """Whether each weight of ``before`` is unchanged in ``after`` (a NaN counts as a
    change); empty where the two do not match (a model that changed its weights): no verdict."""
    if len(before) != len(after):
        return []
    return [bool(np.array_equal(a, b)) for a, b in zip(before, after, strict=True)]


def check(model: Any, before: list[np.ndarray], policy: str, applied_steps: int) -> Hazard | None:
    """The ``not_training`` hazard where ``model``'s trainable weights did not move from
    ``before`` over ``applied_steps`` steps that applied an update: none of those kept in a
    half type (the precision's: a full half policy's head beside LoRA's float32 adapters), or
    none at all (the model's, where they are float32). None where they moved, or nothing
    could (no trainable weight, no step applied: a loss scale that skipped them all is the
    loss scale's finding)."""
    if not before or applied_steps <= 0:
        return None
    still = unmoved(before, snapshot(model))
    if not still:
        return None
    dtypes = [str(w.dtype) for w in model.trainable_weights]
    half = next((d for d in HALF if d in dtypes), None)
    halves = [i for i, d in enumerate(dtypes) if d in HALF]
    if half is not None and all(still[i] for i in halves):
        optimizer = getattr(model, "optimizer", None)
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        why = rounds_away(hyperparameters(inner), half, type(inner).__name__)
        of = len(before) if len(halves) < len(before) else None
        return not_training(policy, len(halves), applied_steps, half, why, of=of)
    if all(still):
        return not_training(policy, len(before), applied_steps, None, None)
    return None


def hyperparameters(optimizer: Any) -> dict[str, float]:
    """The optimizer's hyperparameters :data:`~tuner.trials.hazards.ROUNDS_AWAY` names, as
    numbers (the learning rate as it is now, a schedule's included); those it has not left
    out."""
    from keras import ops

    found: dict[str, float] = {}
    if optimizer is None:
        return found
    for name in ("learning_rate", "beta_1", "beta_2", "epsilon"):
        try:
            value = getattr(optimizer, name, None)
            if value is not None:
                found[name] = float(ops.convert_to_numpy(value))
        except (TypeError, ValueError):  # a callable or schedule it cannot read now
            continue
    return found
