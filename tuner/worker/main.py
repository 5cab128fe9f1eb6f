"""The worker's pipeline: import, build, warm up, measure, report.

Every exception ends up in one ``error`` event carrying facts (its class, whether it is an
out-of-memory error, whether it came from the user's code, the phase); the parent's
:func:`tuner.trials.outcome.classify` decides the status from them.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuner.policies import FLOAT32
from tuner.trials.events import STACK_SIGNAL
from tuner.trials.models import ModelSource
from tuner.trials.record import from_data
from tuner.trials.spec import TrialSpec
from tuner.worker.channel import Channel, hold_lifeline
from tuner.worker.usercode import (
    InternalError,
    UserCodeError,
    first_line,
    raised_by_mptune,
    user_location,
)


class PolicyFailure(Exception):
    """The model fails under the trial's policy, and float32 runs the same batch."""


@dataclass
class _Context:
    """What the error path needs to tell a policy-caused failure from the model's own."""

    build_float32: Callable[[], Any] | None = None
    batches: list[tuple[Any, Any]] = field(default_factory=list)
    loss: Any = None
    runner: Any = None
    #: the compiled model and the optimizer it was given, to ask whether XLA is to blame
    model: Any = None
    optimizer: Any = None
    #: a training script's model as it handed it to fit (what the user runs today), and the
    #: data its fit validates on: both go into the trial's result
    script: Any = None
    validation: Any = None
    #: when timing stops (``time.perf_counter``), in time to report before the trial's limit
    timing_ends: float | None = None


@dataclass
class _Warm:
    """What a warm worker keeps between trials of one model under one policy: the compiled
    model, its variables and its optimizer's as they were before the first step, the setup it
    is compiled for, and what the data is made from."""

    model: Any
    loaded: Any
    device: str
    tensor_cores: bool
    variables: list[Any]
    optimizer_variables: list[Any]
    #: what the first trial's model checks said, sent again with each trial
    warnings: list[tuple[str, str]]
    hazards: list[Any]
    #: the setup the model is compiled for (its batch size aside, which compile() never sees)
    compiled_for: Any = None
    #: the last trial's step runner, let go between trials (see _between_trials)
    spent: Any = None
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

    def recompile(self, setup: Any) -> None:
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


#: A warm worker keeps a host copy of the model's and optimizer's starting values; past this
#: size it does not stay warm (each trial then starts a fresh worker, as before).
WARM_SNAPSHOT_LIMIT_BYTES = 1 << 30


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument(
        "--announce-import",
        action="store_true",
        help="write one line to the channel once the imports are done (a worker started ahead)",
    )
    args = parser.parse_args(argv)
    # First, before the imports that may hang: on STACK_SIGNAL every thread's stack goes to
    # stderr (the log the parent keeps), from the signal handler itself, so that a worker
    # stuck anywhere, in C code too, can say where before the parent kills it at its limit.
    faulthandler.register(STACK_SIGNAL, all_threads=True, chain=False)
    # Each payload is one line on stdin, which stays open as the lifeline (see Lifeline): the
    # parent going away ends this process at once, even while it imports.
    lifeline = hold_lifeline(0)
    # The imports first, before the trial is known: a worker started ahead of its trial
    # (WorkerPool.start_ahead) spends them beside other workers', and then waits.
    import_error = _import_frameworks()
    if args.announce_import:
        os.write(args.channel_fd, b'{"type": "imported"}\n')
    payload = json.loads(lifeline.next_line())
    channel = Channel(args.channel_fd, str(payload.get("token") or ""))
    warm: _Warm | None = None
    gc.disable()  # collected between trials instead (_between_trials)
    try:
        while True:
            ok, warm = _one_trial(payload, channel, warm, import_error)
            import_error = None
            if not ok:
                return 1
            if warm is None or not payload.get("warm"):
                return 0
            # Ready for the next trial of the same model and policy; the garbage is collected
            # while the parent records this one.
            channel.emit("ready")
            _between_trials(warm)
            payload = json.loads(lifeline.next_line())
            channel.next_trial(str(payload.get("token") or ""))
    finally:
        channel.close()


