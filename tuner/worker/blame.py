"""Whose failure it is: a failed trial's facts for the parent's classifier
(:func:`tuner.trials.outcome.classify`), :func:`describe`, and the questions asked before they
go (:func:`failure_facts`). Each question re-runs a step another way and never raises: does
Keras' own ``fit`` train the same setup (then mptune's driving of the step failed), does the
step train without XLA or with one step per execution (then that knob is to blame), does
float32 train the same batch (then the policy is)."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.policies import FLOAT32
from tuner.setup import Setup
from tuner.trials.events import Phase
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec
from tuner.worker.loading import fresh_optimizer as _fresh_optimizer
from tuner.worker.usercode import (
    InternalError,
    PolicyFailure,
    UserCodeError,
    first_line,
    raised_by_mptune,
    user_location,
)

if TYPE_CHECKING:
    from tuner.worker.state import TrialContext

#: The phases whose failure Keras' own fit is asked about: the steps.
_STEPS = (Phase.WARMUP, Phase.MEASURE)
#: The phases whose failure float32 is asked about: from the build to the steps.
_BUILT = (Phase.BUILD, Phase.PREPARE, Phase.WARMUP, Phase.MEASURE)


def failure_facts(
    exc: BaseException, spec: TrialSpec, source: ModelSource, context: TrialContext
) -> dict[str, Any]:
    """The ``error`` event's facts for a trial that failed with ``exc``: :func:`describe`, then
    whose failure it is, asked in turn: the policy's (the probe found it, or float32 trains
    the batch), mptune's (Keras' own step trains the setup), or a knob's (the step trains
    without it); a script that decides its own precision is unsupported, not failed."""
    from tuner.worker.script import SetupOverridden

    found = describe(exc, context.phase, source)
    if isinstance(exc, PolicyFailure):
        found["policy_caused"] = True
    elif isinstance(exc, SetupOverridden):
        found["unsupported"] = True  # the script decides the precision, not the model
    elif keras_own_step_trains(exc, found, spec, context):
        # Keras' own train step trains the same model, setup and batch where mptune's
        # driving of it failed: mptune's failure, never a verdict on the model (issue 49).
        found.update(internal=True, user_code=False, location=None)
        found["message"] = (
            f"mptune's own driving of the step failed where Keras' train step trains this "
            f"setup: {found['message']}"
        )
    elif spec.setup.xla and trains_with(spec.setup.replace(xla=False), exc, found, context):
        found["unsupported"] = True
        found["message"] = (
            f"XLA cannot compile this model (it trains without XLA): {found['message']}"
        )
    elif spec.setup.steps_per_execution > 1 and trains_with(
        spec.setup.replace(steps_per_execution=1), exc, found, context
    ):
        found["unsupported"] = True
        found["message"] = (
            f"{spec.setup.steps_per_execution} steps per execution fail for this model, in "
            f"Keras' own fit too (it trains with 1): {found['message']}"
        )
    elif float32_survives(exc, found, spec, context):
        found["policy_caused"] = True
        found["message"] = (
            f"fails only under {spec.policy.name}; float32 trains the same batch: "
            f"{found['message']}"
        )
    return found


def describe(exc: BaseException, phase: Phase, source: ModelSource) -> dict[str, Any]:
    """Facts about a failure, for the parent's classifier: what was raised and where, whether
    it is out of memory, and whether the user's code or mptune's failed."""
    from tuner.worker import backends, training

    oom = backends.current().is_oom(exc)
    user_code = isinstance(exc, UserCodeError)
    # mptune's own failure (its code raised, or its work on accepted data failed) is never the
    # user's to fix, whatever model it ran.
    stated = user_code or isinstance(exc, (PolicyFailure, InternalError))
    internal = (
        isinstance(exc, Exception)
        and not (oom or user_code or isinstance(exc, PolicyFailure))
        and raised_by_mptune(exc)
    )
    root = exc.__cause__ if stated and exc.__cause__ is not None else exc
    location = None if internal else getattr(exc, "location", None)
    location = location or (None if internal else user_location(root, source.path, source.spec))
    message = str(exc) if stated else first_line(exc)
    if oom and "RESOURCE_EXHAUSTED" in str(exc) and "RESOURCE_EXHAUSTED" not in message:
        # XLA's first line can be a symptom (its autotuner finding no kernel that fits): the
        # line that names the exhausted memory says what happened.
        line = next(line for line in str(exc).splitlines() if "RESOURCE_EXHAUSTED" in line)
        message = f"{type(root).__name__}: {line.strip()}"
    return {
        "policy_caused": False,
        "predicted": isinstance(exc, training.PredictedOutOfMemory),
        "exception": type(root).__name__,
        "message": message,
        "location": location,
        "phase": phase.value,
        "oom": oom,
        "user_code": user_code,
        "internal": internal,
        "traceback": "".join(traceback.format_exception(type(root), root, root.__traceback__)),
    }


def keras_own_step_trains(
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: TrialContext
) -> bool:
    """Whether Keras' own ``fit`` trains the failed trial's model, compiled afresh for the same
    setup, for one execution (``steps_per_execution`` steps of the trial's first batch): then
    the failure was in how mptune drove the step (its own state handling, its compiled step),
    not in the model, the policy or a knob. Only asked of a failure in the steps (not an
    out-of-memory error, not a stop, not the model's own code); never raises."""
    if (
        not isinstance(exc, Exception)
        or isinstance(exc, (UserCodeError, PolicyFailure))
        or facts.get("oom")
        or facts.get("phase") not in _STEPS
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


def trains_with(
    changed: Setup, exc: BaseException, facts: dict[str, Any], context: TrialContext
) -> bool:
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
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: TrialContext
) -> bool:
    """Whether float32 trains the batch the trial failed on: then the policy caused the
    failure. Only asked of a failure (not an out-of-memory error, not a stop) under a
    low-precision policy, after the data was made; never raises."""
    if (
        not isinstance(exc, Exception)
        or facts.get("oom")
        or context.build_float32 is None
        or facts.get("phase") not in _BUILT
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
