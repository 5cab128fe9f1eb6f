"""What one trial runs: :class:`TrialSpec`, a :class:`~tuner.setup.Setup` and how to measure it.

A spec is plain data (frozen, JSON round-trippable) because it crosses a process boundary: the
parent validates it, writes it to the worker's stdin, and stores it with the result. Its dict
keeps the setup's fields at the top level (``policy``, ``batch_size``, ``loss_scale``), as
sessions stored before :class:`~tuner.setup.Setup` existed wrote them.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.setup import SETUP_FIELDS, LossScale, Policy, Setup

__all__ = ["LossScale", "Policy", "Setup", "TrialSpec"]

_DEVICE_RE = re.compile(r"^(auto|cpu|gpu:\d+)$")


#: A trial may be pruned after this many measured executions: one slow first call (a late
#: compile, an allocator growing) is not enough to judge it by (:func:`losing`).
PRUNE_AFTER = 3

#: How fit's own loop is timed in a trial (:class:`tuner.worker.feeding.FitClock`), here where
#: the simulated trials of :mod:`tuner.trials.lookup` price it too.

#: Executions of fit's loop before its clock starts: the first starts the input pipeline and
#: may trace the step anew for the input's own signature (a dataset's shapes, an adapter's
#: dtypes); the second shows the pipeline running.
WARM_EXECUTIONS = 2
#: Fit's loop is timed over at least this many executions after the warm ones...
MIN_EXECUTIONS = 3
#: Fit's loop lasts at most this many times the trial's window after its warm executions,
#: whatever an epoch's length (issue 50): where the next execution would end past it, the one
#: begun is the last. On a 2-core CPU, Keras' ResNet50 at 32x32 on JAX (steps of 1.1 s) ran
#: 135 s of fit's loop after a 44 s device window before this bound, and a trial of it reached
#: its 300 s limit while timing.
LONGEST = 1.5
#: A window of whole epochs holds at least this many (within :data:`LONGEST`): a tf.data
#: pipeline's epochs vary (its autotuning; bench/models/text_dataset.py on a 2-core CPU, its
#: autotuning on as it then was: one epoch in three or four 1.5-2x the others), and two epochs
#: made one such epoch half a figure.
MIN_EPOCHS = 3
#: Arrays of mptune's own (a built-in workload's, or synthetic) reach fit as an epoch of at
#: least this many batches, repeating the trial's pool...
EPOCH_BATCHES = 64
#: ... within this many bytes.
EPOCH_BYTES = 1 << 30
#: The least measured steps of a window whose ``min_steps`` outlast its ``min_steps_seconds``
#: (issue 50): twice the numerical guard's least (its loss gap compares the last quarter of the
#: steps two trials both measured, :data:`tuner.search.measures.MIN_GAP_STEPS` at least).
FLOOR_STEPS = 8
#: The least warm-up steps of a warm-up whose steps outlast its ``warmup_seconds`` (issue 50):
#: the first may still trace or compile (TensorFlow, PyTorch), the second runs as the measured
#: ones will. Where a step takes seconds, what the other warm-up steps absorb (an allocator
#: growing, an autotuner's first picks) is milliseconds beside it; five such steps were 198 s
#: of a 848 s search of Keras' ResNet50 at 32x32 on a 2-core AVX2-only CPU (docs/benchmarks.md).
WARMUP_FLOOR = 2


def losing(
    prune_below: float | None, samples: int, executions_s: Sequence[float], total_s: float
) -> bool:
    """Whether a trial's measured executions so far (each of ``samples`` samples: its batch
    times its steps per execution; ``total_s`` their seconds in all) run under
    ``prune_below`` samples/s, after at least :data:`PRUNE_AFTER` of them: the window's rate
    and its median execution's both (issue 70). The window's rate alone is held down by one
    slow first call: on an H200 the first trials of fresh workers were pruned after 3
    executions at about 1/100 of what they ran alone. The median is the figure checked
    against itself, read only where the window is under the rate (the check runs after each
    execution, inside the trial's timing)."""
    n = len(executions_s)
    if prune_below is None or n < PRUNE_AFTER or total_s <= 0:
        return False
    if n * samples / total_s >= prune_below:
        return False
    middle = statistics.median(executions_s)
    return middle > 0 and samples / middle < prune_below


def _steps_until(seconds: float, step_s: float) -> int:
    """The steps of ``step_s`` seconds after which ``seconds`` have passed: the least ``n``
    with ``n * step_s >= seconds``, as a phase's clock finds it step by step (a quotient that
    rounds up past a whole, 3.0 / 0.3, is not one step more)."""
    n = math.ceil(seconds / step_s)
    return n - 1 if (n - 1) * step_s >= seconds else n


@dataclass(frozen=True)
class TrialSpec:
    """One short training run: a setup, a model, and how to measure it.

    Attributes:
        model: the model source, e.g. ``builtin:cnn``, ``path/to/model.py``, ``model.keras``
            (see :mod:`tuner.trials.models`).
        setup: the policy, batch size and loss scale under trial.
        warmup_steps: steps run before timing starts (tracing, autotuning, allocator growth).
        steps: measured steps; ``None`` measures for ``measure_seconds`` instead (at least
            ``min_steps`` and at most ``max_steps``).
        measure_seconds: the measuring time when ``steps`` is ``None``, and how long fit's
            own loop is timed on the input after them (:meth:`fit_seconds`).
        seed: seeds weights and the synthetic data, so runs are comparable.
        timeout_s: wall-clock limit for the whole trial, start-up included.
        device: ``auto`` (the first GPU if there is one), ``cpu`` or ``gpu:N``.
        memory_limit_mb: over this the trial counts as out of memory (GPU: a TensorFlow
            memory limit; CPU: the worker's peak resident memory).
        probe: run the numerics probe before the timed steps (low-precision policies only; a
            search runs it in the first trial of each policy).
        prune_below: stop measuring once the measured rate is under this many samples/s
            (after :data:`PRUNE_AFTER` executions): the setup cannot lead, and the rest of its
            measuring and its input's timing are saved (a pruner in Optuna's sense). None:
            measure in full. How long to measure, not what is measured: a recorded search is
            replayed without it.
        min_steps_seconds: the seconds ``min_steps`` may take (issue 50): past them the window
            ends at ``measure_seconds`` once :data:`FLOOR_STEPS` steps ran, so a model of
            one-second steps measures a few, not the numerical guard's 40. None: ``min_steps``
            whatever they take. How long to measure, like ``prune_below``.
        warmup_seconds: the seconds the warm-up may take: past them it ends once
            :data:`WARMUP_FLOOR` steps ran (never more than ``warmup_steps``), so a model of
            seconds-long steps warms up with 2 or 3, not 5; the result's ``warmup_updates``
            says how many applied. None: ``warmup_steps`` whatever they take (``mptune
            trial``'s ``--warmup``).
        observe: a training script's worker reads back what the script's own ``fit`` trains
            (its precision, batch and compile settings) and ends, training nothing
            (:func:`tuner.trials.observe.observe_script`); ``setup`` is not run.
    """

    model: str
    setup: Setup
    warmup_steps: int = 5
    steps: int | None = None
    measure_seconds: float = 5.0
    min_steps: int = 10
    max_steps: int = 2000
    seed: int = 0
    timeout_s: float = 300.0
    device: str = "auto"
    memory_limit_mb: float | None = None
    probe: bool = True
    prune_below: float | None = None
    min_steps_seconds: float | None = None
    warmup_seconds: float | None = None
    observe: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.setup, Setup):
            raise ValueError(f"a trial needs a Setup, not {self.setup!r}")
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
        if self.min_steps_seconds is not None and not self.min_steps_seconds > 0:
            raise ValueError(
                f"the seconds for the least steps must be positive, not {self.min_steps_seconds}"
            )
        if self.warmup_seconds is not None and not self.warmup_seconds > 0:
            raise ValueError(f"the warm-up's seconds must be positive, not {self.warmup_seconds}")

    # The setup's parts, read often enough in the worker and the reports to name them here.
    @property
    def policy(self) -> Policy:
        return self.setup.policy

    @property
    def batch_size(self) -> int:
        return self.setup.batch_size

    @property
    def loss_scale(self) -> LossScale:
        return self.setup.loss_scale

    @classmethod
    def create(
        cls, model: str, policy: str, batch_size: int, loss_scale: str | None = None, **kwargs: Any
    ) -> TrialSpec:
        """Build a spec from user-facing values; ``loss_scale=None`` means the policy's default.

        Raises:
            ValueError: naming the bad value.
        """
        return cls(
            model=model,
            setup=Setup(policy, batch_size, loss_scale),
            **kwargs,
        )

    def to_dict(self) -> dict[str, Any]:
        data = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "setup"
        }
        if data["probe"]:
            del data["probe"]  # the default, left out: specs stored before it existed match
        if not data["observe"]:
            del data["observe"]
        for unset in ("prune_below", "min_steps_seconds", "warmup_seconds"):
            if data[unset] is None:
                del data[unset]  # specs stored before it existed match
        return {"model": data.pop("model"), **self.setup.to_dict(), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: for an unknown field or a bad value.
        """
        known = {f.name for f in dataclasses.fields(cls)} - {"setup"}
        unknown = sorted(set(data) - known - SETUP_FIELDS)
        if unknown:
            raise ValueError(f"unknown trial spec field(s): {', '.join(unknown)}")
        setup = Setup.from_dict({k: v for k, v in data.items() if k in SETUP_FIELDS})
        return cls(setup=setup, **{k: v for k, v in data.items() if k in known})

    def least_steps(self, step_s: float) -> int:
        """The least steps a measured window of steps of ``step_s`` seconds runs: ``min_steps``,
        or where they would take over ``min_steps_seconds``, what fits in those (at least
        :data:`FLOOR_STEPS`). The worker's rule (:meth:`tuner.worker.training.StepRunner.run`)
        in closed form, for the simulated trials of :mod:`tuner.trials.lookup`."""
        least = self.min_steps
        if self.min_steps_seconds is None or least * step_s <= self.min_steps_seconds:
            return least
        within = _steps_until(self.min_steps_seconds, step_s)
        return max(min(FLOOR_STEPS, least), min(least, within))

    def warmup_count(self, step_s: float) -> int:
        """The warm-up steps a trial of steps of ``step_s`` seconds runs: ``warmup_steps``, or
        where they would take over ``warmup_seconds``, the steps until those have passed (at
        least :data:`WARMUP_FLOOR`). The worker's rule (:func:`tuner.worker.measuring.warm_up`)
        in closed form, for the simulated trials of :mod:`tuner.trials.lookup`."""
        most = self.warmup_steps
        if self.warmup_seconds is None or step_s <= 0 or most * step_s <= self.warmup_seconds:
            return most
        return min(most, max(WARMUP_FLOOR, _steps_until(self.warmup_seconds, step_s)))

    def fit_seconds(self, window_s: float) -> float:
        """How long fit's own loop is timed on the input, after the measured steps took
        ``window_s``: ``measure_seconds``; for a trial of a fixed number of ``steps``, as long
        as those steps took, so that a trial of 6 steps does not time fit for the 5 s of a
        window it never measured (fit's loop still times its least executions)."""
        return self.measure_seconds if self.steps is None else window_s

    def describe(self) -> str:
        """A short human label, e.g. ``mixed_float16 b64 dynamic``."""
        return self.setup.label
