"""Precision hazards: what the numerics probe found a policy does to a model's numbers.

A :class:`Hazard` is plain data (frozen, JSON round-trippable), like a trial result: the probe
finds it in the worker (:mod:`tuner.worker.probe`), the trial result carries it, the search and
the recommendation act on it, and every face shows it the same way. docs/numerics.md explains
each kind with the numbers behind it.

The numeric limits below are properties of the formats (IEEE 754 binary16; bfloat16 is
float32's upper 16 bits: 8 exponent bits, 7 stored mantissa bits).
"""

from __future__ import annotations

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
