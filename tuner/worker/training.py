"""The timed step loop (the setup's compile arguments come from :mod:`tuner.keras_setup`)."""

from __future__ import annotations

import contextlib
import gc
import math
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras

from tuner import keras_private, keras_setup
from tuner.said import setting
from tuner.setup import Setup
from tuner.trials.spec import FLOOR_STEPS, losing


def process_peak_only(on_cpu: bool) -> bool:
    """Whether this worker's peak memory is one for the process's life: JAX on a GPU (a CPU
    worker's resident peak is reset between its phases and trials)."""
    from tuner.worker import backends

    if on_cpu:
        return False
    return not backends.current().resets_gpu_peak


@dataclass
class StepLog:
    """What the steps of one phase produced."""

    losses: list[float] = field(default_factory=list)
    loss_scales: list[float | None] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    nonfinite: list[bool] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)
    #: each execution's wall time (``steps_per_execution`` steps, up to its host sync)
    execution_times_s: list[float] = field(default_factory=list)
    #: the phase's wall time, and the part of it spent reporting steps between executions
    elapsed_s: float = 0.0
    reporting_s: float = 0.0
    #: stopped early: the rate fell under the phase's ``prune_below``
    pruned: bool = False
    #: stopped early: the trial's timing ran out (``until``) before its least steps
    cut: bool = False

    @property
    def window_s(self) -> float:
        """The wall time the steps took, as ``fit`` would spend it: without the reporting."""
        return self.elapsed_s - self.reporting_s


#: Reset the metrics this often (in executions): the loss of one execution is recovered from
#: the running mean, whose rounding grows with the number of executions it averages.
RESET_EVERY = 32
#: A dynamic loss scale has come down once this many steps in a row were applied (issue 35):
#: the steps it skipped before that are its calibration, counted apart from the measured ones.
SETTLED_STEPS = 2
#: The most steps a trial spends calibrating its loss scale (from Keras' 2**15 it comes down to
#: 1 in 15 skipped steps; a user's larger initial scale takes more).
CALIBRATION_MAX_STEPS = 64
#: Emit the step events this often (seconds), between executions and outside their timing.
REPORT_EVERY_S = 0.25


class MemoryLimitExceeded(MemoryError):
    """The worker's peak resident memory passed the trial's limit (CPU trials)."""


class PredictedOutOfMemory(MemoryError):
    """The step's compiled program needs more memory than the trial may use: refused before
    any step runs (its ``prediction`` was sent)."""


