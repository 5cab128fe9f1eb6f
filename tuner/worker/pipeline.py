"""A trial's pipeline in its worker: start, build (the model's own code), prepare (the setup's
data, checks and compile, around the numerics probe), then :mod:`tuner.worker.measuring`.
A warm worker's later trials (:mod:`tuner.worker.warm`) start from its compiled model instead.

What the pipeline knows as it goes (its phase, the model, the batches, the runner) is kept in
one :class:`~tuner.worker.state.TrialContext`, which :mod:`tuner.worker.blame` reads when the
trial fails.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tuner.policies import FLOAT32
from tuner.setup import Policy, Setup
from tuner.trials.events import Phase
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec
from tuner.worker.channel import Channel
from tuner.worker.state import Batch, Prepared, TrialContext
from tuner.worker.usercode import PolicyFailure, UserCodeError
from tuner.worker.warm import WarmModel, keep_warm

if TYPE_CHECKING:
    from tuner.worker.loading import LoadedModel

#: Of the seconds a trial has left when its worker gets it, this share (at least
#: :data:`REPORT_MIN_S`) is kept for what follows the timing: the report, a script's
#: validation pass. Timing stops before it, so that a trial reports what it measured instead
#: of reaching its limit while it times (issue 50).
REPORT_SHARE = 0.15
REPORT_MIN_S = 5.0


def timing_ends(seconds_left: float | None) -> float | None:
    """When the trial's timing stops, from the seconds its limit leaves it; None: no limit."""
    if seconds_left is None:
        return None
    return time.perf_counter() + seconds_left - max(REPORT_MIN_S, REPORT_SHARE * seconds_left)


def run(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    context: TrialContext,
    warm: WarmModel | None = None,
    keep: bool = False,
) -> WarmModel | None:
    """One trial, from the model to the ``result`` event. A warm worker's later trials
    (``warm`` given) reuse its compiled model (:func:`run_warm`). Returns what a warm worker
    keeps (``keep``: the parent asked for one), or None when it cannot stay warm."""
    from tuner import keras_setup
    from tuner.worker import checks, measuring, training

    device, tensor_cores = start(spec, channel, warm)
    if warm is not None:
        return run_warm(spec, source, channel, context, warm)

    # The model's own code first (MODEL_PHASE), then the setup's: a hang or an exit in the
    # first is the model's, whatever the setup.
    context.enter(Phase.BUILD, channel)
    if spec.policy.name != FLOAT32:
        context.build_float32 = float32_builder(spec, source)
    context.rebuild = setup_builder(spec, source)
    t_build = time.perf_counter()
    keras_setup.set_seed(spec.seed)
    keras_setup.apply_policy(spec.setup)
    loaded, batches = load(spec, source, lambda: context.enter(Phase.PREPARE, channel))
    context.batches, context.loss = batches, loaded.loss
    context.script, context.validation = loaded.script, loaded.validation
    probe_s = None
    if spec.policy.name != FLOAT32 and spec.probe and context.build_float32 is not None:
        probe_s, fixed = probe(spec, channel, context, context.build_float32, loaded, batches)
        keep = keep and not fixed  # a fixed model differs from a fresh worker's
    model, warnings, hazards = checks.check_model(
        loaded.model, spec.policy.name, spec.batch_size, batches[0][0], loaded.loss,
        tensor_cores=tensor_cores, cast=casts(source, loaded.model),
    )  # fmt: skip
    for code, message in warnings:
        channel.emit("warning", code=code, message=message)
    for hazard in hazards:
        channel.emit("hazard", **hazard.to_dict())
    context.model, context.optimizer = model, loaded.optimizer
    context.unwrapped, context.extras = loaded.model, loaded.compile_extras
    keras_setup.compile_model(
        model, spec.setup, loaded.optimizer, loaded.loss, **loaded.compile_extras
    )
    warnings += _warn_not_quantized(model, spec.policy.name, channel)
    on_cpu = device.startswith("cpu")
    runner = training.StepRunner(
        model, batches, spec.setup, channel.emit, spec.memory_limit_mb if on_cpu else None
    )
    if training.process_peak_only(on_cpu) and not runner.steps.predicts_memory:
        # One peak for the process's life (JAX on a GPU), and no prediction to stand in: a
        # later trial's peak could not be told from this one's.
        keep = False
    kept = (
        keep_warm(model, loaded, device, tensor_cores, warnings, hazards, spec.setup)
        if keep
        else None
    )
    if kept is not None:
        kept.data = ((spec.batch_size, spec.seed), batches)
    # Automatic collection is off (see tuner.worker.main): what the import, the build and the
    # probe left is collected now, on the build's time, and what lives on is frozen, so that
    # collections between a warm worker's trials scan only what each trial made.
    gc.collect()
    gc.freeze()
    build_s = time.perf_counter() - t_build - (probe_s or 0.0)
    feed = measuring.feed_for(spec, source, loaded, batches)
    prepared = Prepared(runner, build_s, probe_s, on_cpu, feed)
    if not measured(spec, source, channel, context, prepared, kept):
        return kept  # refused by its predicted memory; the worker stays as it was
    if kept is not None:
        kept.spent = runner
    return kept


