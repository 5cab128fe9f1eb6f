"""What mptune tunes: a :class:`Setup` of a :class:`Policy`, a batch size, a :class:`LossScale`
and the execution knobs (XLA, steps per execution, TF32, gradient accumulation,
rematerialisation).

This is the ground floor most of the engine stands on. A setup crosses threads, processes and
storage, so every class here is a frozen, hashable value with one written form and a
``to_dict``/``from_dict`` round trip. Nothing here imports Keras: :mod:`tuner.keras_setup` is the
one place a setup meets Keras.

Adding a knob is: a field on :class:`Setup` with a default (so stored setups without it still
load, and a setup at the default writes nothing new), its application in
:mod:`tuner.keras_setup`, a search stage and a command-line flag. See docs/architecture.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tuner.policies import (
    BACKENDS,
    FLOAT32,
    JAX,
    MIXED_BFLOAT16,
    MIXED_FLOAT16,
    POLICIES,
    TENSORFLOW,
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
#: The most steps one ``train_function`` call may run (Keras' ``steps_per_execution``): past a
#: few dozen the host overhead it hides is gone; the bound catches a typo.
MAX_STEPS_PER_EXECUTION = 1024
#: The most micro-batches one optimizer update may average (``gradient_accumulation_steps``).
MAX_ACCUMULATION_STEPS = 1024

LossScaleKind = Literal["none", "dynamic", "fixed"]


@dataclass(frozen=True, eq=False)
class Policy:
    """A precision policy, parsed once, in the manner of Keras's ``DTypePolicy``.

    ``Policy("mixed_float16")`` is the policy Keras calls by the same name: its layers compute in
    float16 and keep their variables in float32. The name is Keras 3's, so ``str(policy)`` can
    be handed to ``keras.mixed_precision.set_global_policy`` unchanged.

    Attributes:
        name: ``float32``, ``mixed_float16`` or ``mixed_bfloat16``.
    """

    name: str

    #: Every policy, simplest first: when two setups are equally fast the earlier one wins.
    NAMES: ClassVar[tuple[str, ...]] = POLICIES

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in POLICIES:
            raise ValueError(f"unknown policy {self.name!r}: choose one of {', '.join(POLICIES)}")

    @classmethod
    def parse(cls, value: Policy | str) -> Policy:
        """A policy from its name (or the policy itself).

        Raises:
            ValueError: with a message listing the known policies.
        """
        return value if isinstance(value, Policy) else cls(str(value).strip())

    @property
    def compute_dtype(self) -> str:
        """The dtype layers compute in."""
        return {MIXED_FLOAT16: "float16", MIXED_BFLOAT16: "bfloat16"}.get(self.name, "float32")

    @property
    def variable_dtype(self) -> str:
        """The dtype variables are kept in: float32 for every policy mptune tries."""
        return "float32"

    @property
    def is_mixed(self) -> bool:
        return self.name != FLOAT32

    @property
    def needs_loss_scaling(self) -> bool:
        """float16's narrow exponent range loses small gradients without a loss scale."""
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


#: The precision of float32 storage with TensorFloat-32 matmuls (:attr:`Setup.precision`): tried
#: as a variant of float32 on NVIDIA GPUs of compute capability 8.0 and later, nowhere else.
TF32 = "float32+tf32"


@dataclass(frozen=True, init=False)
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
        """Lower is simpler: float32 over mixed, then each knob at its default over any other
        value, in the order of the knobs' ``rank`` (IEEE over TF32, dynamic over a fixed loss
        scale, no XLA, one step per execution, no accumulation, no rematerialisation), then
        the smaller batch."""
        ranked = sorted(
            [
                (FIXED_SCALE_RANK, int(self.loss_scale.kind == "fixed")),
                *((knob.rank, int(getattr(self, knob.name))) for knob in KNOBS),
            ]
        )
        return (int(self.policy.is_mixed), *(value for _, value in ranked), self.batch_size)

    def replace(self, **changes: Any) -> Setup:
        """A copy with ``changes`` (strings parsed as in the constructor). A new policy brings
        its own default loss scale, and drops TF32 unless it is float32."""
        values: dict[str, Any] = {f: getattr(self, f) for f in _FIELD_ORDER}
        values.update(changes)
        if "policy" in changes and "loss_scale" not in changes:
            values["loss_scale"] = None  # the new policy's default
        if (
            "policy" in changes
            and "tf32" not in changes
            and Policy.parse(values["policy"]) != FLOAT32
        ):
            values["tf32"] = False
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


