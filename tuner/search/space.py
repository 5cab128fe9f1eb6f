"""What a search may try: policies, batch sizes, loss scales, and its limits."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from tuner.hardware.advice import default_float32
from tuner.policies import BACKENDS, POLICIES, TENSORFLOW
from tuner.record import added, from_data, to_data
from tuner.said import setting
from tuner.setup import (
    MAX_ACCUMULATION_STEPS,
    MAX_BATCH_SIZE,
    SWITCH_MODES,
    SWITCHED,
    LossScale,
    Policy,
    Setup,
)

#: The float16 loss-scale candidates tried at the chosen batch size when none are given: Keras'
#: dynamic default, a dynamic scale that starts lower and grows sooner, and two fixed scales.
DEFAULT_LOSS_SCALES = ("dynamic", "dynamic:1024:500", "fixed:1024", "fixed:128")
DEFAULT_BATCH_RANGE = (8, 1024)
DEFAULT_START_BATCH = 64
OBJECTIVES = ("speed", "memory", "balanced")
#: ``--xla``: ``auto`` tries XLA where Keras' own default turns it on (a GPU), ``on`` tries it on
#: any device, ``off`` never; every switched knob's choices (:data:`tuner.knobs.SWITCH_MODES`).
XLA_MODES = SWITCH_MODES
_DEVICE_RE = re.compile(r"^(auto|cpu|gpu:\d+)$")
#: The least time, in seconds, in which a fresh trial worker starts and runs a step: a time
#: limit or a time budget under it cannot hold a single trial, and is refused before any runs
#: (:meth:`SearchSettings.refuse_unworkable`). Measured on mptune's 2-core test CPU: the
#: interpreter and the framework's import alone (``python -c "import keras"`` with
#: KERAS_BACKEND set) took 3.5 s of CPU time for JAX, the fastest, 6.8 s for TensorFlow and
#: 9-10 s for PyTorch (8.9-30 s of wall time on the machine under load); 2 s leaves room for a
#: CPU twice as fast before a workable value would be refused (docs/trials.md).
WORKER_START_S = 2.0


@dataclass(frozen=True)
class DeviceTraits:
    """What the search needs to know about the device trials run on.

    Attributes:
        gpu: trials run on a GPU.
        compute_capability: the NVIDIA GPU's, e.g. ``(8, 0)``; None on a CPU or when unknown.
    """

    gpu: bool = False
    compute_capability: tuple[int, int] | None = None

    @property
    def tf32(self) -> bool:
        """TensorFloat-32 exists: an NVIDIA GPU of compute capability 8.0 or later."""
        return (
            self.gpu and self.compute_capability is not None and self.compute_capability >= (8, 0)
        )

    def default_precision(self, backend: str) -> str:
        """What float32 computes in when the user's training sets nothing: the precision a
        recommendation's speed-up is stated against (:func:`default_float32`)."""
        return default_float32(backend, self.tf32)

    @classmethod
    def from_profile(cls, profile: Any, device: str) -> DeviceTraits:
        """The traits of ``device`` (``auto``, ``cpu`` or ``gpu:N``) on ``profile`` (a
        :class:`~tuner.hardware.HardwareProfile` or anything with ``gpus``)."""
        gpus = list(getattr(profile, "gpus", ()) or ())
        if device == "cpu" or not gpus:
            return cls()
        index = int(device.split(":")[1]) if device.startswith("gpu:") else 0
        gpu = next((g for g in gpus if getattr(g, "index", None) == index), gpus[0])
        cc = getattr(gpu, "compute_capability", None)
        return cls(True, (int(cc[0]), int(cc[1])) if cc else None)


