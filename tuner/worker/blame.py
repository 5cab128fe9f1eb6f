"""Whose failure it is: a failed trial's facts for the parent's classifier
(:func:`tuner.trials.outcome.classify`), :func:`describe`, and the questions asked before they
go (:func:`failure_facts`). Each question re-runs a step another way and never raises: does
Keras' own ``fit`` train the same setup, or the model as the user's code made it (without the
float32 cast the trial appends to its outputs) train the same batch (then mptune's own part
failed); does the step train without a setting the trial added, each knob of
:data:`~tuner.setup.KNOBS` in turn, as a setup really is without it (float8 without the XLA it
brings on TensorFlow; a knob the built model keeps, on a model built again) (then that knob is
to blame); and last, does float32 train the same batch (then the policy is: a precision is
called unsafe only where the model's own numerics fail under it)."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.policies import FLOAT32
from tuner.setup import BACKEND_NAMES, KNOB_BY_NAME, KNOBS, Knob, Setup
from tuner.trials.events import Phase
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec
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
#: The knobs a failed trial is asked without, in turn: one that brings others first (float8,
#: which brings XLA on TensorFlow: without it, what it brings goes too), then the rest in the
#: rows' order (XLA, steps per execution, TF32, accumulation, rematerialisation).
_ASKED = tuple(sorted(KNOBS, key=lambda knob: knob.brings is None))


def failure_facts(
    exc: BaseException, spec: TrialSpec, source: ModelSource, context: TrialContext
) -> dict[str, Any]:
    """The ``error`` event's facts for a trial that failed with ``exc``: :func:`describe`, then
    whose failure it is, asked in turn: the policy's where the probe found it; mptune's where
    Keras' own step trains the setup, or the model without what the trial added to it trains
    the batch; a knob's where the step trains without it (``unsupported``, named: "fails only
    with float8"); the policy's where only float32 trains the batch. A script that decides its
    own precision is unsupported, not failed."""
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
    elif unwrapped_trains(exc, found, spec, context):
        # What the trial added to the model failed, and the model as the user made it trains:
        # mptune's failure, never a verdict on the model or its precision (issue 70).
        found.update(internal=True, user_code=False, location=None)
        found["message"] = (
            f"the float32 cast mptune appends to the model's outputs failed where the model "
            f"as it is trains this setup: {found['message']}"
        )
    elif (knob := knob_to_blame(exc, found, spec, context)) is not None:
        found["unsupported"] = True
        found["message"] = f"{only_with(knob, spec.setup)}: {found['message']}"
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
        from tuner.worker.loading import fresh_optimizer

        if context.runner is not None:
            context.runner.steps.sync()  # JAX: the variables back in the model
        import keras

        keras_setup.compile_model(
            context.model,
            spec.setup,
            fresh_optimizer(context.optimizer),
            context.loss,
            **context.extras,
        )
        spe = spec.setup.steps_per_execution
        x, y, *weights = keras.tree.map_structure(
            lambda *parts: np.concatenate(parts), *([context.batches[0]] * spe)
        )
        history = context.model.fit(
            x,
            y,
            sample_weight=weights[0] if weights else None,
            batch_size=spec.batch_size,
            epochs=1,
            verbose=0,
        )
        return bool(history.history.get("loss"))
    except BaseException:  # noqa: BLE001 - Keras' own fit fails too: not mptune's doing
        return False


def without(setup: Setup, knob: Knob) -> Setup:
    """``setup`` as it really is without ``knob``: the knob at its default, and so is every
    knob it brings (float8 on TensorFlow without the XLA it brings). The setup itself where
    the knob is at its default already, or is brought by another (XLA under float8 on
    TensorFlow: it goes only with float8)."""
    defaults = {knob.name: knob.default}
    if knob.brings is not None and getattr(setup, knob.name) != knob.default:
        defaults.update({name: KNOB_BY_NAME[name].default for name in knob.brings(setup.backend)})
    return setup.replace(**defaults)


def only_with(knob: Knob, setup: Setup) -> str:
    """The verdict on a trial that trains without ``knob``: ``fails only with float8 (and the
    XLA it brings on TensorFlow); it trains without them``."""
    brought = [
        KNOB_BY_NAME[name].words
        for name, value in (knob.brings(setup.backend) if knob.brings else {}).items()
        if getattr(setup, name) == value
    ]
    shown = (knob.say(setup) if knob.kind is int else None) or knob.words
    also = (
        f" (and the {' and '.join(brought)} it brings on {BACKEND_NAMES[setup.backend]})"
        if brought
        else ""
    )
    return f"fails only with {shown}{also}; it trains without {'them' if brought else 'it'}"


def knob_to_blame(
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: TrialContext
) -> Knob | None:
    """The first knob (:data:`_ASKED`) away from its default without which the failed step
    trains: that knob, not the model, is to blame; None where none is. Only asked of a failure
    (not an out-of-memory error, not a stop) once the model was built and its data made."""
    if not isinstance(exc, Exception) or facts.get("oom") or context.model is None:
        return None
    for knob in _ASKED:
        changed = without(spec.setup, knob)
        if changed != spec.setup and trains_with(changed, knob, spec, context):
            return knob
    return None


def trains_with(changed: Setup, knob: Knob, spec: TrialSpec, context: TrialContext) -> bool:
    """Whether the failed step trains under the setup ``changed`` (the trial's less ``knob``):
    the trial's model compiled again where a compile sets the knob (:attr:`Knob.warm`: XLA,
    steps per execution, accumulation), else the model built again under ``changed``, with
    the cast the trial appends (float8, TF32, rematerialisation: a built model keeps them);
    never raises."""
    try:
        if knob.warm:
            model = context.model
        elif context.rebuild is not None and context.batches:
            from tuner.worker import checks

            model = context.rebuild(changed)
            model = checks.check_model(
                model, changed.policy.name, spec.batch_size, failed_batch(context)[0], context.loss
            )[0]
        else:
            return False
        return _trains(model, changed, context)
    except BaseException:  # noqa: BLE001 - it fails without the knob too: not the knob's doing
        return False


def unwrapped_trains(
    exc: BaseException, facts: dict[str, Any], spec: TrialSpec, context: TrialContext
) -> bool:
    """Whether the model as the user's code made it, without what the trial added to it (the
    float32 cast of its outputs: :func:`tuner.worker.checks.check_model`), trains the batch
    the trial failed on under the same setup: then the trial's own addition failed. Only
    asked of a failure (not an out-of-memory error, not a stop) of a model the trial added
    to, once it was compiled; never raises."""
    if (
        not isinstance(exc, Exception)
        or isinstance(exc, UserCodeError)
        or facts.get("oom")
        or context.model is None
        or context.unwrapped is None
        or context.unwrapped is context.model
    ):
        return False
    try:
        return _trains(context.unwrapped, spec.setup, context)
    except BaseException:  # noqa: BLE001 - the model fails as it is too: not the addition's doing
        return False


def _trains(model: Any, setup: Setup, context: TrialContext) -> bool:
    """Whether ``model``, compiled for ``setup`` as the trial compiles it (a fresh copy of its
    optimizer, its loss and metrics), trains the batch the trial failed on. Raises what the
    step raises."""
    from tuner import keras_setup
    from tuner.worker.loading import fresh_optimizer

    if context.runner is not None:
        context.runner.steps.sync()  # JAX: the trained variables back in the model
    keras_setup.compile_model(
        model, setup, fresh_optimizer(context.optimizer), context.loss, **context.extras
    )
    loss = model.train_on_batch(*failed_batch(context), return_dict=True)["loss"]
    return bool(loss is not None)


def failed_batch(context: TrialContext) -> tuple[Any, ...]:
    """The batch the trial failed on (its first before a step ran), with its sample weights
    where it has them.

    Raises:
        IndexError: the trial has no batches yet.
    """
    step = context.runner.global_step if context.runner is not None else 1
    return context.batches[max(0, step - 1) % len(context.batches)]


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
        keras_setup.compile_model(
            twin, Setup(FLOAT32, spec.batch_size, LossScale("none")), None, context.loss
        )
        loss = twin.train_on_batch(*failed_batch(context), return_dict=True)["loss"]
        return bool(loss is not None)
    except BaseException:  # noqa: BLE001 - float32 fails too, or cannot be asked: not the policy
        return False