def current_rss_mb() -> float | None:
    """This process's resident memory now (``VmRSS``), or None where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


#: On a CPU, how much memory a step takes for each byte of XLA's temporary buffers. XLA:CPU's
#: kernels (convolutions, matrix products) take scratch memory outside the step's buffer
#: assignment, which ``memory_analysis()`` does not count: a step's resident memory rose by
#: 1.2-1.3x its temporary bytes on the built-in models and 1.7-1.9x on Keras' MobileNetV2
#: (bench/bench_predict.py, docs/benchmarks.md). On a GPU that scratch (cuDNN's and cuBLAS's
#: workspaces) is part of XLA's buffer assignment and the allocator's bytes count it: 1.0.
CPU_SCRATCH = 1.45


def predict_peak(steps: Any, on_cpu: bool, memory_limit_mb: float | None) -> dict[str, Any] | None:
    """The trial's peak memory, predicted before its first step from the step's compiled
    program (``steps.step_memory()``: JAX only), and what the trial may use; None where the
    backend cannot say.

    The peak is what the process holds now (on a GPU the allocator's live bytes: the model's
    state and the batches already on the device; on a CPU its resident memory) plus what one
    step adds to it: XLA's temporary buffers (on a CPU with :data:`CPU_SCRATCH` for its
    kernels' scratch), its outputs not written over donated arguments, and its code; on a
    CPU, where the trial's peak is its own, no less than that peak so far (the compile's own
    memory shows there).

    The limit is ``--memory-limit`` where set, else on a GPU what the backend's allocator can
    give this process (JAX's ``bytes_limit``: 75% of the card unless told otherwise), not the
    card's size; a CPU trial without a limit has none."""
    from tuner.worker import backends

    memory = steps.step_memory()
    if memory is None:
        return None
    backend = backends.current()
    live_mb = current_rss_mb() if on_cpu else backend.gpu_in_use_mb()
    if live_mb is None:
        return None
    scratch = CPU_SCRATCH if on_cpu else 1.0
    step_mb = (
        memory["temp"] * scratch + max(0, memory["output"] - memory["alias"]) + memory["code"]
    ) / 2**20
    limit_mb = memory_limit_mb
    limit_source = setting("memory_limit") if limit_mb is not None else None
    if limit_mb is None and not on_cpu:
        limit_mb = backend.gpu_limit_mb()
        limit_source = "the allocator's limit" if limit_mb is not None else None
    # On a CPU the trial's peak so far (the build, the compile's own memory) is part of what
    # the trial will have used, where that peak is the trial's own (not one process-long peak).
    held_mb = peak_rss_mb() if on_cpu and not process_peak_only(on_cpu) else None
    return {
        "peak_mb": max(live_mb + step_mb, held_mb or 0.0),
        "live_mb": live_mb,
        "peak_so_far_mb": held_mb,
        "step_mb": step_mb,
        "limit_mb": limit_mb,
        "limit_source": limit_source,
        "method": "XLA memory_analysis() of the compiled train step, before its first step"
        + (f" (its temporary bytes x{scratch:g} for XLA:CPU's kernel scratch)" if on_cpu else ""),
        "parts_mb": {k: v / 2**20 for k, v in memory.items()},
    }


#: Where this worker was started otherwise than as a process of its own
#: (:mod:`tuner.trials.launcher`: a launcher whose workers share pages with another process),
#: what its resident memory leaves out that a fresh worker, and so the user's training
#: process, would hold (MB, read when asked), and the words that say it in the figure's
#: method. None for the product's launcher: set by the launcher's side in the worker before
#: its loop runs.
UNCOUNTED_RSS: tuple[Callable[[], float], str] | None = None


def status_mb(field: str, pid: int | str = "self") -> float | None:
    """A memory field of ``/proc/<pid>/status`` (``VmHWM``, ``RssFile``...) in MB; None where
    there is none."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started, or since :func:`reset_peak_rss`
    (Linux: ``VmHWM`` in ``/proc/self/status``, with what it leaves out where the worker is
    not a process of its own, :data:`UNCOUNTED_RSS`; elsewhere the process's lifetime peak)."""
    peak_mb = status_mb("VmHWM")
    if peak_mb is not None:
        return peak_mb + (UNCOUNTED_RSS[0]() if UNCOUNTED_RSS is not None else 0.0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes vs KiB


def reset_peak_rss() -> bool:
    """Start a warm worker's next trial with a fresh peak: return freed heap memory to the
    system (glibc ``malloc_trim``), then reset the peak to the current resident memory (Linux
    4.0+: writing 5 to ``/proc/self/clear_refs``). False where the peak cannot be reset."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def reported_loss(logs: Any, model: Any) -> Any:
    """The loss a training step reports, as the trial's guard compares it: its logs' ``loss``
    (Keras' own step, and a step of the model's own that names one), else the first of the
    model's metrics that the logs hold (a ``train_step`` of the model's own that reports its
    loss under a tracker's name, issue 71), else the logs' first value.

    Raises:
        KeyError: the step reports nothing.
    """
    if "loss" in logs:
        return logs["loss"]
    for metric in getattr(model, "metrics", None) or []:
        name = getattr(metric, "name", None)
        if name in logs:
            return logs[name]
    for value in logs.values():
        return value
    raise KeyError("loss")


def reports_a_mean(model: Any, reported: float) -> bool:
    """Whether the loss a step of the model's own reported (after its first execution since
    the metrics were reset) is one of its metrics' results, a running mean that the metrics'
    reset starts again (the keras.io VAE's ``total_loss_tracker``), rather than its batch's own
    loss (keras.io's WGAN-GP returns ``d_loss`` as it computed it)."""
    for metric in getattr(model, "metrics", None) or []:
        try:
            value = float(keras.ops.convert_to_numpy(metric.result()))
        except Exception:  # noqa: BLE001 - a metric with no single value is not the loss
            continue
        if math.isclose(value, reported, rel_tol=1e-6, abs_tol=1e-12):
            return True
    return False


def count_scale_loss(model: Any) -> list[int] | None:
    """Count the calls of ``model.optimizer.scale_loss`` from now on (one counter, in a list),
    where the model's ``train_step`` is its own (:func:`tuner.keras_setup.own_step`) and its
    optimizer a ``LossScaleOptimizer``, which divides every gradient by its scale whether or
    not the step scaled the loss (issue 71); None elsewhere (Keras' own step scales it). A
    traced step calls it once when traced (TensorFlow, JAX), an eager one every step: zero
    after a step ran is a step that never scales its loss."""
    optimizer = getattr(model, "optimizer", None)
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return None
    if keras_setup.own_step(model, ("train_step",)) is None:
        return None
    counted = vars(optimizer).get("scale_loss")
    if counted is not None and hasattr(counted, "calls"):
        # A warm worker's later trial on the same compiled model: its step, traced by an
        # earlier trial, is not traced again, and the count it made then stands.
        return counted.calls  # type: ignore[no-any-return]
    calls = [0]
    original = optimizer.scale_loss

    def scale_loss(loss: Any) -> Any:
        calls[0] += 1
        return original(loss)

    scale_loss.calls = calls  # type: ignore[attr-defined]
    # On the instance, past Keras' attribute tracking: the step's ``self.optimizer.scale_loss``
    # finds it first.
    object.__setattr__(optimizer, "scale_loss", scale_loss)
    return calls


@dataclass(frozen=True)
class _Least:
    """A phase's least steps: ``steps``, or where they outlast ``seconds``,
    :data:`~tuner.trials.spec.FLOOR_STEPS` (issue 50: the numerical guard's 40 steps of a model
    whose steps take seconds cost minutes a trial)."""

    steps: int
    seconds: float | None = None

    def at(self, elapsed: float) -> int:
        """The least steps after ``elapsed`` seconds of the phase."""
        if self.seconds is None or elapsed < self.seconds:
            return self.steps
        return min(self.steps, FLOOR_STEPS)


class StepRunner:
    """Runs training steps the way ``model.fit`` does, and reports each.

    ``fit`` on the TensorFlow backend pulls batches from a ``tf.data`` iterator and calls
    ``model.train_function(iterator)``, which runs ``steps_per_execution`` steps and then waits
    for them (it asks the returned optional whether it holds a value); JAX's and PyTorch's
    ``fit`` make their own calls (:mod:`tuner.worker.backends` drives each). This runner makes
    the same calls on the trial's batches, so a setup's steps per execution, XLA and input path
    behave as they will in the user's ``fit``; one call is one *execution*, timed from the call
    to its return (the loss read after it waits for the device on every backend).

    The loss ``train_function`` returns is the running mean since the metrics were last reset
    (as in ``fit``); each execution's own loss is recovered from consecutive means. The metrics
    are reset every :data:`RESET_EVERY` executions (so the recovered values stay exact to a few
    float32 roundoffs) and after a non-finite loss (which would poison the mean). Step events
    are emitted in chunks, every :data:`REPORT_EVERY_S` seconds, outside the timed calls.
    """

    def __init__(
        self,
        model: keras.Model,
        batches: Sequence[tuple[Any, Any]],
        setup: Setup,
        emit: Callable[..., None],
        cpu_memory_limit_mb: float | None = None,
    ) -> None:
        from tuner.worker import backends

        self.model = model
        self.batches = batches
        self.setup = setup
        self.loss_scale = setup.loss_scale
        self.emit = emit
        self.cpu_memory_limit_mb = cpu_memory_limit_mb
        self.optimizer = model.optimizer
        self.dynamic = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        #: counts applied (micro-)steps: it stands still on a step the loss scaler skipped
        self._applied = keras_private.iterations_variable(inner)
        self.spe = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
        #: how often the model's own train_step called its loss scaler's scale_loss (traced
        #: once on TensorFlow and JAX), where there is one to call: :func:`count_scale_loss`
        self.scale_loss_calls = count_scale_loss(model)
        self.global_step = 0
        #: whether the step reports a running mean (Keras' own step does; a step of the
        #: model's own is asked once: :func:`reports_a_mean`)
        self._running_mean: bool | None = None if keras_setup.own_step(model) else True
        self.backend = backends.current()
        #: the backend's step driver: the trial's batches in order, again and again (step k
        #: sees batch k mod the pool, as every trial of the same batch size and seed does),
        #: made in the tf.distribute strategy a script built its model in, if any
        with keras_setup.in_its_strategy(model):
            self.steps = self.backend.steps(model, batches)

    def run(
        self,
        phase: str,
        steps: int | None,
        seconds: float = 0.0,
        min_steps: int = 1,
        max_steps: int = 1,
        prune_below: float | None = None,
        until: float | None = None,
        min_steps_seconds: float | None = None,
    ) -> StepLog:
        """Run ``steps`` steps, or (``steps=None``) until ``seconds`` have passed, with at
        least ``min_steps`` (where they take no more than ``min_steps_seconds``; past those,
        :data:`~tuner.trials.spec.FLOOR_STEPS`) and at most ``max_steps``; whole executions, so
        a phase may run up to ``steps_per_execution - 1`` steps more. With ``prune_below``
        (samples/s) the phase ends early, ``pruned``, once at least
        :data:`~tuner.trials.spec.PRUNE_AFTER` executions ran under that rate, over the window
        and at their median (:func:`~tuner.trials.spec.losing`). Past ``until``
        (``time.perf_counter``) it ends after the execution under way, ``cut`` where that is
        short of what it was asked for."""
        with _collecting(self.backend.cyclic_steps):
            least = _Least(min_steps, min_steps_seconds)
            return self._run(phase, steps, seconds, least, max_steps, prune_below, until=until)

    def calibrate(self, warmup: StepLog) -> StepLog | None:
        """Steps after the warm-up while a dynamic loss scale is still coming down from its
        initial value (issue 35): the steps it skips then are calibration, which a real run
        pays once in its first seconds, not a cost of every step. They run until
        :data:`SETTLED_STEPS` steps in a row were applied (at most
        :data:`CALIBRATION_MAX_STEPS`, and not past a scale of 1, where a model that overflows
        at any scale is left for the measured steps to show). None where there is nothing to
        calibrate: no dynamic scale, or a warm-up that skipped nothing."""
        if not self.dynamic or not any(warmup.skipped) or _settled(warmup.skipped):
            return None
        return self._run("warmup", None, math.inf, _Least(0), CALIBRATION_MAX_STEPS, settle=True)

    def _run(
        self,
        phase: str,
        steps: int | None,
        seconds: float,
        min_steps: _Least,
        max_steps: int,
        prune_below: float | None = None,
        settle: bool = False,
        until: float | None = None,
    ) -> StepLog:
        log = StepLog()
        pending: list[tuple[float, float, float | None, int]] = []
        reporting_s = 0.0
        start = time.perf_counter()
        last_report = start
        count = 0
        timed: list[float] = []  # each measured execution's seconds, for its pruning
        timed_s = 0.0
        since_reset = 0
        mean_before = 0.0
        self.steps.reset_metrics()
        applied = self._read_applied()
        streak = 0  # steps applied in a row (``settle``)
        while True:
            if self._ended(count, steps, min_steps, max_steps, seconds, start + reporting_s):
                break
            if settle and (streak >= SETTLED_STEPS or (self._current_scale() or 2.0) <= 1.0):
                break
            t = time.perf_counter()
            logs = self.steps.execute()
            # Reading the loss waits for the step (JAX and PyTorch return before it ends).
            mean = float(reported_loss(logs, self.model))
            dt = time.perf_counter() - t
            self.global_step += self.spe
            since_reset += 1
            loss = self._execution_loss(mean, since_reset, mean_before)
            mean_before = mean
            scale = self._current_scale()
            now_applied = self._read_applied()
            skipped = (
                self.spe - (now_applied - applied)
                if applied is not None and now_applied is not None
                else 0
            )
            applied = now_applied
            streak = streak + self.spe if skipped <= 0 else self.spe - skipped
            pending.append((dt, loss, scale, max(0, skipped)))
            count += self.spe
            timed.append(dt)
            timed_s += dt
            if losing(prune_below, self.spe * self.setup.batch_size, timed, timed_s):
                log.pruned = True
                break
            if until is not None and time.perf_counter() >= until:
                log.cut = count < (steps if steps is not None else min_steps.steps)
                break
            if not math.isfinite(mean) or since_reset >= RESET_EVERY:
                self.steps.reset_metrics()
                since_reset, mean_before = 0, 0.0
            if time.perf_counter() - last_report >= REPORT_EVERY_S:
                t_report = time.perf_counter()
                self._report(phase, pending, log)
                pending = []
                last_report = time.perf_counter()
                reporting_s += last_report - t_report
        t_report = time.perf_counter()
        self.steps.sync()
        self._report(phase, pending, log)
        reporting_s += time.perf_counter() - t_report
        log.elapsed_s = time.perf_counter() - start
        log.reporting_s = reporting_s
        return log

    def _execution_loss(self, reported: float, since_reset: int, mean_before: float) -> float:
        """This execution's mean loss, from the running means before and after it; a step of
        the model's own that reports its batch's own loss (keras.io's WGAN-GP) gives it as it
        is (asked once: :func:`reports_a_mean`)."""
        if self._running_mean is None:
            self.steps.sync()  # JAX: the metrics' values back in the model
            self._running_mean = reports_a_mean(self.model, reported)
        if not self._running_mean:
            return reported
        return since_reset * reported - (since_reset - 1) * mean_before

    @staticmethod
    def _ended(
        count: int, steps: int | None, least: _Least, most: int, seconds: float, since: float
    ) -> bool:
        """Whether a phase of ``steps`` steps (or of ``seconds`` since ``since``, within
        ``least`` and ``most`` steps) has run its steps."""
        if steps is not None:
            return count >= steps
        if count >= most:
            return True
        elapsed = time.perf_counter() - since
        return elapsed >= seconds and count >= least.at(elapsed)

    def _report(
        self,
        phase: str,
        executions: list[tuple[float, float, float | None, int]],
        log: StepLog,
    ) -> None:
        """Emit one ``step`` event per step of ``executions`` and check the memory limit."""
        for dt, loss, scale, skipped in executions:
            log.execution_times_s.append(dt)
            for i in range(self.spe):
                step_skipped = i < skipped
                nonfinite = not math.isfinite(loss)
                log.losses.append(loss)
                log.loss_scales.append(scale)
                log.skipped.append(step_skipped)
                log.nonfinite.append(nonfinite)
                log.times_s.append(dt / self.spe)
                self.emit(
                    "step",
                    phase=phase,
                    step=len(log.losses),
                    loss=loss,
                    loss_scale=scale,
                    skipped=step_skipped,
                    nonfinite=nonfinite,
                    time_ms=round(dt / self.spe * 1000, 3),
                )
        self.check_memory()

    def check_memory(self, where: str = "") -> None:
        """Raise :class:`MemoryLimitExceeded` where the worker's peak resident memory passed a
        CPU trial's limit (``where``: in words, after the figures)."""
        if self.cpu_memory_limit_mb is not None and peak_rss_mb() > self.cpu_memory_limit_mb:
            raise MemoryLimitExceeded(
                f"peak resident memory {peak_rss_mb():.0f} MB passed the limit of "
                f"{self.cpu_memory_limit_mb:.0f} MB{where}"
            )

    def _read_applied(self) -> int | None:
        if not self.dynamic or self._applied is None:
            return None
        return int(self.steps.read(self._applied))

    def _current_scale(self) -> float | None:
        if self.dynamic:
            return float(self.steps.read(self.optimizer.dynamic_scale))
        if self.loss_scale.kind == "fixed":
            return self.loss_scale.value
        return None


@contextlib.contextmanager
def _collecting(on: bool) -> Iterator[None]:
    """Python's automatic collection on while the block runs, when ``on`` (a worker keeps it
    off otherwise: see :func:`tuner.worker.warm.between_trials`); back as it was after."""
    was = gc.isenabled()
    if on:
        gc.enable()
    try:
        yield
    finally:
        if on and not was:
            gc.disable()


def _settled(skipped: Sequence[bool]) -> bool:
    """Whether a phase's last :data:`SETTLED_STEPS` steps were applied (its loss scale has
    stopped falling)."""
    tail = list(skipped)[-SETTLED_STEPS:]
    return len(tail) == SETTLED_STEPS and not any(tail)
