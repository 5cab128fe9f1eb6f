"""Precision hazards: what the numerics probe found a policy does to a model's numbers.

A :class:`Hazard` is plain data (frozen, JSON round-trippable), like a trial result: the probe
finds it in the worker (:mod:`tuner.worker.probe`), the trial result carries it, the search and
the recommendation act on it, and every face shows it the same way. docs/numerics.md explains
each kind with the numbers behind it.

The numeric limits below are properties of the formats (IEEE 754 binary16; bfloat16 is
float32's upper 16 bits: 8 exponent bits, 7 stored mantissa bits).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

#: The compute dtypes of the low-precision policies.
LOW_PRECISION_DTYPES = ("float16", "bfloat16")
#: float16's largest finite value: (2 - 2**-10) * 2**15.
FLOAT16_MAX = 65504.0
#: float16's smallest positive (subnormal) value; anything smaller in magnitude rounds to zero.
FLOAT16_TINY = 2.0**-24
#: The largest N such that every whole number up to N is exact: 2**(mantissa bits + 1).
INTEGER_LIMIT = {"float16": 2048, "bfloat16": 256}
#: Unit roundoff (half the spacing of numbers just above 1): 2**-11 and 2**-8.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
#: A layer's output diverges when its relative error against float32 passes this many unit
#: roundoffs of the policy's compute type: 1.6% for float16, 12.5% for bfloat16. Rounding alone
#: (each input and output rounded once, dot products accumulated in float32) stays within a few
#: unit roundoffs per layer; docs/numerics.md gives the errors measured on the built-in models
#: and a published text classifier (at most about 5).
DIVERGENCE_ROUNDOFFS = 32
#: Share of gradient values that flush to zero in float16 above which underflow is reported.
UNDERFLOW_SHARE = 0.01

#: The kinds, in the order a user should read them: the first corrupts data.
INTEGER_CAST = "integer_cast"
OVERFLOW = "overflow"
UNDERFLOW = "underflow"
LOW_PRECISION_OUTPUT = "low_precision_output"
DIVERGENCE = "divergence"
POLICY_FAILURE = "policy_failure"
#: Traps (issue 71): what makes a run fail or not train under a precision, found in the user's
#: own code or by measuring what a trial's steps did, each named with its place and its fix.
#: A float32 constant or random draw meets a half-precision tensor in a layer's ``call``.
DTYPE_MISMATCH = "dtype_mismatch"
#: An op or metric with no kernel in the policy's compute dtype on the backend (TopK in
#: float16 on TensorFlow).
NO_KERNEL = "no_kernel"
#: A model's own ``train_step`` that never scales its loss, while Keras divides its gradients
#: by the loss scale (a ``LossScaleOptimizer``).
UNSCALED_LOSS = "unscaled_loss"
#: The trainable weights did not move over a trial's steps (a full half-precision policy whose
#: optimizer hyperparameters or state round away: Adam's beta_2 = 0.999 is 1.0 in bfloat16).
NOT_TRAINING = "not_training"
KINDS: tuple[str, ...] = (
    INTEGER_CAST,
    NOT_TRAINING,
    POLICY_FAILURE,
    DTYPE_MISMATCH,
    NO_KERNEL,
    UNSCALED_LOSS,
    OVERFLOW,
    UNDERFLOW,
    LOW_PRECISION_OUTPUT,
    DIVERGENCE,
)
#: One line per kind, for legends and help.
TITLES = {
    INTEGER_CAST: "whole numbers rounded by a low-precision cast",
    POLICY_FAILURE: "fails only under this policy",
    DTYPE_MISMATCH: "a float32 value meets a half-precision tensor in the model's code",
    NO_KERNEL: "an op with no kernel in this precision",
    UNSCALED_LOSS: "a custom train_step that does not scale its loss",
    NOT_TRAINING: "the trainable weights did not move",
    OVERFLOW: "values above float16's range",
    UNDERFLOW: "gradients flushed to zero in float16",
    LOW_PRECISION_OUTPUT: "output or loss computed in low precision",
    DIVERGENCE: "forward pass drifts from float32",
}
#: ``unsafe``: the policy corrupts this model's data or breaks it; it is never recommended.
#: ``warning``: evidence the user should see; the policy stays a candidate.
SEVERITIES = ("unsafe", "warning")
#: Whose a trap is (:attr:`Hazard.whose`): ``precision``, the precision's own (nothing in the
#: model is wrong: an op has no float16 kernel, an optimizer's state rounds away); ``model``,
#: the model's code, which the precision exposes (a float32 draw in a layer, a train_step that
#: does not scale its loss).
WHOSE = ("precision", "model")


@dataclass(frozen=True)
class Hazard:
    """One precision hazard of one policy on one model.

    Attributes:
        kind: one of :data:`KINDS`.
        policy: the policy it applies to, e.g. ``mixed_float16``.
        layer: the layer it happens in (its name, with its class), or None for the model as a
            whole (a loss, a share of all gradients).
        evidence: what was measured, in one sentence with the numbers.
        fix: what to change in the model, in one sentence.
        severity: ``unsafe`` or ``warning`` (see :data:`SEVERITIES`).
        figure: the evidence's key figure in a few words (``19,999 became 19,968``,
            ``2.1% flushed``), for plot markers and narrow cells; None where there is none.
        at: where in the user's code, ``file.py:LINE`` (``sampling.py:14 in Sampling.call``);
            None where the place is the model as a whole.
        whose: ``precision`` or ``model`` (:data:`WHOSE`), for a trap; None for the probe's
            measured hazards.
    """

    kind: str
    policy: str
    layer: str | None
    evidence: str
    fix: str
    severity: str = "warning"
    figure: str | None = None
    at: str | None = None
    whose: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown hazard kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown hazard severity {self.severity!r}")
        if self.whose is not None and self.whose not in WHOSE:
            raise ValueError(f"unknown hazard owner {self.whose!r}")

    @property
    def unsafe(self) -> bool:
        return self.severity == "unsafe"

    @property
    def key(self) -> tuple[str, str, str]:
        """What makes two reports the same hazard (one per kind, policy and layer)."""
        return self.kind, self.policy, self.layer or ""

    def describe(self) -> str:
        """One line: ``mixed_float16, layer 'x' (Cls) at f.py:3: evidence. Fix: ...``."""
        where = f", {self.layer}" if self.layer else ""
        if self.at:
            where += f" at {self.at}"
        return f"{self.policy}{where}: {self.evidence}. Fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "layer": self.layer,
            "policy": self.policy,
            "evidence": self.evidence,
            "fix": self.fix,
            "severity": self.severity,
            "figure": self.figure,
            "at": self.at,
            "whose": self.whose,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hazard:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a field is missing or has an unknown value.
        """
        try:
            return cls(
                kind=str(data["kind"]),
                policy=str(data["policy"]),
                layer=None if data.get("layer") is None else str(data["layer"]),
                evidence=str(data["evidence"]),
                fix=str(data["fix"]),
                severity=str(data.get("severity") or "warning"),
                figure=None if data.get("figure") is None else str(data["figure"]),
                at=None if data.get("at") is None else str(data["at"]),
                whose=None if data.get("whose") is None else str(data["whose"]),
            )
        except KeyError as exc:
            raise ValueError(f"a hazard without {exc.args[0]!r}") from None


