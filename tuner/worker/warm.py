"""The warm-worker cache: what a worker keeps between trials of one model under one policy
(issue 34), so that a later trial starts from the compiled model, at its starting values,
instead of a fresh process: :class:`WarmModel`, made by :func:`keep_warm` after a first
trial's compile, and :func:`between_trials`, the worker's housekeeping while the parent
records a trial."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.setup import Setup
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    from tuner.trials.hazards import Hazard
    from tuner.worker.loading import LoadedModel

#: A warm worker keeps a host copy of the model's and optimizer's starting values; past this
#: size it does not stay warm (each trial then starts a fresh worker, as before).
WARM_SNAPSHOT_LIMIT_BYTES = 1 << 30


@dataclass
class WarmModel:
    """What a warm worker keeps between trials of one model under one policy: the compiled
    model, its variables and its optimizer's as they were before the first step, the setup it
    is compiled for, and what the data is made from."""

    model: Any  # a keras.Model
    loaded: LoadedModel
    device: str
    tensor_cores: bool
    variables: list[Any]  # the backend's arrays
    optimizer_variables: list[Any]
    #: what the first trial's model checks said, sent again with each trial
    warnings: list[tuple[str, str]]
    hazards: list[Hazard]
    #: the setup the model is compiled for (its batch size aside, which compile() never sees)
    compiled_for: Setup | None = None
    #: the last trial's step runner, let go between trials (see :func:`between_trials`)
    spent: object = None
    #: the last trial's batches, by (batch size, seed): a trial at the same batch size (a
    #: runoff's or a final check's repeat) trains on them again instead of making them anew
    data: tuple[tuple[int, int], list[Any]] | None = None

    def batches(self, spec: TrialSpec, make: Callable[[], list[Any]]) -> list[Any]:
        """The trial's batches: the last trial's where they are the same, else made."""
        key = (spec.batch_size, spec.seed)
        if self.data is None or self.data[0] != key:
            self.data = None  # the old pool goes before the new one is made
            self.data = (key, make())
        return self.data[1]

    def restore(self) -> None:
        """Every variable back to its value before the first step: the next trial trains from
        the same start, with the same dropout seeds, as a fresh worker would."""
        for variable, value in zip(self.model.variables, self.variables, strict=True):
            variable.assign(value)
        for variable, value in zip(
            self.model.optimizer.variables, self.optimizer_variables, strict=True
        ):
            variable.assign(value)
        self.model.reset_metrics()

    def prepare_for(self, setup: Setup) -> None:
        """Back to the starting values, compiled again where ``setup`` needs another compile
        than the last trial's."""
        self.restore()
        if compiled_differently(self.compiled_for, setup):
            self.recompile(setup)

    def recompile(self, setup: Setup) -> None:
        """Compile the model again for ``setup`` (another loss scale, XLA, steps per execution
        or accumulation under the same policy) with a new optimizer made from the model's own
        optimizer's config, as a fresh worker's compile() would give it; the model's variables
        are at their starting values (call :meth:`restore` first), the new optimizer's are
        built and become the snapshot."""
        from tuner import keras_setup
        from tuner.worker import loading

        gc.unfreeze()  # the old optimizer and traced step become garbage here
        keras_setup.compile_model(
            self.model,
            setup,
            loading.fresh_optimizer(self.loaded.optimizer),
            self.loaded.loss,
            **self.loaded.compile_extras,
        )
        with keras_setup.in_its_strategy(self.model):
            self.model.optimizer.build(self.model.trainable_variables)
        self.variables = [v.numpy() for v in self.model.variables]
        self.optimizer_variables = [v.numpy() for v in self.model.optimizer.variables]
        self.compiled_for = setup
        gc.collect()  # the old optimizer and traced step, now, on this trial's build time
        gc.freeze()


def compiled_differently(compiled_for: Setup | None, setup: Setup) -> bool:
    """Whether ``setup`` needs another compile() than ``compiled_for`` (the batch size never
    does: the data has no fixed batch dimension)."""
    return compiled_for is None or compiled_for.replace(batch_size=1) != setup.replace(batch_size=1)


def keep_warm(
    model: Any,
    loaded: LoadedModel,
    device: str,
    tensor_cores: bool,
    warnings: list[tuple[str, str]],
    hazards: list[Hazard],
    setup: Setup,
) -> WarmModel | None:
    """Build the optimizer now (as its first step would) and copy every starting value, so
    that later trials can start from them; None when the copy would pass the size limit."""
    from tuner import keras_setup

    if device.startswith("cpu") and not os.access("/proc/self/clear_refs", os.W_OK):
        return None  # a later trial's CPU peak could not be told from this one's
    if not model.optimizer.built:
        # Built once: a LossScaleOptimizer built again adds its variables again, and a step
        # compiled for the state it had (out_shardings under a keras.distribution) no longer
        # fits it (issue 49: "pjit out_shardings ... length 14 ... length 16").
        with keras_setup.in_its_strategy(model):
            model.optimizer.build(model.trainable_variables)
    size = sum(int(v.numpy().nbytes) for v in (*model.variables, *model.optimizer.variables))
    if size > WARM_SNAPSHOT_LIMIT_BYTES:
        return None
    return WarmModel(
        model,
        loaded,
        device,
        tensor_cores,
        [v.numpy() for v in model.variables],
        [v.numpy() for v in model.optimizer.variables],
        [w for w in warnings if w[0] != "batch_not_multiple_of_8"],
        list(hazards),
        setup,
    )


def between_trials(warm: WarmModel) -> None:
    """Let the last trial's data go and collect its garbage, between a warm worker's trials
    (while the parent records the trial), then freeze what lives on (the model, its traced
    step, TensorFlow's objects) so that the next collection does not scan it again.

    Off the trials' clocks: letting a tf.data iterator go waits 0.4-2.4 s on a CPU after some
    trials (those with several steps per execution: its prefetching threads wind down), longer
    than the parent takes to record the trial, so the next trial waited for it; it now goes on
    a thread of its own, which waits beside the next trial without slowing it
    (bench/bench_drop.py). A collection of a TensorFlow process's objects took 0.2-0.5 s,
    which in a 2 s trial is a fifth of its wall time. Automatic
    collection is off in the worker for the same reason: one during the timed steps would be
    counted as a slow step. Every first trial collects and freezes the model and TensorFlow's
    objects while it builds, and a recompile collects its old traced step while it builds, so
    this collection scans only what the last trial made (milliseconds).
    """
    spent, warm.spent = [warm.spent], None
    if os.environ.get("MPTUNE_DROP_IN_TURN") == "1":  # as before, for bench/bench_drop.py
        spent.clear()
    else:
        threading.Thread(target=spent.clear, name="drop-last-trial", daemon=True).start()
    gc.collect()
    gc.freeze()