def casts(source: ModelSource, model: Any) -> bool:
    """Whether the trial may append a float32 cast to the model's low-precision outputs
    (:func:`tuner.worker.checks.check_model`): not for a training script, which ``mptune run``
    runs as written (it compiles the script's own model again, casting nothing), nor for a
    model whose training step is its own, which a wrapper would lose (issue 71). A model file
    keeps it: its hazard (``low_precision_output``) says to give the output layer float32."""
    from tuner import keras_setup

    return source.kind != "script" and keras_setup.own_step(model) is None


def _warn_not_quantized(model: Any, policy: str, channel: Channel) -> list[tuple[str, str]]:
    """The ``not_quantized`` warning (:func:`_not_quantized`), sent, and returned to be kept
    with the model's other warnings (a warm worker sends them with each trial); none where
    nothing was left out."""
    message = _not_quantized(model, policy)
    if message is None:
        return []
    channel.emit("warning", code="not_quantized", message=message)
    return [("not_quantized", message)]


def _not_quantized(model: Any, policy: str) -> str | None:
    """What a quantized model's setup leaves in ``policy``: the Dense and EinsumDense layers
    Keras does not quantize (a subclass, LoRA enabled), named; None where nothing was
    quantized or nothing was left out."""
    from tuner.worker import as_trained

    mode = as_trained.quantization_of(model)
    left = as_trained.quantizable_work(model)[1] if mode else ()
    if not left:
        return None
    return (
        f"{mode} leaves {len(left)} of the model's Dense and EinsumDense layers in {policy}: "
        f"{'; '.join(left)} (Keras quantizes those classes themselves, without LoRA)"
    )


def start(spec: TrialSpec, channel: Channel, warm: WarmModel | None) -> tuple[str, bool]:
    """Check the backend, pick the device (a warm worker's own) and say ``started``: the
    device, and whether it has Tensor Cores."""
    import keras

    from tuner.worker import backends, training

    backend = backends.current()
    if keras.backend.backend() != spec.setup.backend:
        raise UserCodeError(
            f"the worker runs Keras on {keras.backend.backend()}, the trial asks for "
            f"{spec.setup.backend} (KERAS_BACKEND is set before Keras is imported)"
        )
    if warm is None:
        device, tensor_cores = backend.configure_device(spec.device, spec.memory_limit_mb)
    else:
        device, tensor_cores = warm.device, warm.tensor_cores
        if not training.process_peak_only(device.startswith("cpu")):
            training.reset_peak_rss()
    channel.emit(
        "started",
        pid=os.getpid(),
        device=device,
        versions={
            "python": platform.python_version(),
            **backend.versions(),
            "keras": keras.__version__,
        },
        warm=warm is not None,
    )
    return device, tensor_cores


def load(
    spec: TrialSpec, source: ModelSource, built: Callable[[], None]
) -> tuple[LoadedModel, list[Batch]]:
    """The model (built-in, or the user's under the policy already set) and the trial's pool
    of batches; ``built`` is called between the two."""
    from tuner import workloads
    from tuner.worker import loading

    if source.kind == "builtin":
        model = workloads.build(source.name, source.params)
        loaded = loading.LoadedModel(model, None, workloads.LOSS)
        built()
    else:
        loaded = loading.load_user_model(source, spec.policy.name)
        built()
    return loaded, make_batches(spec, source, loaded)