@dataclass(frozen=True)
class SearchSpace:
    """The setups a search may try.

    Attributes:
        policies: the policies to try, most promising first.
        batch_sizes: the batch sizes allowed, ascending; the ladder walks powers of two in it
            and may refine between them.
        loss_scales: float16 loss-scale candidates for the loss-scale stage.
        start_batch: where the ladders start (the float32 baseline's batch size).
        refine: whether batch sizes between the ladder's rungs may be tried.
        switches: the user's choice (one of :data:`tuner.knobs.SWITCH_MODES`) for each knob whose
            search they switch (:data:`tuner.knobs.SWITCHED`: ``{"xla": "off"}``), by its name;
            one not given is ``auto``. Spaces stored before read their ``xla`` as its switch.
        global_batch: keep the samples per optimizer update at this: the search tries per-step
            batch sizes that divide it, with gradient accumulation making up the rest.
        user_batch: the batch size the user trains with today (``--start-batch`` or the model
            file's ``BATCH_SIZE``), for the recommendation's learning-rate note; None: unknown.
        user_policy: the precision a training script sets itself (``set_global_policy``), and
            ``user_policy_at`` where: what the user runs today, the speed-up's reference.
        user_setup: what a training script's own ``fit`` trains today, observed before the
            search (issue 70: its precision, batch and compile settings read back from what
            fit got), and ``user_setup_words`` it in words with the lines that set it: the
            search's baseline, trial #0, against which every speed-up is stated. None for a
            model file or a built-in (their reference is float32), or where the script's own
            setup cannot run as a trial.
    """

    policies: tuple[str, ...] = POLICIES
    batch_sizes: tuple[int, ...] = ()
    loss_scales: tuple[LossScale, ...] = tuple(LossScale.parse(s) for s in DEFAULT_LOSS_SCALES)
    start_batch: int = DEFAULT_START_BATCH
    refine: bool = True
    switches: dict[str, str] = dataclasses.field(default_factory=dict)
    global_batch: int | None = None
    user_batch: int | None = None
    # Said where a script sets its own precision: spaces stored before read the same.
    user_policy: str | None = added()
    user_policy_at: str | None = added()
    user_setup: Setup | None = added()
    user_setup_words: str | None = added()

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("the search space has no policy")
        for policy in self.policies:
            Policy.parse(policy)
        if not self.batch_sizes:
            object.__setattr__(self, "batch_sizes", ladder_range(*DEFAULT_BATCH_RANGE))
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        if self.batch_sizes[0] < 1:
            raise ValueError("batch sizes must be at least 1")
        switched = {knob.name for knob in SWITCHED}
        for name, choice in self.switches.items():
            if name not in switched:
                raise ValueError(
                    f"no switch for {name!r}: the switched knobs are {', '.join(sorted(switched))}"
                )
            if choice not in SWITCH_MODES:
                raise ValueError(
                    f"unknown {setting(name)} {choice!r}: choose one of {', '.join(SWITCH_MODES)}"
                )
        # Every switch, at auto where not given: a space reads the same however it was written.
        object.__setattr__(
            self, "switches", {k.name: self.switches.get(k.name, "auto") for k in SWITCHED}
        )
        if self.global_batch is not None:
            if not 1 <= self.global_batch <= MAX_BATCH_SIZE:
                raise ValueError(
                    f"{setting('global_batch')} must be from 1 to {MAX_BATCH_SIZE}, "
                    f"not {self.global_batch}"
                )
            # Per-step batch sizes that divide the global batch, with few enough micro-batches.
            divisors = tuple(
                b
                for b in range(1, self.global_batch + 1)
                if self.global_batch % b == 0
                and self.global_batch // b <= MAX_ACCUMULATION_STEPS
                and (b in self.batch_sizes or b == self.global_batch or b % 8 == 0)
            )
            object.__setattr__(self, "batch_sizes", divisors)
            object.__setattr__(self, "start_batch", self.global_batch)
        if self.start_batch not in self.batch_sizes:
            closest = min(self.batch_sizes, key=lambda b: (abs(b - self.start_batch), b))
            object.__setattr__(self, "start_batch", closest)

    def choice(self, knob: str) -> str:
        """The user's choice for ``knob``'s search (``auto``, ``on`` or ``off``); ``on`` for a
        knob the user does not switch (the search decides)."""
        return self.switches.get(knob, "on")

    def switched(self, **choices: str) -> SearchSpace:
        """A copy with ``choices`` for the named knobs' switches (``xla="off"``), the others as
        they are."""
        return dataclasses.replace(self, switches={**self.switches, **choices})

    def rungs(self) -> tuple[int, ...]:
        """The ladder's rungs: the explicit list, or the powers of two in the range."""
        return self.batch_sizes

    def to_dict(self) -> dict[str, Any]:
        """The stored form (a session's ``space`` attribute), from the declared fields
        (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchSpace:
        """Inverse of :meth:`to_dict`: a field stored empty, or before it existed, is its
        default (sessions stored before ``refine`` was kept refine).

        Raises:
            ValueError: the stored space is not valid.
        """
        data = {k: v for k, v in data.items() if v not in ("", [])}
        if "xla" in data:  # stored before the switches: XLA's alone
            data["switches"] = {"xla": data.pop("xla"), **(data.get("switches") or {})}
        return from_data(cls, data)

    def differences(self, other: SearchSpace) -> list[str]:
        """``name: mine -> other`` for each field that differs."""
        mine, theirs = self.to_dict(), other.to_dict()
        names = dict.fromkeys([*mine, *theirs])  # a field left out at its default in one
        return [
            f"{k} {mine.get(k)!r} -> {theirs.get(k)!r}"
            for k in names
            if mine.get(k) != theirs.get(k)
        ]


def ladder_range(low: int, high: int) -> tuple[int, ...]:
    """Powers of two from ``low`` to ``high`` (both rounded into the ladder)."""
    sizes = []
    b = 1
    while b <= high:
        if b >= low:
            sizes.append(b)
        b *= 2
    return tuple(sizes) or (low,)


def parse_batch_sizes(text: str) -> tuple[tuple[int, ...], bool]:
    """``16,32,64`` (exactly these, no refinement) or ``8-1024`` (powers of two between, with
    refinement).

    Raises:
        ValueError: naming what is wrong.
    """
    text = text.strip()
    ranged = "-" in text and "," not in text
    sizes: tuple[int, ...]
    try:
        if ranged:
            low_text, high_text = text.split("-", 1)
            sizes = (int(low_text), int(high_text))
        else:
            sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(
            f"malformed batch sizes {text!r}: write a list (16,32,64) or a range (8-1024)"
        ) from None
    # Well formed, but not batch sizes: say which number is wrong, not how to write them.
    if not sizes:
        raise ValueError(f"no batch sizes in {text!r}: write a list (16,32,64) or a range (8-1024)")
    if min(sizes) < 1:
        raise ValueError(
            f"batch sizes {text!r}: {min(sizes)} is not a valid batch size (the smallest is 1)"
        )
    if ranged:
        low, high = sizes
        if high < low:
            raise ValueError(
                f"malformed batch sizes {text!r}: the range {low}-{high} ends below its start "
                f"(write {high}-{low})"
            )
        return ladder_range(low, high), True
    return tuple(sorted(set(sizes))), False


def parse_policies(text: str) -> tuple[str, ...]:
    """``float32,mixed_float16``: policies in the given order.

    Raises:
        ValueError: for an unknown policy.
    """
    policies = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    for policy in policies:
        Policy.parse(policy)
    if not policies:
        raise ValueError("no policy given")
    return policies


def parse_loss_scales(text: str) -> tuple[LossScale, ...]:
    """``dynamic,fixed:128``.

    Raises:
        ValueError: for a malformed loss scale.
    """
    scales = tuple(LossScale.parse(part) for part in text.split(",") if part.strip())
    if not scales:
        raise ValueError("no loss scale given")
    return tuple(dict.fromkeys(scales))


@dataclass(frozen=True)
class SearchSettings:
    """How a search runs: objective, budgets, tolerances, trial length.

    Attributes:
        objective: ``speed`` (samples/s), ``memory`` (least peak memory per sample among setups
            within ``memory_throughput_floor`` of the fastest) or ``balanced`` (the same with a
            floor of 95%).
        max_trials: at most this many trials (finished ones of a resumed session count).
        budget_minutes: stop starting trials when the next would end past this.
        loss_tolerance: the largest relative loss gap to float32 a candidate may show.
        memory_headroom: the share of device memory kept free.
        measure_seconds: measuring time per trial.
        warmup_steps: warm-up steps per trial, at most.
        warmup_seconds: the seconds they may take: where ``warmup_steps`` would take longer, a
            trial warms up until these have passed, with at least
            :data:`~tuner.trials.spec.WARMUP_FLOOR` steps (issue 50: on a 2-core CPU the 5
            warm-up steps of Keras' ResNet50 at 32x32 took 11-43 s a trial, 198 s of an 8-trial
            search); the guard compares losses after as many updates, whatever the warm-ups.
        min_steps: measured steps at least, so the numerical guard has a window to compare.
        guard_steps: the window of measured steps the loss gap is computed over (its last
            quarter), the same for both trials compared.
        guard_seconds: the seconds those steps may take: where ``guard_steps`` would take
            longer (a model of one-second steps), a trial measures what fits in them, at least
            :data:`~tuner.trials.spec.FLOOR_STEPS`, and the guard compares the steps both
            trials measured (issue 50: on a 2-core CPU the 40 steps of Keras' ResNet50 at
            32x32 took 42-162 s, three quarters of each trial).
        noise_floor: relative differences below this are never called a win.
        device: the device trials run on.
        timeout_s: per trial.
        backend: the Keras 3 backend trials run on (every setup of the search carries it; a
            session is measured on one backend, so its results never mix two).
    """

    objective: str = "speed"
    max_trials: int | None = None
    budget_minutes: float | None = None
    loss_tolerance: float = 0.05
    memory_headroom: float = 0.10
    measure_seconds: float = 2.0
    warmup_steps: int = 5
    warmup_seconds: float = 3.0
    min_steps: int = 20
    guard_steps: int = 40
    guard_seconds: float = 10.0
    noise_floor: float = 0.03
    device: str = "auto"
    timeout_s: float = 300.0
    seed: int = 0
    memory_throughput_floor: float = 0.8
    backend: str = TENSORFLOW

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(
                f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}"
            )
        if self.objective not in OBJECTIVES:
            raise ValueError(
                f"unknown objective {self.objective!r}: choose one of " + ", ".join(OBJECTIVES)
            )
        if self.max_trials is not None and self.max_trials < 1:
            raise ValueError(f"{setting('max_trials')} must be at least 1, not {self.max_trials}")
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise ValueError(
                f"{setting('budget_minutes')} must be positive, not {self.budget_minutes}"
            )
        if not self.loss_tolerance >= 0:
            raise ValueError("the loss tolerance must be 0 or more")
        if not 0 <= self.memory_headroom < 1:
            raise ValueError("the memory headroom must be between 0 and 1")
        if not _DEVICE_RE.match(self.device):
            raise ValueError(f"unknown device {self.device!r}: write auto, cpu or gpu:N")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(
                f"{setting('timeout')} must be a positive number, not {self.timeout_s}"
            )
        if not (math.isfinite(self.warmup_seconds) and self.warmup_seconds > 0):
            raise ValueError(f"the warm-up's seconds must be positive, not {self.warmup_seconds}")
        if not (math.isfinite(self.guard_seconds) and self.guard_seconds > 0):
            raise ValueError(f"the guard's seconds must be positive, not {self.guard_seconds}")
        if not (math.isfinite(self.measure_seconds) and self.measure_seconds > 0):
            raise ValueError(
                f"{setting('measure_seconds')} must be positive, not {self.measure_seconds}"
            )

    def check_workable(self) -> None:
        """Refuse a limit that no trial fits in: a ``--timeout`` or a ``--budget-minutes`` under
        what a worker needs to start and run a step (:data:`WORKER_START_S`). Asked before a
        search runs, not when settings are read back, so that a session stored with such a
        value can be continued with a workable one.

        Raises:
            ValueError: one line, with the smallest value that can work.
        """
        needs = (
            f"a trial's worker needs at least {WORKER_START_S:g} s to start (Python and its "
            "framework's import) and run a step"
        )
        if self.timeout_s < WORKER_START_S:
            raise ValueError(
                f"{setting('timeout', f'{self.timeout_s:g}')} cannot work: {needs}; the smallest "
                f"{setting('timeout')} that can work is {WORKER_START_S:g}"
            )
        if self.budget_minutes is not None and self.budget_minutes * 60 < WORKER_START_S:
            least = math.ceil(WORKER_START_S / 60 * 100) / 100  # in hundredths of a minute
            raise ValueError(
                f"{setting('budget_minutes', f'{self.budget_minutes:g}')} cannot work: it holds no "
                f"trial, and {needs}; the smallest {setting('budget_minutes')} that can work is "
                f"{least:g}"
            )

    #: Fields a resumed search may change: they limit how much more is run, not what is measured.
    BUDGET_FIELDS: ClassVar[tuple[str, ...]] = ("max_trials", "budget_minutes", "timeout_s")

    def to_dict(self) -> dict[str, Any]:
        """The stored form (a session's ``settings`` attribute), from the declared fields
        (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchSettings:
        """Inverse of :meth:`to_dict`; fields unknown to this version are ignored.

        Raises:
            ValueError: a stored value is out of range.
        """
        return from_data(cls, data)

    def differences(self, other: SearchSettings, ignore: tuple[str, ...] = ()) -> list[str]:
        """``name: mine -> other`` for each field that differs (except ``ignore``)."""
        return [
            f"{f.name} {getattr(self, f.name)!r} -> {getattr(other, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)
        ]