@dataclass(frozen=True, kw_only=True)
class Knob:
    """An execution knob of a :class:`Setup`, declared once in :data:`KNOBS`. Derived from its
    row: the setup's constructor argument and its validation, its place in
    :meth:`Setup.simplicity`, its label and words, the fields a stored setup may omit, the
    ``mptune trial`` flag, what a warm worker may change, the export's template context (and
    whether Keras 2 can take it), the search stage's stored name and what the search counts as
    exploring, the recommendation's evidence row and the window's phrases (docs/architecture.md,
    "Adding a knob"; tests/tuner/test_knob_registry.py checks every derived place).

    Attributes:
        name: the :class:`Setup` field (and the constructor's keyword).
        default: its value in a setup that does not set it (and in setups stored before it).
        kind: ``bool`` or ``int`` (a whole number from 1 to ``most``).
        most: an ``int`` knob's largest value (a bound that catches a typo).
        what: the value in words, for a message that refuses one (``steps per execution``).
        rank: its place in :meth:`Setup.simplicity` (lower weighs first); the loss scale's
            fixed kind is :data:`FIXED_SCALE_RANK`.
        refuses: why a value cannot go with a policy and a backend (None where it can).
        on_backend: the value a backend turns it into (JAX always compiles: ``xla`` False).
        label: its name for people: the row of the recommendation's evidence.
        evidence: the key of that row (``KnobEvidence.knob``).
        warm: a warm worker runs a trial with another value (``compile()`` sets it) without
            building the model again; TF32, a process-wide setting, is not.
        option: the word of its ``mptune trial`` flag (the CLI puts ``--`` before it); ``help``
            its help.
        stage: the stored name of the search stage that tries it on each precision's pick
            (its function is in :data:`tuner.search.stages.knobs.TRIES`); None where another
            stage decides it (TF32: the policies; accumulation: the ladder).
        keras2: the export can write it for ``tf_keras`` (Keras 2) too.
        fits: it changes which batch sizes fit in memory (a batch size that ran out of memory
            without it may fit with it), so the search holds a batch size that did not fit
            against setups with the same value only.
        short: its word in a setup's label (``spe8``), None at the default.
        say: its words for people (``8 steps per execution``), None at the default or where
            the precision says it already (TF32).
        aliases: words that, found in a line of text, show it names the knob already.
        phrase: what the window adds to a line that does not name it; ``say`` where None.
        setting: its value in a few words, for the evidence (``on``, ``8``).
    """

    name: str
    default: Any
    kind: type
    rank: int
    label: str
    evidence: str
    warm: bool
    option: str
    help: str
    short: Callable[[Setup], str | None]
    say: Callable[[Setup], str | None]
    aliases: Callable[[Setup], tuple[str, ...]]
    setting: Callable[[Setup], str]
    most: int = 1
    what: str = ""
    refuses: Callable[[Any, Policy, str], str | None] | None = None
    on_backend: Callable[[Any, str], Any] | None = None
    stage: str | None = None
    keras2: bool = True
    fits: bool = False
    phrase: Callable[[Setup], str | None] | None = None

    def phrase_of(self, setup: Setup) -> str | None:
        return (self.phrase or self.say)(setup)

    def example(self) -> Any:
        """A value away from the default, to show or test the knob with: the other one of a
        ``bool``, 4 (or ``most``) of an ``int``."""
        return (not self.default) if self.kind is bool else min(4, self.most)

    def parse(self, value: Any) -> Any:
        """``value`` checked against the knob's kind.

        Raises:
            ValueError: naming the knob and what it takes.
        """
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} must be true or false, not {value!r}")
            return value
        _whole(value, self.what or self.name, self.most)
        return value


def _on(value: bool) -> str:
    return "on" if value else "off"


#: The fixed loss scale's place among the knobs' ranks in :meth:`Setup.simplicity`.
FIXED_SCALE_RANK = 20

