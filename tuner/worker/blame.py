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

import os
import re
import traceback
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.policies import FLOAT32
from tuner.setup import BACKEND_NAMES, KNOB_BY_NAME, KNOBS, Knob, Setup
from tuner.trials.events import Phase
from tuner.trials.hazards import (
    DTYPE_MISMATCH,
    LOW_PRECISION_DTYPES,
    NO_KERNEL,
    TITLES,
    Hazard,
)
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
        x, *rest = keras.tree.map_structure(
            lambda *parts: np.concatenate(parts), *([context.batches[0]] * spe)
        )
        history = context.model.fit(
            x,
            rest[0] if rest else None,
            sample_weight=rest[1] if len(rest) > 1 else None,
            batch_size=spec.batch_size,
            epochs=1,
            verbose=0,
        )
        return bool(history.history)
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
                model,
                changed.policy.name,
                spec.batch_size,
                failed_batch(context)[0],
                context.loss,
                cast=context.unwrapped is not context.model,
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
    from tuner.worker.training import reported_loss

    logs = model.train_on_batch(*failed_batch(context), return_dict=True)
    return bool(reported_loss(logs, model) is not None)


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
        from tuner.worker.training import reported_loss

        logs = twin.train_on_batch(*failed_batch(context), return_dict=True)
        return bool(reported_loss(logs, twin) is not None)
    except BaseException:  # noqa: BLE001 - float32 fails too, or cannot be asked: not the policy
        return False


#: TensorFlow's words for two inputs of one op in different dtypes (it does not promote):
#: ``Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument
#: 'x'`` where a graph is built, ``cannot compute Mul as input #1(zero-based) was expected to
#: be a half tensor but is a float tensor`` eagerly.
_MISMATCH = (
    re.compile(r"has type (\w+) that does not match type (\w+) of argument"),
    re.compile(r"expected to be a (\w+) tensor but is a (\w+) tensor"),
)
#: TensorFlow's words for an op that takes no half-precision input: its kernel's type list
#: (``Input 'predictions' of 'InTopKV2' Op has type float16 that does not match expected type
#: of float32``), or no kernel registered for the type at run time.
_NO_KERNEL = (
    re.compile(r"of '(\w+)' Op has type (\w+) that does not match expected type"),
    re.compile(
        r"No registered '(\w+)' OpKernel for '\w+' devices compatible with node .*?T=DT_(\w+)"
    ),
)
#: TensorFlow's names of the dtypes in those messages.
_TF_NAMES = {"half": "float16", "float": "float32", "bfloat16": "bfloat16", "double": "float64"}


def trap_hazards(
    exc: BaseException,
    facts: dict[str, Any],
    spec: TrialSpec,
    source: ModelSource,
    context: TrialContext,
) -> list[Hazard]:
    """The trap a failure that only the policy causes (``policy_caused``) falls in, read from
    what was raised (issue 71): a dtype mismatch in the user's own code
    (:func:`dtype_mismatch`: the innermost frame of theirs, and the values it held), or an op
    with no kernel in the policy's precision (:func:`no_kernel`). Empty where it is neither;
    never raises."""
    if not facts.get("policy_caused"):
        return []
    try:
        hazard = _trap(exc, facts, spec, source, context)
    except Exception:  # noqa: BLE001 - a trap not named leaves the failure as it is
        return []
    if hazard is None:
        return []
    facts["message"] = (
        f"fails only under {spec.policy.name}: {TITLES[hazard.kind]}"
        + (f" at {hazard.at}" if hazard.at else "")
        + f". Fix: {hazard.fix}"
    )
    facts["location"] = (hazard.at or "").split(" in ")[0] or facts.get("location")
    return [hazard]


def _trap(
    exc: BaseException,
    facts: dict[str, Any],
    spec: TrialSpec,
    source: ModelSource,
    context: TrialContext,
) -> Hazard | None:
    """:func:`trap_hazards`' reading of the failure; None where it is no trap it knows."""
    root = exc.__cause__ if exc.__cause__ is not None else exc
    text = str(root)
    for pattern in _MISMATCH:
        if (found := pattern.search(text)) is not None:
            return dtype_mismatch(root, found, spec.policy.name, facts)
    for pattern in _NO_KERNEL:
        found = pattern.search(text)
        if found is not None and _TF_NAMES.get(found.group(2), found.group(2)) in (
            LOW_PRECISION_DTYPES
        ):
            said = first_line(root).rstrip(".")
            return no_kernel(found.group(1), spec.policy.name, said, facts, source, context)
    return None


def user_frame(exc: BaseException) -> Any:
    """The innermost frame of ``exc``'s traceback in the user's code (not Keras', a
    framework's, mptune's or Python's own), or None."""
    from tuner.worker.script import _NOT_USER

    found = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not name.startswith(_NOT_USER) and "site-packages" not in name and "<" not in name:
            found = tb
        tb = tb.tb_next
    return found


def _dtype_of(value: Any) -> str | None:
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "shape"):
        return None
    import keras

    try:
        return str(keras.backend.standardize_dtype(dtype))
    except ValueError:
        return None