def _import_frameworks() -> BaseException | None:
    """Import the backend's framework (``KERAS_BACKEND``, set by the runner), Keras and the
    worker's own modules that use them (most of a fresh worker's start-up); what failed, to be
    reported as the first trial's import error."""
    try:
        from tuner.worker import backends

        backend = backends.current()
        try:
            backend.import_framework()
        except ImportError as exc:
            raise UserCodeError(
                f"the {backend.name} backend is not installed ({first_line(exc)}): "
                f"pip install 'mptune[{backend.name}]'"
            ) from exc
        import keras  # noqa: F401

        from tuner import keras_setup, workloads  # noqa: F401
        from tuner.worker import checks, loading, measuring, probe, training  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - reported by the trial, in its import phase
        return exc
    return None


def _one_trial(
    payload: dict[str, Any],
    channel: Channel,
    warm: _Warm | None,
    import_error: BaseException | None = None,
) -> tuple[bool, _Warm | None]:
    """Run the payload's trial: whether it reported a result (else an ``error`` event was
    sent), and what a warm worker keeps for the next trial (None: nothing to keep)."""
    spec = TrialSpec.from_dict(payload["spec"])
    source = from_data(ModelSource, payload["source"])
    phase = ["import"]
    context = _Context(timing_ends=_timing_ends(payload.get("seconds_left")))
    try:
        if import_error is not None:
            raise import_error
        return True, _run(spec, source, channel, phase, context, warm, bool(payload.get("warm")))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an error event
        from tuner.worker import blame
        from tuner.worker.script import SetupOverridden

        facts = _describe(exc, phase[0], source)
        if isinstance(exc, PolicyFailure):
            facts["policy_caused"] = True
        elif isinstance(exc, SetupOverridden):
            facts["unsupported"] = True  # the script decides the precision, not the model
        elif blame.keras_own_step_trains(exc, facts, spec, context):
            # Keras' own train step trains the same model, setup and batch where mptune's
            # driving of it failed: mptune's failure, never a verdict on the model (issue 49).
            facts.update(internal=True, user_code=False, location=None)
            facts["message"] = (
                f"mptune's own driving of the step failed where Keras' train step trains this "
                f"setup: {facts['message']}"
            )
        elif spec.setup.xla and blame.trains_with(
            spec.setup.replace(xla=False), exc, facts, context
        ):
            facts["unsupported"] = True
            facts["message"] = (
                f"XLA cannot compile this model (it trains without XLA): {facts['message']}"
            )
        elif spec.setup.steps_per_execution > 1 and blame.trains_with(
            spec.setup.replace(steps_per_execution=1), exc, facts, context
        ):
            facts["unsupported"] = True
            facts["message"] = (
                f"{spec.setup.steps_per_execution} steps per execution fail for this model, in "
                f"Keras' own fit too (it trains with 1): {facts['message']}"
            )
        elif blame.float32_survives(exc, facts, spec, context):
            facts["policy_caused"] = True
            facts["message"] = (
                f"fails only under {spec.policy.name}; float32 trains the same batch: "
                f"{facts['message']}"
            )
        channel.emit("error", **facts)
        return False, None


#: Of the seconds a trial has left when its worker gets it, this share (at least
#: :data:`REPORT_MIN_S`) is kept for what follows the timing: the report, a script's
#: validation pass. Timing stops before it, so that a trial reports what it measured instead
#: of reaching its limit while it times (issue 50).
REPORT_SHARE = 0.15
REPORT_MIN_S = 5.0


def _timing_ends(seconds_left: float | None) -> float | None:
    """When the trial's timing stops, from the seconds its limit leaves it; None: no limit."""
    if seconds_left is None:
        return None
    return time.perf_counter() + seconds_left - max(REPORT_MIN_S, REPORT_SHARE * seconds_left)