#: The execution knobs, in the order a setup's words and label list them.
KNOBS: tuple[Knob, ...] = (
    Knob(
        name="xla",
        default=False,
        kind=bool,
        rank=30,
        label="XLA",
        evidence="xla",
        warm=True,
        option="xla",
        help="compile the training step with XLA (jit_compile=True); on torch this is "
        "torch.compile, and jax always compiles with XLA",
        stage="xla",
        on_backend=lambda value, backend: False if backend == JAX else value,
        short=lambda s: "xla" if s.xla else None,
        say=lambda s: ("torch.compile" if s.backend == TORCH else "XLA") if s.xla else None,
        aliases=lambda s: ("xla", "torch.compile"),
        setting=lambda s: _on(s.xla),
    ),
    Knob(
        name="steps_per_execution",
        default=1,
        kind=int,
        most=MAX_STEPS_PER_EXECUTION,
        what="steps per execution",
        rank=40,
        label="Steps per execution",
        evidence="steps_per_execution",
        warm=True,
        option="steps-per-execution",
        help="training steps per train_function call (default 1; torch runs 1 only)",
        stage="steps-per-execution",
        refuses=lambda value, policy, backend: (
            "steps per execution must be 1 on the torch backend (Keras runs one step per "
            f"call there), not {value}"
            if backend == TORCH and value != 1
            else None
        ),
        short=lambda s: f"spe{s.steps_per_execution}" if s.steps_per_execution > 1 else None,
        say=lambda s: (
            f"{s.steps_per_execution} steps per execution" if s.steps_per_execution > 1 else None
        ),
        aliases=lambda s: (
            "steps per execution",
            "steps_per_execution",
            f"spe{s.steps_per_execution}",
        ),
        setting=lambda s: str(s.steps_per_execution),
    ),
    Knob(
        name="tf32",
        default=False,
        kind=bool,
        rank=10,
        label="TF32",
        evidence="tf32",
        warm=False,
        option="tf32",
        help="float32 with TF32 matmuls (float32 only; NVIDIA compute capability 8.0+)",
        refuses=lambda value, policy, backend: (
            f"TF32 is a variant of float32; {policy.name} already computes in "
            f"{policy.compute_dtype}"
            if value and policy.name != FLOAT32
            else None
        ),
        short=lambda s: None,  # the precision says it: float32+tf32
        say=lambda s: None,
        aliases=lambda s: ("tf32",),
        setting=lambda s: _on(s.tf32),
        phrase=lambda s: "TF32 matmuls" if s.tf32 else None,
    ),
    Knob(
        name="gradient_accumulation_steps",
        default=1,
        kind=int,
        most=MAX_ACCUMULATION_STEPS,
        what="gradient accumulation steps",
        rank=50,
        label="Global batch",
        evidence="global_batch",
        warm=True,
        option="accumulate",
        help="gradient accumulation steps: each update sees N x the batch size samples (default 1)",
        keras2=False,
        short=lambda s: (
            f"acc{s.gradient_accumulation_steps}" if s.gradient_accumulation_steps > 1 else None
        ),
        say=lambda s: (
            f"{s.gradient_accumulation_steps} accumulation steps (global batch {s.global_batch})"
            if s.gradient_accumulation_steps > 1
            else None
        ),
        aliases=lambda s: ("accumulat", f"acc{s.gradient_accumulation_steps}"),
        setting=lambda s: str(s.global_batch),
    ),
    Knob(
        name="remat",
        default=False,
        kind=bool,
        rank=60,
        label="Rematerialisation",
        evidence="remat",
        warm=False,  # the layers take it when they are built
        option="remat",
        help="rematerialise: recompute each layer's activations in the backward pass "
        "(keras.RematScope), less memory for more compute",
        stage="remat",
        keras2=False,
        fits=True,
        short=lambda s: "remat" if s.remat else None,
        say=lambda s: "rematerialisation" if s.remat else None,
        aliases=lambda s: ("remat",),
        setting=lambda s: _on(s.remat),
    ),
)


def same_memory(a: Setup, b: Setup) -> bool:
    """Whether ``a`` and ``b`` hold the same memory per sample at a batch size as far as the
    knobs go: the same value of every knob that changes what fits (:attr:`Knob.fits`)."""
    return all(getattr(a, k.name) == getattr(b, k.name) for k in KNOBS if k.fits)


#: The execution knobs' field names.
KNOB_NAMES: frozenset[str] = frozenset(knob.name for knob in KNOBS)
#: The execution knobs by their field names.
KNOB_BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}
#: The execution knobs and the backend with their defaults (what a setup stored before them
#: meant).
KNOB_DEFAULTS: dict[str, Any] = {knob.name: knob.default for knob in KNOBS} | {
    "backend": TENSORFLOW
}

#: The backends' names for people.
BACKEND_NAMES: dict[str, str] = {TENSORFLOW: "TensorFlow", JAX: "JAX", TORCH: "PyTorch"}
_FIELD_ORDER = ("policy", "batch_size", "loss_scale", *KNOB_DEFAULTS)

#: The names :meth:`Setup.to_dict` writes.
SETUP_FIELDS = frozenset(_FIELD_ORDER)


def _num(value: float | None) -> str:
    assert value is not None
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _whole(value: Any, what: str, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"{what} must be a whole number from 1 to {most}, not {value!r}")


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