def merge(*groups: tuple[Hazard, ...] | list[Hazard]) -> tuple[Hazard, ...]:
    """The hazards of several trials, one per :attr:`Hazard.key` (the first report kept),
    unsafe first, then in :data:`KINDS` order."""
    seen: dict[tuple[str, str, str], Hazard] = {}
    for group in groups:
        for hazard in group:
            seen.setdefault(hazard.key, hazard)
    return tuple(sorted(seen.values(), key=lambda h: (not h.unsafe, KINDS.index(h.kind), h.policy)))


#: Trap kinds (issue 71): a run that fails or does not train under its precision, named with
#: its place and its fix. One in what the user runs today is the recommendation's first line.
TRAPS: tuple[str, ...] = (DTYPE_MISMATCH, NO_KERNEL, UNSCALED_LOSS, NOT_TRAINING)

#: An optimizer's hyperparameters that stop every update where they round in the variables'
#: dtype (Keras 3.15's Adam family casts them to it: keras/src/optimizers/adam.py), each with
#: the value it must not round to. ``beta_2`` of 1.0 makes Adam's step size
#: ``lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)`` exactly 0 (keras-team/keras-hub#2629); a
#: learning rate of 0 moves nothing; ``beta_1`` of 1.0 and ``epsilon`` of 0 divide by 0.
ROUNDS_AWAY: tuple[tuple[str, float], ...] = (
    ("learning_rate", 0.0),
    ("beta_2", 1.0),
    ("beta_1", 1.0),
    ("epsilon", 0.0),
)


