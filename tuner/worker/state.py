"""A trial's state in its worker, shared by the modules that work on it: the pipeline that
fills it (:mod:`tuner.worker.pipeline`), the measuring that reads it
(:mod:`tuner.worker.measuring`) and the blame that asks it whose failure it was
(:mod:`tuner.worker.blame`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.trials.events import Phase
from tuner.worker.channel import Channel

if TYPE_CHECKING:
    from tuner.setup import Setup
    from tuner.worker.training import StepRunner

#: One batch of the trial's pool: the model's inputs and targets (the backend's arrays), and
#: their sample weights where the user's input gives them
Batch = tuple[Any, ...]


@dataclass
class TrialContext:
    """One trial as its pipeline has it so far: where it is (``phase``), and what the error
    path needs to tell a failure of the policy, a knob or mptune's from the model's own."""

    phase: Phase = Phase.IMPORT
    build_float32: Callable[[], Any] | None = None
    #: the trial's model built afresh by its own code under another setup (its policy, TF32,
    #: rematerialisation): for the blame to ask about a knob a built model keeps
    rebuild: Callable[[Setup], Any] | None = None
    batches: list[Batch] = field(default_factory=list)
    loss: Any = None  # the model's loss, as Keras takes it
    runner: StepRunner | None = None
    #: the compiled model and the optimizer it was given, to ask whether XLA is to blame
    model: Any = None
    optimizer: Any = None
    #: the model as the user's code made it, before the trial added to it (the float32 cast of
    #: its outputs), and what else the trial compiles it with (its metrics)
    unwrapped: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    #: a training script's model as it handed it to fit (what the user runs today), and the
    #: data its fit validates on: both go into the trial's result
    script: Any = None
    validation: tuple[Any, Any] | None = None
    #: when timing stops (``time.perf_counter``), in time to report before the trial's limit
    timing_ends: float | None = None

    def enter(self, phase: Phase, channel: Channel) -> None:
        """Move on to ``phase``: the error path and the parent (a ``phase`` message) both know
        where the worker is."""
        self.phase = phase
        channel.emit("phase", phase=phase.value)


@dataclass(frozen=True)
class Prepared:
    """A trial ready to measure: its step runner, what building and probing took, whether it
    runs on the CPU, what fit's own loop is fed, and (a warm worker with one peak for the
    process's life) that peak when the trial began."""

    runner: StepRunner
    build_s: float
    probe_s: float | None
    on_cpu: bool
    feed: Callable[[], Any]
    peak_before: float | None = None
