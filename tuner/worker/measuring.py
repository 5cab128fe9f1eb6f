"""A trial's measuring, once its model is compiled: the step's memory predicted (and a setup
that cannot fit refused), the warm-up, the measured steps, fit's own loop on the user's input,
and the ``result`` event. :mod:`tuner.worker.pipeline` calls it for fresh and warm trials alike."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from tuner.said import setting
from tuner.trials.events import Phase
from tuner.trials.messages import ResultMessage
from tuner.trials.models import ModelSource
from tuner.trials.result import AsTrained, InputRate
from tuner.trials.spec import WARMUP_FLOOR, TrialSpec
from tuner.worker import as_trained, moved
from tuner.worker.channel import Channel

if TYPE_CHECKING:
    from tuner.worker.state import Prepared, TrialContext


def process_peak(on_cpu: bool) -> float:
    from tuner.worker import backends, training

    return training.peak_rss_mb() if on_cpu else backends.current().gpu_peak_mb()


def measure(spec: TrialSpec, channel: Channel, context: TrialContext, prepared: Prepared) -> None:
    """Predict the step's memory (refusing a setup that cannot fit), warm up, measure, time
    the input and send the ``result``. ``prepared.peak_before``: a warm worker's process-long
    peak when its trial began (JAX on a GPU), None where the peak is the trial's own."""
    import numpy as np

    from tuner.worker import backends

    runner, on_cpu = prepared.runner, prepared.on_cpu
    backend = backends.current()
    context.runner = runner
    context.enter(Phase.WARMUP, channel)
    prediction = _predict(spec, channel, runner, on_cpu)
    weights = moved.snapshot(runner.model)  # issue 71: do the trial's steps move them?
    warmup_s, before = warm_up(spec, runner)
    _unscaled_loss(spec, channel, runner)
    if not on_cpu and backend.resets_gpu_peak:
        backend.reset_gpu_peak()  # JAX cannot: its peak then includes the warm-up's

    context.enter(Phase.MEASURE, channel)
    log = _measure_steps(spec, channel, runner, context.timing_ends)
    applied = len(before) - sum(before) + len(log.skipped) - sum(log.skipped)
    still = moved.check(runner.model, weights, spec.policy.name, applied)
    if still is not None:
        channel.emit("hazard", **still.to_dict())

    context.phase = Phase.REPORT  # not sent: the parent's last phase is the timing's
    peak, memory_kind, memory_method = _own_peak(on_cpu, prepared.peak_before, prediction)
    times = np.asarray(log.times_s)
    p50 = float(np.percentile(times, 50))
    window = log.window_s
    # The figure that predicts fit (bench/bench_fit.py): the window's samples over its wall
    # time. The median-based one stays beside it, robust to a stray slow step.
    device_rate = spec.batch_size * len(log.times_s) / window if window > 0 else None

    # A setup that cannot lead (pruned: even its device's rate is under the leader's) is not
    # worth fit's loop.
    fed = None if log.pruned else _time_fit(spec, channel, context, prepared, window)
    channel.send(
        ResultMessage(
            samples_per_second=device_rate,
            median_samples_per_second=spec.batch_size / p50 if p50 > 0 else None,
            step_time_ms=_step_times(times),
            peak_memory_mb=peak,
            memory_kind=memory_kind,
            memory_method=memory_method,
            losses=tuple(log.losses),
            loss_scales=tuple(log.loss_scales),
            skipped_flags=tuple(log.skipped),
            skipped_steps=sum(log.skipped),
            calibration_steps=sum(before),
            warmup_updates=len(before) - sum(before),
            nonfinite_steps=sum(log.nonfinite),
            weights_finite=all(bool(np.isfinite(w).all()) for w in runner.model.get_weights()),
            build_s=prepared.build_s,
            probe_s=prepared.probe_s,
            compile_s=prediction["compile_s"] if prediction else None,
            warmup_s=warmup_s,
            measure_s=window,
            executions=len(log.execution_times_s),
            pruned=log.pruned,
            input=InputRate.read(fed),
            trained=AsTrained(**as_trained.read(runner.model)),
            # After the weights are read: a validation pass that fails can leave them unread.
            script=_as_the_script_runs(context, runner, spec.batch_size, log.pruned),
        )
    )


