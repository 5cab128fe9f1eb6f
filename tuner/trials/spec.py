"""What one trial runs: :class:`TrialSpec` and the loss-scale setting it carries.

A spec is plain data (frozen, JSON round-trippable) because it crosses a process boundary: the
parent validates it, writes it to the worker's stdin, and stores it with the result.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from tuner.policies import MIXED_FLOAT16, check_policy

#: Keras 3's defaults for ``LossScaleOptimizer`` (keras/src/optimizers/loss_scale_optimizer.py).
DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000

LossScaleKind = Literal["none", "dynamic", "fixed"]

_DEVICE_RE = re.compile(r"^(auto|cpu|gpu:\d+)$")


@dataclass(frozen=True)
class LossScale:
    """A loss-scale setting, written ``none``, ``dynamic[:INITIAL[:GROWTH_STEPS]]`` or ``fixed:N``.

    Attributes:
        kind: ``none`` (no scaling), ``dynamic`` (Keras' ``LossScaleOptimizer``) or ``fixed``
            (``loss_scale_factor`` on the inner optimizer; never skips a non-finite step).
        initial_scale: dynamic only; ``None`` means Keras' default (32768).
        growth_steps: dynamic only; ``None`` means Keras' default (2000).
        value: fixed only; the constant scale.
    """

    kind: LossScaleKind = "none"
    initial_scale: float | None = None
    growth_steps: int | None = None
    value: float | None = None

    @classmethod
    def parse(cls, text: str) -> LossScale:
        """Parse the written form.

        Raises:
            ValueError: naming what is wrong with ``text``.
        """
        raw = text.strip().lower()
        parts = raw.split(":")
        head, args = parts[0], parts[1:]
        try:
            if head == "none" and not args:
                return cls("none")
            if head == "dynamic" and len(args) <= 2:
                initial = _positive_float(args[0], "initial scale") if args and args[0] else None
                growth = _positive_int(args[1], "growth steps") if len(args) == 2 else None
                return cls("dynamic", initial_scale=initial, growth_steps=growth)
            if head == "fixed" and len(args) == 1:
                return cls("fixed", value=_positive_float(args[0], "fixed scale"))
        except ValueError as exc:
            raise ValueError(f"malformed loss scale {text!r}: {exc}") from None
        raise ValueError(
            f"malformed loss scale {text!r}: write none, dynamic, dynamic:INITIAL, "
            "dynamic:INITIAL:GROWTH_STEPS or fixed:N"
        )

    @classmethod
    def default_for(cls, policy: str) -> LossScale:
        """What Keras does on its own: dynamic scaling for float16, none otherwise."""
        return cls("dynamic") if policy == MIXED_FLOAT16 else cls("none")

    @property
    def effective_initial_scale(self) -> float:
        return self.initial_scale if self.initial_scale is not None else DEFAULT_INITIAL_SCALE

    @property
    def effective_growth_steps(self) -> int:
        return self.growth_steps if self.growth_steps is not None else DEFAULT_GROWTH_STEPS

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{_num(self.value)}"
        if self.kind == "dynamic":
            if self.growth_steps is not None:
                return f"dynamic:{_num(self.effective_initial_scale)}:{self.growth_steps}"
            if self.initial_scale is not None:
                return f"dynamic:{_num(self.initial_scale)}"
            return "dynamic"
        return "none"


def _num(value: float | None) -> str:
    assert value is not None
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _positive_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive finite number, not {text}")
    return value


def _positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{what} must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class TrialSpec:
    """One short training run.

    Attributes:
        model: the model source, e.g. ``builtin:cnn``, ``path/to/model.py``, ``model.keras``
            (see :mod:`tuner.trials.models`).
        policy: ``float32``, ``mixed_float16`` or ``mixed_bfloat16``.
        batch_size: samples per step.
        loss_scale: the loss-scale setting; see :class:`LossScale`.
        warmup_steps: steps run before timing starts (tracing, autotuning, allocator growth).
        steps: measured steps; ``None`` measures for ``measure_seconds`` instead (at least
            ``min_steps`` and at most ``max_steps``).
        measure_seconds: the measuring time when ``steps`` is ``None``.
        seed: seeds weights and the synthetic data, so runs are comparable.
        timeout_s: wall-clock limit for the whole trial, start-up included.
        device: ``auto`` (the first GPU if there is one), ``cpu`` or ``gpu:N``.
        memory_limit_mb: over this the trial counts as out of memory (GPU: a TensorFlow
            memory limit; CPU: the worker's peak resident memory).
    """

    model: str
    policy: str
    batch_size: int
    loss_scale: LossScale = dataclasses.field(default_factory=LossScale)
    warmup_steps: int = 5
    steps: int | None = None
    measure_seconds: float = 5.0
    min_steps: int = 10
    max_steps: int = 2000
    seed: int = 0
    timeout_s: float = 300.0
    device: str = "auto"
    memory_limit_mb: float | None = None

    def __post_init__(self) -> None:
        try:
            check_policy(self.policy)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ValueError(f"batch size must be a whole number, not {self.batch_size!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be at least 1, not {self.batch_size}")
        if self.warmup_steps < 0:
            raise ValueError(f"warm-up steps must be 0 or more, not {self.warmup_steps}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"measured steps must be at least 1, not {self.steps}")
        if not self.measure_seconds > 0:
            raise ValueError(f"measuring time must be positive, not {self.measure_seconds}")
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError("need 1 <= min_steps <= max_steps")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout must be positive, not {self.timeout_s}")
        if not _DEVICE_RE.match(self.device):
            raise ValueError(f"unknown device {self.device!r}: write auto, cpu or gpu:N")
        if self.memory_limit_mb is not None and not self.memory_limit_mb > 0:
            raise ValueError(f"memory limit must be positive, not {self.memory_limit_mb}")
        if not isinstance(self.loss_scale, LossScale):
            raise ValueError(f"loss scale must be a LossScale, not {self.loss_scale!r}")

    @classmethod
    def create(cls, model: str, policy: str, batch_size: int, loss_scale: str | None = None,
               **kwargs: Any) -> TrialSpec:
        """Build a spec from user-facing values; ``loss_scale=None`` means the policy's default.

        Raises:
            ValueError: naming the bad value.
        """
        check_policy(policy)
        scale = LossScale.parse(loss_scale) if loss_scale else LossScale.default_for(policy)
        return cls(model=model, policy=policy, batch_size=batch_size, loss_scale=scale, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["loss_scale"] = str(self.loss_scale)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: for an unknown field or a bad value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trial spec field(s): {', '.join(unknown)}")
        values = dict(data)
        scale = values.get("loss_scale")
        if isinstance(scale, str):
            values["loss_scale"] = LossScale.parse(scale)
        elif scale is None:
            values["loss_scale"] = LossScale.default_for(values.get("policy", ""))
        return cls(**values)

    def describe(self) -> str:
        """A short human label, e.g. ``mixed_float16 b64 dynamic``."""
        return f"{self.policy} b{self.batch_size} {self.loss_scale}"
