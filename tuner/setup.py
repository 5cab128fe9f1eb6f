"""What mptune tunes: a :class:`Setup` of a :class:`Policy`, a batch size, a :class:`LossScale`
and the execution knobs (XLA, steps per execution, TF32, gradient accumulation,
rematerialisation).

This is the ground floor most of the engine stands on. A setup crosses threads, processes and
storage, so every class here is a frozen, hashable value with one written form and a
``to_dict``/``from_dict`` round trip. Nothing here imports Keras: :mod:`tuner.keras_setup` is the
one place a setup meets Keras.

Adding a knob is one row of :data:`KNOBS` (its default, so that stored setups without it still
load and a setup at the default writes nothing new; what Keras is told; whether it groups the
losses; what the neighbourhood tries; how its evidence reads): the setup, the flag, the search's
stages, the guard, the evidence, the export and the window derive their parts from the row. A
knob Keras takes outside ``compile()`` and the optimizer (TF32, rematerialisation) also has its
application in :mod:`tuner.keras_setup`. See docs/architecture.md, "Adding a knob".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tuner.knobs import (
    FIXED_SCALE_RANK,
    KNOB_BY_NAME,
    KNOB_DEFAULTS,
    KNOB_NAMES,
    KNOBS,
    MAX_ACCUMULATION_STEPS,
    MAX_STEPS_PER_EXECUTION,
    SPE_LADDER,
    SWITCH_MODES,
    SWITCHED,
    Around,
    Decided,
    Knob,
    Searching,
    compile_arguments,
    losses_grouped,
    optimizer_arguments,
    same_memory,
)
from tuner.policies import (
    BACKENDS,
    BFLOAT16,
    FLOAT16,
    FLOAT32,
    FULL_HALF,
    JAX,
    KNOWN_POLICIES,
    MIXED_BFLOAT16,
    MIXED_FLOAT16,
    TENSORFLOW,
    TF32,
    TORCH,
)

#: Keras 3's defaults for ``LossScaleOptimizer`` (keras/src/optimizers/loss_scale_optimizer.py).
DEFAULT_INITIAL_SCALE = 2.0**15
DEFAULT_GROWTH_STEPS = 2000

#: The largest batch size a setup may carry: far above any real step, far below what overflows
#: a C int in TensorFlow's shape code.
MAX_BATCH_SIZE = 1 << 24
#: The largest loss scale (initial or fixed): the largest power of two float32 holds (its
#: maximum is about 3.4e38); a larger one would be infinite inside the optimizer.
MAX_LOSS_SCALE = 2.0**127
MAX_GROWTH_STEPS = 10**9
LossScaleKind = Literal["none", "dynamic", "fixed"]


@dataclass(frozen=True, eq=False)
class Policy:
    """A precision policy, parsed once, in the manner of Keras's ``DTypePolicy``.

    ``Policy("mixed_float16")`` is the policy Keras calls by the same name: its layers compute in
    float16 and keep their variables in float32. ``Policy("bfloat16")`` is a full half policy
    (issue 71): its variables, and so its optimizer's state and hyperparameters, are bfloat16
    too. The name is Keras 3's, so ``str(policy)`` can be handed to
    ``keras.mixed_precision.set_global_policy`` unchanged.

    Attributes:
        name: ``float32``, ``mixed_float16``, ``mixed_bfloat16``, ``bfloat16`` or ``float16``.
    """

    name: str

    #: Every policy mptune knows, simplest first: when two setups are equally fast the earlier
    #: one wins. The default search tries :data:`~tuner.policies.POLICIES`, the mixed ones.
    NAMES: ClassVar[tuple[str, ...]] = KNOWN_POLICIES

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in KNOWN_POLICIES:
            raise ValueError(
                f"unknown policy {self.name!r}: choose one of {', '.join(KNOWN_POLICIES)}"
            )

    @classmethod
    def parse(cls, value: Policy | str) -> Policy:
        """A policy from its name (or the policy itself).

        Raises:
            ValueError: with a message listing the known policies.
        """
        return value if isinstance(value, Policy) else cls(str(value).strip())

    @classmethod
    def of_dtypes(cls, compute: str, variable: str) -> Policy | None:
        """The policy whose layers compute in ``compute`` and keep their variables in
        ``variable`` (read back from a layer's ``dtype_policy``), or None where mptune knows
        none: ``("bfloat16", "float32")`` is mixed_bfloat16, ``("bfloat16", "bfloat16")`` the
        full bfloat16."""
        for name in KNOWN_POLICIES:
            policy = cls(name)
            if (policy.compute_dtype, policy.variable_dtype) == (compute, variable):
                return policy
        return None

    @property
    def compute_dtype(self) -> str:
        """The dtype layers compute in."""
        return {
            MIXED_FLOAT16: "float16",
            MIXED_BFLOAT16: "bfloat16",
            FLOAT16: "float16",
            BFLOAT16: "bfloat16",
        }.get(self.name, "float32")

    @property
    def variable_dtype(self) -> str:
        """The dtype variables are kept in: float32, but for a full half policy its own."""
        return self.name if self.is_full_half else "float32"

    @property
    def is_half(self) -> bool:
        """Its layers compute in a half type (every policy but float32)."""
        return self.name != FLOAT32

    @property
    def is_mixed(self) -> bool:
        """Half compute with float32 variables (``mixed_float16``, ``mixed_bfloat16``)."""
        return self.name in (MIXED_FLOAT16, MIXED_BFLOAT16)

    @property
    def is_full_half(self) -> bool:
        """Variables and compute both in the half type (``bfloat16``, ``float16``)."""
        return self.name in FULL_HALF

    @property
    def needs_loss_scaling(self) -> bool:
        """float16's narrow exponent range loses small gradients without a loss scale. Keras
        scales by itself under mixed_float16 only (its compile wraps the optimizer); a full
        float16 policy trains unscaled unless told."""
        return self.name == MIXED_FLOAT16

    def __eq__(self, other: object) -> bool:
        # Equal to its name as well, so that a policy read from storage or a flag compares
        # as the user wrote it; the hash agrees, so either keys the same dict entry.
        if isinstance(other, Policy):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Policy:
        return cls(config["name"])

    def __str__(self) -> str:
        return self.name


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

    def __post_init__(self) -> None:
        if self.kind not in ("none", "dynamic", "fixed"):
            raise ValueError(f"unknown loss-scale kind {self.kind!r}: none, dynamic or fixed")
        if self.kind == "fixed" and self.value is None:
            raise ValueError("a fixed loss scale needs a value")
        if self.kind != "fixed" and self.value is not None:
            raise ValueError(f"a {self.kind} loss scale takes no fixed value")
        if self.kind != "dynamic" and (
            self.initial_scale is not None or self.growth_steps is not None
        ):
            raise ValueError(f"a {self.kind} loss scale takes no initial scale or growth steps")
        for what, number in (("initial scale", self.initial_scale), ("fixed scale", self.value)):
            if number is not None and not (math.isfinite(number) and 0 < number <= MAX_LOSS_SCALE):
                raise ValueError(f"{what} must be a positive number up to 2**127, not {number}")
        if self.growth_steps is not None and not (
            isinstance(self.growth_steps, int) and 1 <= self.growth_steps <= MAX_GROWTH_STEPS
        ):
            raise ValueError(
                f"growth steps must be a whole number from 1 to {MAX_GROWTH_STEPS}, "
                f"not {self.growth_steps}"
            )

    @classmethod
    def parse(cls, text: LossScale | str) -> LossScale:
        """Parse the written form (or return the loss scale itself).

        Raises:
            ValueError: naming what is wrong with ``text``.
        """
        if isinstance(text, LossScale):
            return text
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
    def default_for(cls, policy: Policy | str) -> LossScale:
        """What Keras does on its own: dynamic scaling for float16, none otherwise."""
        return cls("dynamic") if Policy.parse(policy).needs_loss_scaling else cls("none")

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


@dataclass(frozen=True, init=False, eq=False, repr=False)
class Setup:
    """One setup mptune can measure, recommend and export.

    Strings are accepted where a value object is expected (``Setup("mixed_float16", 64)``) and
    parsed at once; an omitted loss scale is the policy's default (dynamic for float16). Two
    setups are equal exactly when they train the same way, so a setup keys the search's ledger.

    Attributes:
        policy: the precision policy.
        batch_size: samples per step (per micro-batch when gradients are accumulated).
        loss_scale: the loss-scale setting.
        xla: compile the training step with XLA (``jit_compile=True``); off means a plain
            ``tf.function`` (``jit_compile=False``), never Keras' device-dependent ``"auto"``.
        float8: the model's Dense and EinsumDense layers train in float8
            (``model.quantize("float8")`` once it is built: Keras' ``float8_from_<policy>``,
            E4M3 forward and E5M2 gradients with delayed scaling), FP8 matmuls on compute
            capability 8.9 and later; on TensorFlow it brings XLA (its FP8 GEMMs are XLA's).
        steps_per_execution: training steps one ``train_function`` call runs (Keras'
            ``steps_per_execution``): more steps per call hide the host's per-step overhead.
        tf32: float32 storage with TensorFloat-32 matrix multiplies and convolutions (NVIDIA
            compute capability 8.0 and up). A variant of float32 only; ``False`` on float32
            means IEEE float32 matmuls (TensorFlow's own default on such a GPU is TF32).
        gradient_accumulation_steps: micro-batches averaged per optimizer update (Keras 3
            optimizers' ``gradient_accumulation_steps``); the update sees
            ``batch_size * gradient_accumulation_steps`` samples (:attr:`global_batch`).
        remat: rematerialisation (a ``keras.RematScope`` around the model's build,
            :func:`tuner.keras_setup.remat_mode`): activations are recomputed in the backward
            pass instead of kept, for less memory and more compute, so that a larger batch fits.
        backend: the Keras 3 backend the steps run on (``KERAS_BACKEND``): ``tensorflow``,
            ``jax`` or ``torch``. On JAX the step is always compiled by XLA (Keras' JAX
            trainer jits it; ``jit_compile=False`` there runs it op by op, which nobody trains
            with), so a JAX setup's ``xla`` is always False and means "as Keras compiles it".
            On PyTorch ``xla`` means ``torch.compile`` (Keras' ``jit_compile=True`` there), and
            Keras runs one step per execution only (``steps_per_execution`` must be 1).
    """

    policy: Policy
    batch_size: int
    loss_scale: LossScale
    xla: bool
    float8: bool
    steps_per_execution: int
    tf32: bool
    gradient_accumulation_steps: int
    remat: bool
    backend: str

    def __init__(
        self,
        policy: Policy | str,
        batch_size: int,
        loss_scale: LossScale | str | None = None,
        *,
        backend: str = TENSORFLOW,
        **knobs: Any,
    ) -> None:
        """``knobs``: an execution knob of :data:`KNOBS` by its name (``xla=True``), each
        validated as its row says; one left out is at its default."""
        parsed = Policy.parse(policy)
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValueError(f"batch size must be a whole number, not {batch_size!r}")
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch size must be from 1 to {MAX_BATCH_SIZE}, not {batch_size}")
        if loss_scale is None:
            scale = LossScale.default_for(parsed)
        elif isinstance(loss_scale, (str, LossScale)):
            scale = LossScale.parse(loss_scale)
        else:
            raise ValueError(
                f"loss scale must be a LossScale or its written form, not {loss_scale!r}"
            )
        unknown = sorted(set(knobs) - KNOB_NAMES)
        if unknown:
            raise TypeError(f"Setup() got an unexpected keyword argument {unknown[0]!r}")
        values = {knob.name: knob.parse(knobs.get(knob.name, knob.default)) for knob in KNOBS}
        for knob in KNOBS:  # what a knob needs of the others (float8 on TensorFlow: XLA)
            if knob.brings is not None and values[knob.name] != knob.default:
                values.update(knob.brings(backend))
        for knob in KNOBS:
            refused = knob.refuses(values[knob.name], parsed, backend) if knob.refuses else None
            if refused:
                raise ValueError(refused)
            if knob.on_backend is not None:
                values[knob.name] = knob.on_backend(values[knob.name], backend)
        # Frozen: the parsed values are set once, here.
        for name, value in (
            ("policy", parsed),
            ("batch_size", batch_size),
            ("loss_scale", scale),
            *values.items(),
            ("backend", backend),
        ):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _FIELD_ORDER)

    # Equality, hash and repr over every knob of :data:`KNOBS` (not the annotations above,
    # which are for the type checker): a knob's row is the whole of its declaration.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Setup):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in _FIELD_ORDER)
        return f"Setup({values})"

    @property
    def precision(self) -> str:
        """What the layers compute in, as reported: the policy's name, or ``float32+tf32``."""
        return TF32 if self.tf32 else self.policy.name

    @property
    def global_batch(self) -> int:
        """Samples per optimizer update: the batch size times the accumulation steps."""
        return self.batch_size * self.gradient_accumulation_steps

    @property
    def knobs(self) -> tuple[str, ...]:
        """The execution knobs that differ from the defaults, in words for a label:
        ``xla``, ``spe8``, ``acc4``, and the backend when it is not TensorFlow (``jax``)."""
        words = [w for knob in KNOBS if (w := knob.short(self)) is not None]
        if self.backend != TENSORFLOW:
            words.append(self.backend)
        return tuple(words)

    @property
    def label(self) -> str:
        """One line, e.g. ``mixed_float16 b64 dynamic`` or ``float32+tf32 b64 none xla spe8``."""
        return " ".join((self.precision, f"b{self.batch_size}", str(self.loss_scale), *self.knobs))

    @property
    def key(self) -> str:
        """A stable string key (sorted JSON of :meth:`to_dict`), the same in every process."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def knob_words(self) -> tuple[str, ...]:
        """The execution knobs away from their defaults, in words for people: ``XLA``,
        ``4 steps per execution``, ``2 accumulation steps (global batch 128)``, and the backend
        when it is not TensorFlow (``on JAX``)."""
        words = [w for knob in KNOBS if (w := knob.say(self)) is not None]
        if self.backend != TENSORFLOW:
            words.append(f"on {BACKEND_NAMES[self.backend]}")
        return tuple(words)

    def words(self, *, default_loss_scale: bool = True) -> tuple[str, ...]:
        """The setup in words, a phrase a part, as every face and the recommendation say it:
        ``("float32+tf32", "batch size 128", "loss scale none", "XLA")``. With
        ``default_loss_scale=False`` a loss scale that is the policy's default is left out."""
        scale = (
            (f"loss scale {self.loss_scale}",)
            if default_loss_scale or self.loss_scale != LossScale.default_for(self.policy)
            else ()
        )
        return (self.precision, f"batch size {self.batch_size}", *scale, *self.knob_words())

    def in_words(self) -> str:
        """:meth:`words` as one line: ``float32+tf32, batch size 128, loss scale none, XLA``."""
        return ", ".join(self.words())

    def describe(self) -> str:
        """In words, e.g. ``mixed_float16 at batch size 64 (dynamic loss scale)``,
        ``float32 at batch size 64 (no loss scaling)``."""
        precision = "float32 with TF32 matmuls" if self.tf32 else str(self.policy)
        scaling = (
            "no loss scaling" if self.loss_scale.kind == "none" else f"{self.loss_scale} loss scale"
        )
        extras = [scaling, *self.knob_words()]
        return f"{precision} at batch size {self.batch_size} ({', '.join(extras)})"

    def simplicity(self) -> tuple[int, ...]:
        """Lower is simpler: float32 over mixed, mixed over a full half policy, then each knob
        at its default over any other value, in the order of the knobs' ``rank`` (IEEE over
        TF32, dynamic over a fixed loss scale, no XLA, one step per execution, no accumulation,
        no rematerialisation), then the smaller batch."""
        ranked = sorted(
            [
                (FIXED_SCALE_RANK, int(self.loss_scale.kind == "fixed")),
                *((knob.rank, int(getattr(self, knob.name))) for knob in KNOBS),
            ]
        )
        half = int(self.policy.is_half) + int(self.policy.is_full_half)
        return (half, *(value for _, value in ranked), self.batch_size)

    def replace(self, **changes: Any) -> Setup:
        """A copy with ``changes`` (strings parsed as in the constructor). A new policy brings
        its own default loss scale, and a knob the new policy refuses (TF32 but on float32)
        goes back to its default."""
        values: dict[str, Any] = {f: getattr(self, f) for f in _FIELD_ORDER}
        values.update(changes)
        if "policy" in changes and "loss_scale" not in changes:
            values["loss_scale"] = None  # the new policy's default
        if "policy" in changes:
            policy = Policy.parse(values["policy"])
            for knob in KNOBS:
                refuses = knob.refuses if knob.name not in changes else None
                if refuses is not None and refuses(values[knob.name], policy, values["backend"]):
                    values[knob.name] = knob.default
        return Setup(**values)

    def to_dict(self, explicit: bool = False) -> dict[str, Any]:
        """The written form: ``{"policy": str, "batch_size": int, "loss_scale": str}``, plus each
        knob that is not at its default (every knob with ``explicit=True``): ``xla`` (bool),
        ``steps_per_execution`` (int), ``tf32`` (bool), ``gradient_accumulation_steps`` (int),
        ``backend`` (str).
        Leaving defaults out keeps the stored form of a setup without knobs as it always was."""
        data: dict[str, Any] = {
            "policy": self.policy.name,
            "batch_size": self.batch_size,
            "loss_scale": str(self.loss_scale),
        }
        for name, default in KNOB_DEFAULTS.items():
            value = getattr(self, name)
            if explicit or value != default:
                data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Setup:
        """Inverse of :meth:`to_dict`; a missing loss scale is the policy's default, a missing
        knob its default.

        Raises:
            ValueError: naming the field that is missing, unknown or wrong.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a setup must be an object, not {data!r}")
        unknown = sorted(set(data) - SETUP_FIELDS)
        if unknown:
            raise ValueError(f"unknown setup field(s): {', '.join(map(str, unknown))}")
        for required in ("policy", "batch_size"):
            if required not in data:
                raise ValueError(f"setup field {required} is missing")
        if not isinstance(data["policy"], str):
            raise ValueError(f"setup field policy must be a string, not {data['policy']!r}")
        scale = data.get("loss_scale")
        if scale is not None and not isinstance(scale, str):
            raise ValueError(f"setup field loss_scale must be a string, not {scale!r}")
        knobs = {name: data[name] for name in KNOB_DEFAULTS if name in data}
        return cls(data["policy"], data["batch_size"], scale, **knobs)


#: The backends' names for people.
BACKEND_NAMES: dict[str, str] = {TENSORFLOW: "TensorFlow", JAX: "JAX", TORCH: "PyTorch"}
_FIELD_ORDER = ("policy", "batch_size", "loss_scale", *KNOB_DEFAULTS)

#: The names :meth:`Setup.to_dict` writes.
SETUP_FIELDS = frozenset(_FIELD_ORDER)


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


#: Re-exported: the knobs are declared in :mod:`tuner.knobs`, and read with the setup.
__all__ = [
    "BACKEND_NAMES",
    "DEFAULT_GROWTH_STEPS",
    "DEFAULT_INITIAL_SCALE",
    "FIXED_SCALE_RANK",
    "KNOBS",
    "KNOB_BY_NAME",
    "KNOB_DEFAULTS",
    "KNOB_NAMES",
    "MAX_ACCUMULATION_STEPS",
    "MAX_BATCH_SIZE",
    "MAX_GROWTH_STEPS",
    "MAX_LOSS_SCALE",
    "MAX_STEPS_PER_EXECUTION",
    "SETUP_FIELDS",
    "SPE_LADDER",
    "SWITCHED",
    "SWITCH_MODES",
    "TF32",
    "Around",
    "Decided",
    "Knob",
    "LossScale",
    "Policy",
    "Searching",
    "Setup",
    "compile_arguments",
    "losses_grouped",
    "optimizer_arguments",
    "same_memory",
]