def _unscaled_loss(spec: TrialSpec, channel: Channel, runner: Any) -> None:
    """The ``unscaled_loss`` trap (issue 71), observed: the model's own ``train_step`` ran the
    warm-up and never called its ``LossScaleOptimizer``'s ``scale_loss``
    (:func:`tuner.worker.training.count_scale_loss`), while that optimizer divides every
    gradient by its scale. Said with the line of the step and the fix."""
    import inspect
    import os

    from tuner import keras_setup
    from tuner.trials.hazards import UNSCALED_LOSS, Hazard

    calls = runner.scale_loss_calls
    if calls is None or calls[0] or not runner.global_step:
        return
    own = keras_setup.own_step(runner.model, ("train_step",))
    step = getattr(own, "train_step", None)
    try:
        path = inspect.getsourcefile(step) if step else None
        line = step.__code__.co_firstlineno if step else None
    except (TypeError, AttributeError):
        path, line = None, None
    where = f"{own.__name__}.train_step" if own else "train_step"
    scale = runner.steps.read(runner.optimizer.dynamic_scale)
    hazard = Hazard(
        UNSCALED_LOSS,
        spec.policy.name,
        None,
        f"{where} never called self.optimizer.scale_loss in {runner.global_step} steps, while "
        f"Keras wraps the optimizer in a LossScaleOptimizer under {spec.policy.name}: every "
        f"gradient is divided by its scale ({float(scale):g}) although the loss was never "
        "multiplied by it, so the updates shrink (those below the optimizer's epsilon vanish)",
        runner.backend.scale_loss_fix,
        severity="unsafe",
        figure=f"gradients / {float(scale):g}",
        at=f"{os.path.basename(path)}:{line} in {where}" if path and line else None,
        whose="model",
    )
    channel.emit("hazard", **hazard.to_dict())


def _measure_steps(spec: TrialSpec, channel: Channel, runner: Any, until: float | None) -> Any:
    """The measured steps, for the trial's window, not past ``until`` (its time limit, less its
    report): where that came before the least steps asked, a warning says so."""
    log = runner.run(
        "measure",
        spec.steps,
        spec.measure_seconds,
        spec.min_steps,
        spec.max_steps,
        spec.prune_below,
        until=until,
        min_steps_seconds=spec.min_steps_seconds,
    )
    if log.cut:
        channel.emit(
            "warning",
            code="measure_cut",
            message=f"measuring stopped at the trial's time limit after {len(log.times_s)} "
            f"of {spec.steps or spec.min_steps} steps (raise {setting('timeout')} to measure "
            "them all)",
        )
    return log


def _as_the_script_runs(
    context: Any, runner: Any, batch_size: int, pruned: bool
) -> AsTrained | None:
    """A training script's model as the script handed it to fit (what the user runs today),
    with one validation pass of its fit timed where it validates (not for a pruned trial);
    None for a model file."""
    script: AsTrained | None = getattr(context, "script", None)
    if script is None or context.validation is None or pruned:
        return script
    seconds = _time_validation(runner, context.validation, batch_size)
    return dataclasses.replace(script, validation_s=seconds)


def _time_validation(runner: Any, validation: tuple[Any, Any], batch_size: int) -> float | None:
    """One validation pass of the script's fit (its ``validation_data``, or its
    ``validation_split`` of the arrays) at the trial's batch size, timed as fit runs it at each
    epoch's end (``evaluate``), after a first batch that compiles the test step; None where
    it cannot run."""
    runner.steps.sync()  # JAX: the trained variables back in the model
    x, y = validation
    model = runner.model
    try:
        if y is None:  # a dataset
            model.evaluate(x, steps=1, verbose=0)
            start = time.perf_counter()
            model.evaluate(x, verbose=0)
        else:
            model.evaluate(x, y, batch_size=batch_size, steps=1, verbose=0)
            start = time.perf_counter()
            model.evaluate(x, y, batch_size=batch_size, verbose=0)
        return time.perf_counter() - start
    except Exception:  # noqa: BLE001 - a figure beside the trial's, never its failure
        return None


def _step_times(times: Any) -> dict[str, float]:
    """The measured steps' p50, p90 and mean, in milliseconds."""
    import numpy as np

    return {
        "p50": float(np.percentile(times, 50)) * 1000,
        "p90": float(np.percentile(times, 90)) * 1000,
        "mean": float(times.mean()) * 1000,
    }


def warm_up(spec: TrialSpec, runner: Any) -> tuple[float, list[bool]]:
    """The warm-up steps (``warmup_steps``, or fewer where they outlast ``warmup_seconds``:
    :meth:`TrialSpec.warmup_count`), then a dynamic loss scale's way down from its initial
    value, which is calibration, run and counted apart so that the measured steps start with it
    settled (issue 35): their seconds, and which of their steps were skipped."""
    if spec.warmup_seconds is None:
        warmup = runner.run("warmup", spec.warmup_steps)
    else:
        least = min(WARMUP_FLOOR, spec.warmup_steps)
        warmup = runner.run("warmup", None, spec.warmup_seconds, least, max_steps=spec.warmup_steps)
    calibration = runner.calibrate(warmup)
    if calibration is None:
        return warmup.elapsed_s, list(warmup.skipped)
    return warmup.elapsed_s + calibration.elapsed_s, warmup.skipped + calibration.skipped


