"""Whose failure it is: the questions a failed trial asks before its facts go to the parent's
classifier (:func:`tuner.trials.outcome.classify`). Each re-runs a step another way and never
raises: does Keras' own ``fit`` train the same setup (then mptune's driving of the step
failed), does the step train without XLA or with one step per execution (then that knob is
to blame), does float32 train the same batch (then the policy is)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.policies import FLOAT32
from tuner.trials.spec import TrialSpec
from tuner.worker.loading import fresh_optimizer as _fresh_optimizer
from tuner.worker.usercode import UserCodeError


def keras_own_step_trains(
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: Any
) -> bool:
    """Whether Keras' own ``fit`` trains the failed trial's model, compiled afresh for the same
    setup, for one execution (``steps_per_execution`` steps of the trial's first batch): then
    the failure was in how mptune drove the step (its own state handling, its compiled step),
    not in the model, the policy or a knob. Only asked of a failure in the steps (not an
    out-of-memory error, not a stop, not the model's own code); never raises."""
    if (
        not isinstance(exc, Exception)
        or isinstance(exc, UserCodeError)
        or type(exc).__name__ == "PolicyFailure"
        or facts.get("oom")
        or facts.get("phase") not in ("warmup", "measure")
        or context.model is None
        or not context.batches
    ):
        return False
    try:
        from tuner import keras_setup

        if context.runner is not None:
            context.runner.steps.sync()  # JAX: the variables back in the model
        import keras

        keras_setup.compile_model(
            context.model, spec.setup, _fresh_optimizer(context.optimizer), context.loss
        )
        spe = spec.setup.steps_per_execution
        x, y = keras.tree.map_structure(
            lambda *parts: np.concatenate(parts), *([context.batches[0]] * spe)
        )
        history = context.model.fit(x, y, batch_size=spec.batch_size, epochs=1, verbose=0)
        return bool(history.history.get("loss"))
    except BaseException:  # noqa: BLE001 - Keras' own fit fails too: not mptune's doing
        return False


def trains_with(changed: Any, exc: BaseException, facts: dict[str, Any], context: Any) -> bool:
    """Whether the failed step trains under the setup ``changed`` (the trial's less one
    knob: XLA off, one step per execution): then that knob, not the model, is to blame. Only
    asked of a failure (not an out-of-memory error, not a stop) once the model was compiled;
    never raises."""
    if not isinstance(exc, Exception) or facts.get("oom") or context.model is None:
        return False
    try:
        from tuner import keras_setup

        keras_setup.compile_model(
            context.model, changed, _fresh_optimizer(context.optimizer), context.loss
        )
        x, y = context.batches[0]
        loss = context.model.train_on_batch(x, y, return_dict=True)["loss"]
        return bool(loss is not None)
    except BaseException:  # noqa: BLE001 - it fails without the knob too: not the knob's doing
        return False


def float32_survives(
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: Any
) -> bool:
    """Whether float32 trains the batch the trial failed on: then the policy caused the
    failure. Only asked of a failure (not an out-of-memory error, not a stop) under a
    low-precision policy, after the data was made; never raises."""
    if (
        not isinstance(exc, Exception)
        or facts.get("oom")
        or context.build_float32 is None
        or facts.get("phase") not in ("build", "prepare", "warmup", "measure")
    ):
        return False
    try:
        from tuner import keras_setup
        from tuner.setup import LossScale, Setup

        twin = context.build_float32()
        if not context.batches:  # it failed while being built: float32 builds it
            return True
        step = context.runner.global_step if context.runner is not None else 1
        x, y = context.batches[max(0, step - 1) % len(context.batches)]
        keras_setup.compile_model(
            twin, Setup(FLOAT32, spec.batch_size, LossScale("none")), None, context.loss
        )
        loss = twin.train_on_batch(x, y, return_dict=True)["loss"]
        return bool(loss is not None)
    except BaseException:  # noqa: BLE001 - float32 fails too, or cannot be asked: not the policy
        return False