def _run(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    phase: list[str],
    context: _Context,
    warm: _Warm | None = None,
    keep_warm: bool = False,
) -> _Warm | None:
    """One trial, from the model to the ``result`` event. A warm worker's later trials (``warm``
    given) reuse the compiled model: its variables go back to their starting values and only
    the data is made anew. Returns what a warm worker keeps, or None when it cannot stay warm."""

    from tuner import keras_setup, workloads
    from tuner.worker import checks, measuring, training

    device, tensor_cores = _start(spec, channel, warm)
    if warm is not None:
        return _run_warm(spec, source, channel, phase, context, warm)

    # The model's own code first (MODEL_PHASE), then the setup's: a hang or an exit in the
    # first is the model's, whatever the setup.
    _enter(channel, phase, "build")
    if spec.policy.name != FLOAT32:
        context.build_float32 = _float32_builder(spec, source, keras_setup, workloads)
    t_build = time.perf_counter()
    keras_setup.set_seed(spec.seed)
    keras_setup.apply_policy(spec.setup)
    loaded, batches = _load(spec, source, lambda: _enter(channel, phase, "prepare"))
    context.batches, context.loss = batches, loaded.loss
    context.script, context.validation = loaded.script, loaded.validation
    probe_s = None
    if spec.policy.name != FLOAT32 and spec.probe and context.build_float32 is not None:
        probe_s, fixed = _probe(spec, channel, phase, context.build_float32, loaded, batches)
        keep_warm = keep_warm and not fixed  # a fixed model differs from a fresh worker's
    model, warnings, hazards = checks.check_model(
        loaded.model,
        spec.policy.name,
        spec.batch_size,
        batches[0][0],
        loaded.loss,
        tensor_cores=tensor_cores,
    )
    for code, message in warnings:
        channel.emit("warning", code=code, message=message)
    for hazard in hazards:
        channel.emit("hazard", **hazard.to_dict())
    context.model, context.optimizer = model, loaded.optimizer
    keras_setup.compile_model(
        model, spec.setup, loaded.optimizer, loaded.loss, **loaded.compile_extras
    )
    on_cpu = device.startswith("cpu")
    runner = training.StepRunner(
        model, batches, spec.setup, channel.emit, spec.memory_limit_mb if on_cpu else None
    )
    if training.process_peak_only(on_cpu) and not runner.steps.predicts_memory:
        # One peak for the process's life (JAX on a GPU), and no prediction to stand in: a
        # later trial's peak could not be told from this one's.
        keep_warm = False
    kept = (
        _keep_warm(model, loaded, device, tensor_cores, warnings, hazards, spec)
        if keep_warm
        else None
    )
    if kept is not None:
        kept.data = ((spec.batch_size, spec.seed), batches)
    # Automatic collection is off (see main): what the import, the build and the probe left is
    # collected now, on the build's time, and what lives on is frozen, so that collections
    # between a warm worker's trials scan only what each trial made.
    gc.collect()
    gc.freeze()
    build_s = time.perf_counter() - t_build - (probe_s or 0.0)
    feed = measuring.feed_for(spec, source, loaded, batches)
    if not _measured(
        spec, source, channel, phase, context, runner, build_s, probe_s, on_cpu, feed, kept
    ):
        return kept  # refused by its predicted memory; the worker stays as it was
    if kept is not None:
        kept.spent = runner
    return kept


def _start(spec: TrialSpec, channel: Channel, warm: _Warm | None) -> tuple[str, bool]:
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


def _enter(channel: Channel, phase: list[str], name: str) -> None:
    """Move on to phase ``name``: the error path (``phase``) and the parent (a ``phase``
    message) both know where the worker is."""
    phase[0] = name
    channel.emit("phase", phase=name)