def round_to(value: float, dtype: str) -> float:
    """``value`` as ``dtype`` holds it (round to nearest even): ``float16`` (IEEE binary16),
    ``bfloat16`` (float32's upper 16 bits), ``float32``; any other dtype keeps it."""
    if dtype == "float16":
        try:
            return float(struct.unpack("<e", struct.pack("<e", value))[0])
        except OverflowError:
            return math.copysign(math.inf, value)
    if dtype not in ("bfloat16", "float32"):
        return float(value)
    (single,) = struct.unpack("<f", struct.pack("<f", value))
    if dtype == "float32" or not math.isfinite(single):
        return float(single)
    (bits,) = struct.unpack("<I", struct.pack("<f", single))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # nearest, ties to even
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def rounds_away(
    hyper: dict[str, float], dtype: str, optimizer: str = "the optimizer"
) -> str | None:
    """Why an optimizer whose hyperparameters are ``hyper`` (by Keras' names) cannot move a
    weight kept in ``dtype``, in words (``AdamW's beta_2 0.999 is 1.0 in bfloat16``), from the
    first of :data:`ROUNDS_AWAY` that rounds to its value there; None where none does."""
    for name, stops_at in ROUNDS_AWAY:
        value = hyper.get(name)
        if value is None or value == stops_at:
            continue  # one set so on purpose is no rounding
        if round_to(value, dtype) == stops_at:
            return f"{optimizer}'s {name} {value:g} is {stops_at:.1f} in {dtype}"
    return None


def not_training(
    policy: str,
    weights: int,
    steps: int,
    half_weights: str | None,
    why: str | None,
    of: int | None = None,
) -> Hazard:
    """The ``not_training`` trap: none of ``weights`` trainable weights moved over ``steps``
    applied steps (``of``: the trainable weights there are, where the others, float32 ones
    such as LoRA's adapters, moved). ``half_weights``: the half dtype they are kept in (a full
    half policy), which makes it the precision's, with ``why`` (:func:`rounds_away`) where a
    hyperparameter says it; float32 weights make it the model's (a warning: the precision is
    not to blame)."""
    mixed = {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
    if half_weights is not None:
        cause = why or (
            f"its weights are kept in {half_weights}, where an update under half their spacing "
            "rounds away"
        )
        which = (
            f"{weights} trainable weights"
            if of is None
            else f"the {weights} {half_weights} trainable weights (of {of}; the float32 ones moved)"
        )
        return Hazard(
            NOT_TRAINING,
            policy,
            None,
            f"none of {which} moved over {steps:,} steps ({cause})",
            f"use {mixed.get(half_weights, 'a mixed policy')} (float32 weights), or keep the "
            "optimizer's state in float32",
            severity="unsafe",
            figure=f"0 of {weights} moved",
            whose="precision",
        )
    return Hazard(
        NOT_TRAINING,
        policy,
        None,
        f"none of {weights} trainable weights moved over {steps:,} steps, and they are kept in "
        "float32: the precision does not explain it",
        "check that the trainable weights get gradients and that the learning rate is not 0",
        severity="warning",
        figure=f"0 of {weights} moved",
        whose="model",
    )