def make_batches(spec: TrialSpec, source: ModelSource, loaded: LoadedModel) -> list[Batch]:
    """The trial's pool of batches at its batch size (a warm worker's later trials make theirs
    as a fresh worker does)."""
    from tuner import workloads
    from tuner.worker import loading

    if source.kind == "builtin":
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), spec.batch_size
        )
        return workloads.make_batches(source.name, source.params, spec.batch_size, pool, spec.seed)
    pool = loading.pool_size(loading.model_sample_bytes(loaded.model), spec.batch_size)
    return loading.user_batches(source, loaded, spec.batch_size, pool, spec.seed)


def probe(
    spec: TrialSpec,
    channel: Channel,
    context: TrialContext,
    build_float32: Callable[[], Any],
    loaded: LoadedModel,
    batches: list[Batch],
) -> tuple[float, bool]:
    """The numerics probe of a low-precision policy against its float32 twin: its hazards,
    figures and notes reported; the seconds it took, and whether it applied a fix to the
    model (a layer kept in float32).

    Raises:
        PolicyFailure: the model fails under the policy where float32 runs the same batch.
    """
    from tuner.worker import loading
    from tuner.worker import probe as numerics

    context.enter(Phase.PROBE, channel)
    t_probe = time.perf_counter()
    report = numerics.probe(
        loaded.model,
        build_float32,
        spec.policy.name,
        batches[0],
        loaded.loss,
        _initial_scale(spec),
        lambda value, n: loading._slice(value, 0, n),
    )
    probe_s = time.perf_counter() - t_probe
    for hazard in report.hazards:
        channel.emit("hazard", **hazard.to_dict())
    channel.emit("numerics", **report.numerics)
    if report.note:
        channel.emit("warning", code="probe", message=report.note)
    if report.failure is not None:
        unsafe = next((h for h in report.hazards if h.unsafe), None)
        raise PolicyFailure(
            f"fails only under {spec.policy.name}; float32 runs the same batch: "
            f"{report.failure}"
            + (f" ({unsafe.layer}; fix: {unsafe.fix})" if unsafe and unsafe.layer else "")
        ) from getattr(report.failure, "exc", None)  # read for its trap (issue 71)
    if report.unsafe_layers:
        names = ", ".join(f"'{layer.name}'" for layer in report.unsafe_layers)
        channel.emit(
            "warning",
            code="measured_with_fix",
            message=f"measured with the fix applied: {names} "
            + ("keeps its" if len(report.unsafe_layers) == 1 else "keep their")
            + " inputs in float32 (autocast=False), as the hazard's fix says",
        )
    context.enter(Phase.PREPARE, channel)
    return probe_s, bool(report.unsafe_layers)


def run_warm(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    context: TrialContext,
    warm: WarmModel,
) -> WarmModel:
    """A warm worker's later trial: the same model, from its starting values, on new data at
    the spec's batch size; compiled again (with a new optimizer) when the spec's other knobs
    differ from the last trial's."""
    from tuner import keras_setup
    from tuner.worker import measuring, training

    # No model code runs again: only the setup's data and compile.
    context.enter(Phase.PREPARE, channel)
    t_build = time.perf_counter()
    keras_setup.set_seed(spec.seed)
    keras_setup.apply_policy(spec.setup)
    warm.prepare_for(spec.setup)
    batches = warm.batches(spec, lambda: make_batches(spec, source, warm.loaded))
    context.batches, context.loss = batches, warm.loaded.loss
    context.model, context.optimizer = warm.model, warm.loaded.optimizer
    context.unwrapped, context.extras = warm.loaded.model, warm.loaded.compile_extras
    context.script, context.validation = warm.loaded.script, warm.loaded.validation
    if spec.policy.name != FLOAT32:  # a failure is asked of float32 as in a fresh worker
        context.build_float32 = float32_builder(spec, source)
    context.rebuild = setup_builder(spec, source)
    for code, message in warm.warnings:
        channel.emit("warning", code=code, message=message)
    if warm.tensor_cores and spec.batch_size % 8:
        channel.emit(
            "warning",
            code="batch_not_multiple_of_8",
            message=f"batch size {spec.batch_size} is not a multiple of 8 (Tensor Core advice)",
        )
    for hazard in warm.hazards:
        channel.emit("hazard", **hazard.to_dict())
    on_cpu = warm.device.startswith("cpu")
    runner = training.StepRunner(
        warm.model, batches, spec.setup, channel.emit, spec.memory_limit_mb if on_cpu else None
    )
    build_s = time.perf_counter() - t_build
    feed = measuring.feed_for(spec, source, warm.loaded, batches)
    # One peak for the process's life (JAX on a GPU): this trial's own is the process's only
    # where it rose during the trial.
    peak_before = measuring.process_peak(on_cpu) if training.process_peak_only(on_cpu) else None
    prepared = Prepared(runner, build_s, None, on_cpu, feed, peak_before)
    if measured(spec, source, channel, context, prepared, warm):
        warm.spent = runner
    return warm