def _load(
    spec: TrialSpec, source: ModelSource, built: Callable[[], None]
) -> tuple[Any, list[tuple[Any, Any]]]:
    """The model (built-in, or the user's under the policy already set) and the trial's pool
    of batches; ``built`` is called between the two."""
    from tuner import workloads
    from tuner.worker import loading

    if source.kind == "builtin":
        model = workloads.build(source.name, source.params)
        loaded = loading.LoadedModel(model, None, workloads.LOSS)
        built()
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), spec.batch_size
        )
        batches = workloads.make_batches(
            source.name, source.params, spec.batch_size, pool, spec.seed
        )
    else:
        loaded = loading.load_user_model(source, spec.policy.name)
        built()
        pool = loading.pool_size(loading.model_sample_bytes(loaded.model), spec.batch_size)
        batches = loading.user_batches(source, loaded, spec.batch_size, pool, spec.seed)
    return loaded, batches


def _probe(
    spec: TrialSpec,
    channel: Channel,
    phase: list[str],
    build_float32: Callable[[], Any],
    loaded: Any,
    batches: list[tuple[Any, Any]],
) -> tuple[float, bool]:
    """The numerics probe of a low-precision policy against its float32 twin: its hazards,
    figures and notes reported; the seconds it took, and whether it applied a fix to the
    model (a layer kept in float32).

    Raises:
        PolicyFailure: the model fails under the policy where float32 runs the same batch.
    """
    from tuner.worker import loading, probe

    phase[0] = "probe"
    channel.emit("phase", phase="probe")
    t_probe = time.perf_counter()
    report = probe.probe(
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
        )
    if report.unsafe_layers:
        names = ", ".join(f"'{layer.name}'" for layer in report.unsafe_layers)
        channel.emit(
            "warning",
            code="measured_with_fix",
            message=f"measured with the fix applied: {names} "
            + ("keeps its" if len(report.unsafe_layers) == 1 else "keep their")
            + " inputs in float32 (autocast=False), as the hazard's fix says",
        )
    _enter(channel, phase, "prepare")
    return probe_s, bool(report.unsafe_layers)


def _run_warm(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    phase: list[str],
    context: _Context,
    warm: _Warm,
) -> _Warm:
    """A warm worker's later trial: the same model, from its starting values, on new data at
    the spec's batch size; compiled again (with a new optimizer) when the spec's other knobs
    differ from the last trial's."""

    from tuner import keras_setup, workloads
    from tuner.worker import measuring, training

    # No model code runs again: only the setup's data and compile.
    _enter(channel, phase, "prepare")
    t_build = time.perf_counter()
    keras_setup.set_seed(spec.seed)
    keras_setup.apply_policy(spec.setup)
    warm.restore()
    if _compiled_differently(warm.compiled_for, spec.setup):
        warm.recompile(spec.setup)
    batches = warm.batches(spec, lambda: _make_batches(spec, source, warm.loaded))
    context.batches, context.loss = batches, warm.loaded.loss
    context.model, context.optimizer = warm.model, warm.loaded.optimizer
    context.script, context.validation = warm.loaded.script, warm.loaded.validation
    if spec.policy.name != FLOAT32:  # a failure is asked of float32 as in a fresh worker
        context.build_float32 = _float32_builder(spec, source, keras_setup, workloads)
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
    if _measured(
        spec,
        source,
        channel,
        phase,
        context,
        runner,
        build_s,
        None,
        on_cpu,
        feed,
        warm,
        peak_before,
    ):
        warm.spent = runner
    return warm


def _measured(
    spec: TrialSpec,
    source: ModelSource,
    channel: Channel,
    phase: list[str],
    context: _Context,
    runner: Any,
    build_s: float,
    probe_s: float | None,
    on_cpu: bool,
    feed: Callable[[], Any],
    kept: _Warm | None,
    peak_before: float | None = None,
) -> bool:
    """:func:`~tuner.worker.measuring.measure`; False when the setup was refused by its
    predicted memory in a worker that stays warm (its ``error`` sent: no step ran, so nothing
    of the worker changed)."""
    from tuner.worker import measuring, training

    try:
        measuring.measure(
            spec, channel, phase, context, runner, build_s, probe_s, on_cpu, feed, peak_before
        )
    except training.PredictedOutOfMemory as exc:
        if kept is None:
            raise
        facts = _describe(exc, phase[0], source)
        channel.emit("error", **facts)
        return False
    return True


