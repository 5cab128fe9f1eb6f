"""The execution knobs a :class:`~tuner.setup.Setup` carries (XLA, steps per execution, TF32,
gradient accumulation, rematerialisation), each declared once as a row of :data:`KNOBS`.

A row says everything the engine does with its knob (docs/architecture.md, "Adding a knob"):
the setup's field and its validation, its words, its ``mptune trial`` flag, what Keras is told
(a ``compile()`` or optimizer argument), whether it groups the losses the guard compares, what
the neighbourhood tries around a pick, why a search skips it and how its evidence reads. The
code that reads the rows never names a knob to decide something about it. Nothing here imports
Keras; :mod:`tuner.setup` builds the :class:`~tuner.setup.Setup` on these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.policies import FLOAT32, JAX, TENSORFLOW, TF32, TORCH
from tuner.said import name_switches, setting

if TYPE_CHECKING:
    from tuner.setup import Policy, Setup

#: The most steps one ``train_function`` call may run (Keras' ``steps_per_execution``): past a
#: few dozen the host overhead it hides is gone; the bound catches a typo.
MAX_STEPS_PER_EXECUTION = 1024
#: The steps-per-execution rungs the search walks up from 1 while each pays beyond the noise:
#: 4 already hides most of the per-call overhead, 16 nearly all of it.
SPE_LADDER = (4, 16)
#: The most micro-batches one optimizer update may average (``gradient_accumulation_steps``).
MAX_ACCUMULATION_STEPS = 1024


@dataclass(frozen=True)
class Around:
    """What a knob's :attr:`Knob.around` decides from: the search's pick and what it found.

    Attributes:
        setup: the pick the neighbourhood is around.
        value: the knob's value in it.
        searched: the knob's stage ran for the pick's precision and its try did not fail
            (False where the knob is skipped: ``--xla off``, a model XLA cannot compile).
        short_step: the pick's step (times its steps per execution) is short enough for the
            host's per-call overhead to show.
    """

    setup: Setup
    value: Any
    searched: bool
    short_step: bool


@dataclass(frozen=True)
class Searching:
    """What decides whether a search tries a knob at all (:attr:`Knob.skipped`).

    Attributes:
        backend: the Keras backend the trials run on.
        gpu: the trials run on a GPU.
        choice: the user's choice for the knob's search (``--xla auto|on|off``): its switch
            in :attr:`~tuner.search.space.SearchSpace.switches`, ``on`` for a knob without one
            (:attr:`Knob.switch`).
        compute_capability: the NVIDIA GPU's the trials run on (``(9, 0)``); None on a CPU or
            when unknown.
        quantizable_share: the share of the model's multiply-adds in the layers Keras'
            ``model.quantize()`` takes (:attr:`~tuner.trials.result.AsTrained.quantizable_share`),
            as the search's first trial read it; None before one did.
    """

    backend: str
    gpu: bool
    choice: str
    compute_capability: tuple[int, int] | None = None
    quantizable_share: float | None = None


@dataclass(frozen=True)
class Decided:
    """What a knob another stage decides (:attr:`Knob.decided`) is explained from.

    Attributes:
        tried: some setup the search measured had the knob away from its default.
        global_batch: the global batch the user asked the search to keep (None: not kept).
        user_batch: the batch size the user trains with (None: not known).
    """

    tried: bool
    global_batch: int | None
    user_batch: int | None


#: A switch's choices (:attr:`Knob.switch`): ``auto`` tries the knob where it can pay, ``on``
#: wherever it runs, ``off`` never.
SWITCH_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Switch:
    """How a user switches a knob's search (``--xla auto|on|off``; a control in the window's
    Search panel): the search space's choice for it (``SearchSpace.switches``).

    Attributes:
        flag: the ``mptune tune`` flag's help.
        tooltip: the window control's tooltip.
        modes: each of :data:`SWITCH_MODES` in a sentence (each choice's tooltip).
    """

    flag: str
    tooltip: str
    modes: dict[str, str]


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
        brings: the other knobs' values it needs on a backend when it is away from its default
            (float8 on TensorFlow brings XLA: its FP8 matmuls are XLA's); a setup takes them.
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
        compile_argument: the ``model.compile()`` argument it is, and its value for a setup
            (``jit_compile``: the one place the rule "JAX always compiles" is written);
            :mod:`tuner.keras_setup` passes it and the export writes it.
        optimizer_argument: the (inner) optimizer's configuration entry it is, and its value
            for a setup (None: the optimizer's default); set on a copy of the user's optimizer,
            before any loss scaling, in a trial, in ``apply_config`` and in the export.
        groups_losses: it decides how a trial's losses are grouped (several steps per call
            report one loss; accumulation averages several steps' gradients), so the IEEE
            float32 reference a setup's losses are compared with has its value too.
        around: the values the neighbourhood tries at a pick's batch size (every combination
            with the other knobs'); None where the knob is not looked at around a pick.
        decided: the evidence's words for a knob another stage decides (``stage`` None), from
            what the search measured; None for a knob with a stage, whose evidence is its
            tries (tried, moved around the pick, skipped and why, or not reached).
        unsupported: why the search stops trying it when the model refuses it (a trial ends
            ``unsupported``); "the model does not run with <label>" where empty.
        skipped: why no precision's stage tries it in a search (None: it is tried).
        tries: about how many trials its stage takes on a precision's pick, for the progress
            plan (0 for a stage that runs only where a step is short or memory ran out).
        switch: the user switches its search (auto, on, off), as :class:`Switch` says; None:
            the search decides alone.
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
    brings: Callable[[str], dict[str, Any]] | None = None
    on_backend: Callable[[Any, str], Any] | None = None
    stage: str | None = None
    keras2: bool = True
    fits: bool = False
    phrase: Callable[[Setup], str | None] | None = None
    compile_argument: Callable[[Setup], tuple[str, Any]] | None = None
    optimizer_argument: Callable[[Setup], tuple[str, Any]] | None = None
    groups_losses: bool = False
    around: Callable[[Around], tuple[Any, ...]] | None = None
    decided: Callable[[Setup, Decided], str] | None = None
    unsupported: str = ""
    skipped: Callable[[Searching], str | None] | None = None
    tries: int = 1
    switch: Switch | None = None

    @property
    def words(self) -> str:
        """The knob in a phrase (``XLA``, ``steps per execution``)."""
        return self.what or self.label

    @property
    def refused_words(self) -> str:
        """Why no precision tries it once the model refused it."""
        return self.unsupported or f"the model does not run with {self.words}"

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
        what="XLA",
        stage="xla",
        on_backend=lambda value, backend: False if backend == JAX else value,
        # JAX: Keras always compiles the step (a JAX setup's xla is False and means that).
        compile_argument=lambda s: ("jit_compile", True if s.backend == JAX else s.xla),
        around=lambda a: (False, True) if a.searched else (a.value,),
        unsupported="the model does not compile under XLA",
        skipped=lambda w: (
            "JAX compiles every training step with XLA already"
            if w.backend == JAX
            else setting("xla", "off")
            if w.choice == "off"
            else f"{setting('xla', 'auto')} tries XLA on a GPU only, and the trials ran on the CPU"
            if w.choice == "auto" and not w.gpu
            else None
        ),
        switch=Switch(
            flag="try XLA (jit_compile): auto on a GPU only, on anywhere, off never (default auto)",
            tooltip="XLA compiles the training step into fused kernels (Keras' jit_compile), which "
            "can speed it up or fail for some layers. auto: try XLA on a GPU, where Keras turns "
            "it on by itself. on: try it on any device, the CPU too. off: never try it.",
            modes={
                "auto": "Try XLA on a GPU, where Keras turns it on by itself; not on a CPU.",
                "on": "Try XLA on any device, the CPU too.",
                "off": "Never try XLA: every trial runs without it.",
            },
        ),
        short=lambda s: "xla" if s.xla else None,
        say=lambda s: ("torch.compile" if s.backend == TORCH else "XLA") if s.xla else None,
        aliases=lambda s: ("xla", "torch.compile"),
        setting=lambda s: _on(s.xla),
    ),
    Knob(
        name="float8",
        default=False,
        kind=bool,
        rank=35,
        label="Float8",
        what="float8",
        evidence="float8",
        warm=False,  # model.quantize() changes the built layers for good
        option="float8",
        help='train the Dense and EinsumDense layers in float8 (model.quantize("float8") on '
        "the built model): FP8 matmuls on NVIDIA compute capability 8.9 and later, on JAX, or "
        "on TensorFlow with XLA, which it brings",
        stage="float8",
        keras2=False,
        brings=lambda backend: {"xla": True} if backend == TENSORFLOW else {},
        unsupported="the model does not train in float8",
        skipped=lambda w: _float8_skipped(w),
        switch=Switch(
            flag="try float8 (model.quantize): auto where it can pay (an FP8 GPU, JAX or "
            "TensorFlow, Dense layers), on anywhere, off never (default auto)",
            tooltip="Float8 trains the Dense and EinsumDense layers in float8 (Keras' "
            'model.quantize("float8") on the built model: E4M3 forward, E5M2 gradients), as '
            "FP8 matmuls on NVIDIA compute capability 8.9 and later (L4, L40S, H100, H200, "
            "Blackwell) under XLA. auto: try it where it can pay: such a GPU, JAX or "
            "TensorFlow, and Dense layers that carry most of the model's work. on: try it on "
            "any device and model. off: never try it.",
            modes={
                "auto": "Try float8 on a GPU with FP8 Tensor Cores, on JAX or TensorFlow, for a "
                "model whose Dense and EinsumDense layers carry most of its work.",
                "on": "Try float8 on any device and model (elsewhere Keras emulates it: "
                "correct, not fast).",
                "off": "Never try float8.",
            },
        ),
        short=lambda s: "fp8" if s.float8 else None,
        say=lambda s: "float8 matmuls" if s.float8 else None,
        aliases=lambda s: ("float8", "fp8"),
        setting=lambda s: _on(s.float8),
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
        compile_argument=lambda s: ("steps_per_execution", s.steps_per_execution),
        tries=0,  # only where the pick's step is short
        groups_losses=True,
        around=lambda a: (
            (1, *SPE_LADDER) if (a.short_step or a.value > 1) and a.setup.backend != TORCH else (1,)
        ),
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
        decided=lambda s, d: _tf32_decided(s, d),
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
        optimizer_argument=lambda s: (
            "gradient_accumulation_steps",
            s.gradient_accumulation_steps if s.gradient_accumulation_steps > 1 else None,
        ),
        groups_losses=True,
        decided=lambda s, d: _global_batch_decided(s, d),
    ),
    Knob(
        name="remat",
        default=False,
        kind=bool,
        rank=60,
        label="Rematerialisation",
        what="rematerialisation",
        tries=0,  # only where a batch size ran out of memory, or memory is the objective
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


#: The least compute capability with FP8 Tensor Cores (Ada Lovelace 8.9, Hopper 9.0, Blackwell),
#: where XLA makes Keras' float8 quantize-matmul patterns FP8 GEMMs.
FP8_COMPUTE_CAPABILITY = (8, 9)
#: The least share of a model's multiply-adds that the layers Keras trains in float8 (Dense and
#: EinsumDense themselves) must carry for float8 to be tried: were their matmuls twice as fast,
#: the step would gain at most a third (Amdahl); under it the quantize and amax work around
#: each matmul (openxla/xla#7432) leaves nothing to find.
FLOAT8_SHARE = 0.5


def _float8_skipped(searching: Searching) -> str | None:
    """Why a search does not try float8: the backend, the card, or the model's layers."""
    cc = searching.compute_capability
    share = searching.quantizable_share
    if searching.choice == "off":
        return setting("float8", "off")
    if searching.choice == "on":
        return None
    if searching.backend == TORCH:
        return (
            "Keras runs float8 on PyTorch as emulation (quantize, dequantize, then a matmul in "
            "the policy's dtype): there are no FP8 matmuls to gain; JAX, or TensorFlow with "
            "XLA, has them"
        )
    if not searching.gpu:
        return "float8 needs FP8 Tensor Cores, and the trials ran on the CPU"
    if cc is None or cc < FP8_COMPUTE_CAPABILITY:
        card = (
            "of unknown compute capability"
            if cc is None
            else f"of compute capability {cc[0]}.{cc[1]}"
        )
        return (
            f"float8 needs FP8 Tensor Cores (NVIDIA compute capability 8.9 and later: L4, "
            f"L40S, H100, H200, Blackwell); the GPU is {card}"
        )
    if share is not None and share < FLOAT8_SHARE:
        return (
            f"the layers Keras trains in float8 (Dense and EinsumDense) carry {share:.0%} of "
            f"the model's multiply-adds, under the {FLOAT8_SHARE:.0%} where float8 could pay "
            "(convolutions and other layers stay in the policy's dtype)"
        )
    return None


def _tf32_decided(setup: Setup, decided: Decided) -> str:
    """TF32's evidence: the policies stage tries it as a precision of its own."""
    if setup.tf32:
        return (
            "on: float32 storage with TensorFloat-32 matmuls and convolutions (NVIDIA compute "
            "capability 8.0 and later); its loss gap to IEEE float32 is under Loss gap"
        )
    if setup.policy.is_half:
        return f"not applicable: {setup.policy} computes in {setup.policy.compute_dtype}"
    if decided.tried:
        return f"off: IEEE float32 matmuls; {TF32} was tried (see its alternative)"
    return "off: IEEE float32 matmuls (TF32 needs an NVIDIA GPU of compute capability 8.0 or later)"


def _global_batch_decided(setup: Setup, decided: Decided) -> str:
    """The global batch's evidence: the batch-size ladder decides the accumulation."""
    acc = setup.gradient_accumulation_steps
    steps = (
        f"batch size {setup.batch_size} x {acc} accumulation steps"
        if acc > 1
        else f"batch size {setup.batch_size}, no gradient accumulation"
    )
    if decided.global_batch is not None:
        return f"{setup.global_batch}, kept ({setting('global_batch')}): {steps}"
    if decided.user_batch is not None and decided.user_batch != setup.global_batch:
        return (
            f"{setup.global_batch} ({steps}); yours is {decided.user_batch}: see the note on "
            "the learning rate"
        )
    return f"{setup.global_batch} ({steps})"


def same_memory(a: Setup, b: Setup) -> bool:
    """Whether ``a`` and ``b`` hold the same memory per sample at a batch size as far as the
    knobs go: the same value of every knob that changes what fits (:attr:`Knob.fits`)."""
    return all(getattr(a, k.name) == getattr(b, k.name) for k in KNOBS if k.fits)


def losses_grouped(setup: Setup) -> dict[str, Any]:
    """The values of ``setup``'s knobs that group its losses (:attr:`Knob.groups_losses`)."""
    return {k.name: getattr(setup, k.name) for k in KNOBS if k.groups_losses}


def compile_arguments(setup: Setup) -> dict[str, Any]:
    """What ``model.compile()`` is told for ``setup``'s knobs (:attr:`Knob.compile_argument`)."""
    return dict(k.compile_argument(setup) for k in KNOBS if k.compile_argument is not None)


def optimizer_arguments(setup: Setup) -> dict[str, Any]:
    """The optimizer configuration ``setup``'s knobs set (:attr:`Knob.optimizer_argument`;
    None: the optimizer's default)."""
    return dict(k.optimizer_argument(setup) for k in KNOBS if k.optimizer_argument is not None)


#: The knobs whose search the user switches (:attr:`Knob.switch`).
SWITCHED: tuple[Knob, ...] = tuple(knob for knob in KNOBS if knob.switch is not None)
name_switches(knob.name for knob in SWITCHED)  # the engine's words may name their settings
#: The execution knobs' field names.
KNOB_NAMES: frozenset[str] = frozenset(knob.name for knob in KNOBS)
#: The execution knobs by their field names.
KNOB_BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}
#: The execution knobs and the backend with their defaults (what a setup stored before them
#: meant).
KNOB_DEFAULTS: dict[str, Any] = {knob.name: knob.default for knob in KNOBS} | {
    "backend": TENSORFLOW
}


def _whole(value: Any, what: str, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"{what} must be a whole number from 1 to {most}, not {value!r}")