def measured(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    context: TrialContext,
    prepared: Prepared,
    kept: WarmModel | None,
) -> bool:
    """:func:`~tuner.worker.measuring.measure`; False when the setup was refused by its
    predicted memory in a worker that stays warm (its ``error`` sent: no step ran, so nothing
    of the worker changed)."""
    from tuner.worker import blame, measuring, training

    try:
        measuring.measure(spec, channel, context, prepared)
    except training.PredictedOutOfMemory as exc:
        if kept is None:
            raise
        channel.emit("error", **blame.describe(exc, context.phase, source))
        return False
    return True


def _initial_scale(spec: TrialSpec) -> float | None:
    scale = spec.loss_scale
    if scale.kind == "dynamic":
        return float(scale.effective_initial_scale)
    if scale.kind == "fixed":
        return float(scale.value) if scale.value is not None else None
    return None


def float32_builder(spec: TrialSpec, source: ModelSource) -> Callable[[], Any] | None:
    """A function that builds the trial's model again under float32: same seed, same code (the
    user's module as the trial imported it, so its top level does not run twice)."""
    from tuner import keras_setup

    build = model_builder(spec, source)
    if build is None:
        return None

    def twin() -> Any:
        keras_setup.set_seed(spec.seed)
        keras_setup.apply_policy(Policy(FLOAT32))
        try:
            return build(FLOAT32)
        finally:
            keras_setup.apply_policy(spec.policy)

    return twin


def setup_builder(spec: TrialSpec, source: ModelSource) -> Callable[[Setup], Any] | None:
    """A function that builds the trial's model again under another setup (its policy, TF32
    and rematerialisation set before the build, as the trial set its own): the trial less a
    knob that a built model keeps (float8, rematerialisation), for the blame to ask."""
    from tuner import keras_setup

    build = model_builder(spec, source)
    if build is None:
        return None

    def under(setup: Setup) -> Any:
        keras_setup.set_seed(spec.seed)
        keras_setup.apply_policy(setup)
        try:
            return build(setup.policy.name)
        finally:
            keras_setup.apply_policy(spec.setup)

    return under


def model_builder(spec: TrialSpec, source: ModelSource) -> Callable[[str], Any] | None:
    """A function that builds the trial's model again by its own code under a policy (already
    set as the global one): same code (the user's module as the trial imported it, so its top
    level does not run twice; a script run again up to its fit)."""
    from tuner import workloads
    from tuner.worker import loading
    from tuner.worker.usercode import call_user

    if source.kind == "builtin":
        return lambda policy: workloads.build(source.name, source.params)
    if source.kind == "python":

        def build_again(policy: str) -> Any:
            module = sys.modules.get(loading.USER_MODULE)
            build = getattr(module, "build_model", None)
            if not callable(build):
                raise UserCodeError(f"{source.spec}: build_model is not a function")
            return call_user(build, "build_model()", source.path, source.spec)

        return build_again
    if source.kind in ("keras", "script"):  # a script: run again, up to its fit
        return lambda policy: loading.load_user_model(source, policy).model
    return None