def _predict(spec: TrialSpec, channel: Channel, runner: Any, on_cpu: bool) -> dict[str, Any] | None:
    """The step's peak memory predicted from its program compiled ahead of time (JAX), sent as
    a ``prediction`` with the compile's seconds; a setup that cannot fit is refused here."""
    from tuner.worker import training

    t_compile = time.perf_counter()
    prediction = training.predict_peak(runner.steps, on_cpu, spec.memory_limit_mb)
    if prediction is None:
        return None
    prediction["compile_s"] = time.perf_counter() - t_compile
    channel.emit("prediction", **prediction)
    refuse_if_over(prediction)
    return prediction


def _own_peak(
    on_cpu: bool, peak_before: float | None, prediction: dict[str, Any] | None
) -> tuple[float, str, str]:
    """The trial's peak memory, its kind and how it was read. Where one peak lasts the
    process's life (``peak_before`` given) and it did not rise during the trial, it is an
    earlier trial's: the trial's own is what its step was predicted to need."""
    from tuner.worker import backends, training

    if on_cpu:
        peak, kind = training.peak_rss_mb(), "cpu_rss"
        method = "VmHWM in /proc/self/status (the worker's peak resident memory)"
        if training.UNCOUNTED_RSS is not None:
            method += f", {training.UNCOUNTED_RSS[1]}"
    else:
        backend = backends.current()
        peak, kind, method = backend.gpu_peak_mb(), "gpu", backend.gpu_memory_method
    if peak_before is not None and peak <= peak_before and prediction is not None:
        peak = float(prediction["peak_mb"])
        method = (
            f"predicted ({prediction['method']}): the process's peak ({method}) is an "
            "earlier trial's"
        )
    return peak, kind, method


def refuse_if_over(prediction: dict[str, Any]) -> None:
    """Raise :class:`~tuner.worker.training.PredictedOutOfMemory` when the predicted peak
    passes the limit, with both figures."""
    from tuner.worker import training

    limit = prediction.get("limit_mb")
    if limit is None or prediction["peak_mb"] <= limit:
        return
    raise training.PredictedOutOfMemory(
        f"out of memory, predicted before any step: the step needs "
        f"{prediction['peak_mb']:,.0f} MB ({prediction['live_mb']:,.0f} MB held + "
        f"{prediction['step_mb']:,.0f} MB for the step, from XLA's memory_analysis()), "
        f"{prediction['limit_source']} is {limit:,.0f} MB"
    )


def _time_fit(
    spec: TrialSpec, channel: Channel, context: TrialContext, prepared: Prepared, window: float
) -> dict[str, Any] | None:
    """The ``input`` phase: ``fit``'s own loop on the user's input for the trial's measuring
    window (:meth:`TrialSpec.fit_seconds` after measured steps of ``window`` seconds;
    :func:`tuner.worker.feeding.measure`: at most
    :data:`~tuner.worker.feeding.LONGEST` times it after its warm executions, whatever an
    epoch's length or the device window's, and never past the trial's ``timing_ends``), its
    figures or None with a warning that says why not. A CPU trial's memory limit holds here
    as in the steps."""
    from tuner.worker import backends, feeding

    runner = prepared.runner
    context.enter(Phase.INPUT, channel)
    until = context.timing_ends
    if until is not None and time.perf_counter() >= until:
        channel.emit(
            "warning",
            code="input_not_timed",
            message="fit's rate on the input was not measured: the trial's time limit came "
            f"first (raise {setting('timeout')} to have it)",
        )
        return None
    fed, why_not = feeding.measure(
        runner.model,
        prepared.feed,
        spec.batch_size,
        spec.fit_seconds(window),
        backends.current().is_oom,
        until=until,
    )
    if why_not:
        code = "input_not_timed" if fed is None else "input_cut"
        channel.emit("warning", code=code, message=why_not)
    runner.check_memory(" in fit's loop")
    return fed


def feed_for(spec: TrialSpec, source: ModelSource, loaded: Any, batches: list[Any]) -> Any:
    """What ``fit`` would be fed at the trial's batch size, made when the input is timed."""
    from tuner.worker import feeding

    return lambda: feeding.fit_feed(source, loaded, spec.batch_size, batches)