def _make_batches(spec: TrialSpec, source: ModelSource, loaded: Any) -> list[Any]:
    """A warm worker's batches at the trial's batch size, as a fresh worker makes them."""
    from tuner import workloads
    from tuner.worker import loading

    if source.kind == "builtin":
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), spec.batch_size
        )
        return workloads.make_batches(source.name, source.params, spec.batch_size, pool, spec.seed)
    pool = loading.pool_size(loading.model_sample_bytes(loaded.model), spec.batch_size)
    return loading.user_batches(source, loaded, spec.batch_size, pool, spec.seed)


def _between_trials(warm: _Warm) -> None:
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


def _compiled_differently(compiled_for: Any, setup: Any) -> bool:
    """Whether ``setup`` needs another compile() than ``compiled_for`` (the batch size never
    does: the data has no fixed batch dimension)."""
    return compiled_for is None or compiled_for.replace(batch_size=1) != setup.replace(batch_size=1)


def _keep_warm(
    model: Any,
    loaded: Any,
    device: str,
    tensor_cores: bool,
    warnings: list[tuple[str, str]],
    hazards: list[Any],
    spec: TrialSpec,
) -> _Warm | None:
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
    return _Warm(
        model,
        loaded,
        device,
        tensor_cores,
        [v.numpy() for v in model.variables],
        [v.numpy() for v in model.optimizer.variables],
        [w for w in warnings if w[0] != "batch_not_multiple_of_8"],
        list(hazards),
        spec.setup,
    )


def _initial_scale(spec: TrialSpec) -> float | None:
    scale = spec.loss_scale
    if scale.kind == "dynamic":
        return float(scale.effective_initial_scale)
    if scale.kind == "fixed":
        return float(scale.value) if scale.value is not None else None
    return None


def _float32_builder(
    spec: TrialSpec, source: ModelSource, keras_setup: Any, workloads: Any
) -> Callable[[], Any] | None:
    """A function that builds the trial's model again under float32: same seed, same code (the
    user's module as the trial imported it, so its top level does not run twice)."""

    from tuner.setup import Policy
    from tuner.worker import loading
    from tuner.worker.usercode import call_user

    def under_float32(build: Callable[[], Any]) -> Callable[[], Any]:
        def twin() -> Any:
            keras_setup.set_seed(spec.seed)
            keras_setup.apply_policy(Policy(FLOAT32))
            try:
                return build()
            finally:
                keras_setup.apply_policy(spec.policy)

        return twin

    if source.kind == "builtin":
        return under_float32(lambda: workloads.build(source.name, source.params))
    if source.kind == "python":

        def build_again() -> Any:
            module = sys.modules.get(loading.USER_MODULE)
            build = getattr(module, "build_model", None)
            if not callable(build):
                raise UserCodeError(f"{source.spec}: build_model is not a function")
            return call_user(build, "build_model()", source.path, source.spec)

        return under_float32(build_again)
    if source.kind in ("keras", "script"):  # a script: run again, up to its fit
        return under_float32(lambda: loading.load_user_model(source, FLOAT32).model)
    return None


def _describe(exc: BaseException, phase: str, source: ModelSource) -> dict[str, Any]:
    """Facts about a failure, for the parent's classifier."""
    from tuner.worker import backends

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
    from tuner.worker import training

    return {
        "policy_caused": False,
        "predicted": isinstance(exc, training.PredictedOutOfMemory),
        "exception": type(root).__name__,
        "message": message,
        "location": location,
        "phase": phase,
        "oom": oom,
        "user_code": user_code,
        "internal": internal,
        "traceback": "".join(traceback.format_exception(type(root), root, root.__traceback__)),
    }