def dtype_mismatch(
    root: BaseException, found: re.Match[str], policy: str, facts: dict[str, Any]
) -> Hazard:
    """A value in float32 meets a half-precision tensor in the user's own code: where (the
    innermost frame of theirs, ``file.py:LINE in Cls.call``, and the layer it is), the values
    its frame held in each dtype, and the fix: make the float32 one in the other's dtype, on
    the line that made it."""
    met = sorted({_TF_NAMES.get(g, g) for g in found.groups()})
    said = re.sub(r" \(in [\w.]+\(\)\)$", "", first_line(root)).rstrip(".")
    tb = user_frame(root)
    at, layer, fix = facts.get("location"), None, None
    evidence = (
        f"a float32 value meets a half-precision tensor, which TensorFlow does not promote: {said}"
    )
    if tb is not None:
        frame, line = tb.tb_frame, tb.tb_lineno
        owner = frame.f_locals.get("self")
        func = frame.f_code.co_name
        where = f"{type(owner).__name__}.{func}" if owner is not None else func
        at = f"{os.path.basename(frame.f_code.co_filename)}:{line} in {where}"
        if owner is not None and hasattr(owner, "name"):
            layer = f"layer '{owner.name}' ({type(owner).__name__})"
        held = {
            name: dtype
            for name, value in frame.f_locals.items()
            if name != "self" and (dtype := _dtype_of(value)) is not None
        }
        wide = [n for n, d in held.items() if d == "float32"]
        narrow = [n for n, d in held.items() if d in LOW_PRECISION_DTYPES]
        if wide and narrow:
            evidence = (
                f"{', '.join(wide)} (float32) meets {', '.join(narrow)} "
                f"({held[narrow[0]]}) in {where}, and TensorFlow does not promote: {said}"
            )
            fix = _made_in_dtype(frame, wide[0], narrow[0])
    return Hazard(
        DTYPE_MISMATCH,
        policy,
        layer,
        evidence,
        fix
        or "make the float32 value in the tensor's dtype (dtype=x.dtype where it is made, "
        "or keras.ops.cast(value, x.dtype))",
        severity="unsafe",
        figure=" vs ".join(met),
        at=at,
        whose="model",
    )


def _made_in_dtype(frame: Any, wide: str, narrow: str) -> str:
    """The one-line fix for ``wide`` (a float32 local of ``frame``) meeting ``narrow``: the
    line of the function that makes it (an assignment to it without a dtype), with the call
    it makes there given ``dtype=narrow.dtype``."""
    import inspect

    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        lines, first = [], 0
    assigned = re.compile(rf"^\s*{re.escape(wide)}\s*=\s*(.*)$")
    made = [
        (first + i, m.group(1).strip())
        for i, text in enumerate(lines)
        if (m := assigned.match(text)) and "dtype" not in text
    ]
    if not made:
        return f"make {wide} in {narrow}'s dtype: keras.ops.cast({wide}, {narrow}.dtype)"
    line, value = made[-1]
    call = re.match(r"([\w.]+)\(", value)
    name = os.path.basename(frame.f_code.co_filename)
    if call is not None:
        verb = "draw" if "random" in call.group(1) else "make"
        return (
            f"{verb} {wide} in {narrow}'s dtype at {name}:{line}: "
            f"{call.group(1)}(..., dtype={narrow}.dtype)"
        )
    return (
        f"make {wide} in {narrow}'s dtype at {name}:{line}: keras.ops.cast({wide}, {narrow}.dtype)"
    )


def no_kernel(
    op: str,
    policy: str,
    said: str,
    facts: dict[str, Any],
    source: ModelSource,
    context: TrialContext,
) -> Hazard:
    """An op with no kernel in the policy's compute dtype on TensorFlow: where the user makes
    what calls it (a compiled metric whose class names the op, as ``TopK`` in
    ``SparseTopKCategoricalAccuracy``: the first line of their file naming that class), or
    the innermost line of theirs; the fix, to give it float32 predictions."""
    import keras

    low = "float16" if "float16" in policy and "bfloat16" not in policy else "bfloat16"
    stem = re.sub(r"V\d+$", "", op).removeprefix("In")
    metrics = [
        m
        for m in keras.tree.flatten((context.extras or {}).get("metrics") or [])
        if stem.lower() in type(m).__name__.lower()
    ]
    layer, at = None, facts.get("location")
    if metrics:
        cls = type(metrics[0]).__name__
        layer = f"metric '{metrics[0].name}' ({cls})"
        at = _line_naming(source.path, cls) or at
        fix = (
            f"keep {cls} in float32: give the model a float32 output (end it with "
            'keras.layers.Activation("linear", dtype="float32"))'
        )
    else:
        fix = (
            f'keep what calls {op} in float32 (dtype="float32" on that layer, or cast its '
            'input with keras.ops.cast(x, "float32"))'
        )
    return Hazard(
        NO_KERNEL,
        policy,
        layer,
        f"TensorFlow has no {low} kernel for {op}, which "
        + (f"{layer} calls" if layer else "the model calls")
        + f" at its first step: {said}",
        fix,
        severity="unsafe",
        figure=f"{op} in {low}",
        at=at,
        whose="precision",
    )


def _line_naming(path: str | None, cls: str) -> str | None:
    """``file.py:LINE`` of the first call in ``path`` that makes a ``cls`` (``cls(...)`` or
    ``module.cls(...)``, read from its syntax tree: a docstring naming it is not one); None
    where none does, or the file cannot be read."""
    import ast

    try:
        with open(path or "", encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == cls
    ]
    return f"{os.path.basename(path or '')}:{min(lines)}" if lines else None
