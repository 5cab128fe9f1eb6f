"""Run one trial in a child process and collect its result.

The worker (:mod:`tuner.worker`) is a fresh Python process per trial: TensorFlow's precision
policy is global state, an out-of-memory error is not safely recoverable in-process, and a crash
must cost one trial, not the session. The worker reads its spec from stdin and writes JSON-line
events to a dedicated pipe; its stdout and stderr (TensorFlow's logs, the user's prints) go to
a log file whose tail is kept when something goes wrong.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import secrets
import selectors
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.record import part
from tuner.setup import KNOBS
from tuner.trials import launcher
from tuner.trials.environment import worker_environment
from tuner.trials.events import EventReader
from tuner.trials.hazards import Hazard, merge
from tuner.trials.launcher import WorkerHandle
from tuner.trials.messages import (
    ErrorMessage,
    HazardMessage,
    MemoryMessage,
    NumericsMessage,
    ObservedMessage,
    PhaseMessage,
    PredictionMessage,
    ReadyMessage,
    ResultMessage,
    StartedMessage,
    StepMessage,
    WarningMessage,
    WorkerMessage,
    parse_message,
)
from tuner.trials.models import ModelSource, parse_model_spec
from tuner.trials.outcome import WorkerFacts, classify
from tuner.trials.process import (
    MEMORY_SAMPLE_INTERVAL_S,
    TrialCancelled,
    WorkerProcess,
    has_exited,
    kill_group,
)
from tuner.trials.process import kill_all_workers as kill_all_workers
from tuner.trials.protocol import EventCallback as EventCallback
from tuner.trials.result import (
    START_PHASE,
    Measured,
    MemoryPrediction,
    StageTimes,
    Timings,
    TrialResult,
    TrialStatus,
    reachable,
)
from tuner.trials.spec import TrialSpec

logger = logging.getLogger(__name__)


def run_trial(
    spec: TrialSpec,
    on_event: EventCallback | None = None,
    *,
    cancel: threading.Event | None = None,
    source: ModelSource | None = None,
) -> TrialResult:
    """Run ``spec`` in a worker process and return its result. Never raises for a trial that
    fails: the failure is the result's status.

    Args:
        spec: the trial.
        on_event: called (on this thread) with each worker message as it arrives, a record
            of :mod:`tuner.trials.messages`, plus :class:`MemoryMessage` samples of the
            worker's resident memory.
        cancel: set it from another thread to stop the trial; the worker is killed at once.
        source: the already-parsed model source, to skip parsing it again.

    Raises:
        MptuneError: the model spec is bad (missing file, syntax error, ...); no worker ran.
        TrialCancelled: ``cancel`` was set.
    """
    source = source or parse_model_spec(spec.model)
    result, _ = _WorkerRun(spec, source, on_event, cancel).run(None, warm=False)
    return result


def observe_in_worker(
    spec: TrialSpec, source: ModelSource, cancel: threading.Event | None = None
) -> tuple[ObservedMessage | None, TrialResult]:
    """Run an observing ``spec`` (:attr:`TrialSpec.observe`) in a fresh worker: what it read
    of the script (None where it sent nothing: it failed, hung or exited first), and the run
    as a trial's result (its error, where it failed).

    Raises:
        TrialCancelled: ``cancel`` was set.
    """
    run = _WorkerRun(spec, source, None, cancel)
    result, _ = run.run(None, warm=False)
    return run.observed, result


class WorkerPool:
    """Runs trials like :func:`run_trial`, keeping workers warm between trials of one model
    under one policy (a batch-size ladder, the loss-scale and knob stages), so that they skip
    the interpreter start, the TensorFlow import and the model's build.

    A warm worker runs its next trial from the same model with every variable back at its
    starting value, on new data at the new batch size; when the loss scale, XLA, steps per
    execution or accumulation differ from its last trial, it compiles the model again with a
    new optimizer. Either way: the same steps and losses as a fresh worker
    (tests/tuner/test_warm.py checks this). Isolation is kept: a trial that ends in any way
    other than ``ok`` (out of memory, a crash, a timeout, a stop) kills its worker, and the
    next trial starts a fresh one. A trial that runs the numerics probe, or changes the model,
    the policy, TF32, the seed, the device or how a trial measures, starts a fresh worker too.

    Up to ``max_idle`` workers wait side by side (one per policy: a search goes from policy to
    policy and back), while the machine keeps a quarter of its memory available; a waiting
    worker uses no CPU time, and its memory is not counted in another worker's peak (each
    backend's peak is its own process's). On a GPU a waiting worker holds what its allocator
    took, which another trial's out-of-memory limit must not see: a trial that runs out of
    memory (not as predicted) while other workers waited on the GPU is run again once they are
    ended, and a worker whose trials hold a fixed arena (a ``--memory-limit`` on a GPU) waits
    only for the very next trial, and only if that trial is its own.

    A search knows at its start that each policy's first trial needs a fresh worker:
    :meth:`start_ahead` starts those workers side by side before the first trial, so that their
    interpreter starts and TensorFlow imports overlap (on a 2-core CPU three of them take about
    half the time of three in turn), and returns once every one of them waits idle, so that no
    import runs beside a measured step.

    Use it as a context manager, or call :meth:`close`, so no worker is left waiting.
    """

    def __init__(self, max_idle: int = 3) -> None:
        #: waiting workers by warm key, the most recently used last
        self._idle: dict[str, WorkerProcess] = {}
        #: workers started ahead (imports done, no trial yet), with their environment's key
        self._spares: list[tuple[str, WorkerProcess]] = []
        self.max_idle = max(1, max_idle)
        self.started = 0  #: workers started
        #: what ends what the launcher prepared for this pool's workers (:meth:`start_ahead`)
        self._prepared: list[Callable[[], None]] = []
        self.reused = 0  #: trials that ran in a warm worker

    def run(
        self,
        spec: TrialSpec,
        on_event: EventCallback | None = None,
        *,
        cancel: threading.Event | None = None,
        source: ModelSource | None = None,
    ) -> TrialResult:
        """:func:`run_trial`, in a warm worker when one fits."""
        source = source or parse_model_spec(spec.model)
        key = warm_key(spec, source)
        worker = self._idle.pop(key, None) if key is not None else None
        if worker is not None and worker.exited():
            worker.close()
            worker = None
        # A fixed arena on a GPU may not wait while another worker's trial runs.
        for other in [k for k, w in self._idle.items() if not w.on_cpu and w.holds_arena]:
            self._idle.pop(other).close()
        beside = [w for w in self._idle.values() if not w.on_cpu]
        result = self._run_in(spec, source, worker, on_event, cancel)
        if beside and result.status is TrialStatus.OOM and not result.predicted_oom:
            # Its out-of-memory error may be theirs: run it again with the GPU to itself.
            self._end_gpu_waiters()
            again = self._run_in(spec, source, None, on_event, cancel)
            note = (
                f"ran again: it ran out of GPU memory while {len(beside)} other worker(s) "
                "waited on the GPU"
            )
            return dataclasses.replace(again, warnings=(*again.warnings, note))
        return result

    def _end_gpu_waiters(self) -> None:
        for other in [k for k, w in self._idle.items() if not w.on_cpu]:
            self._idle.pop(other).close()

    def _run_in(
        self,
        spec: TrialSpec,
        source: ModelSource,
        worker: WorkerProcess | None,
        on_event: EventCallback | None,
        cancel: threading.Event | None,
    ) -> TrialResult:
        """Run the trial in ``worker`` (a warm one) or a fresh one, and keep the worker
        waiting where it stays warm."""
        if worker is None:
            worker = self._spare(worker_environment(spec))
            self.started += 1
        else:
            self.reused += 1
        # A probe trial starts fresh, and its worker stays warm for the policy's later trials
        # when the probe left the model as built (the worker says so by staying).
        later = warm_key(dataclasses.replace(spec, probe=False), source)
        result, kept = _WorkerRun(spec, source, on_event, cancel).run(worker, warm=True)
        if kept is not None:
            kept.holds_arena = spec.memory_limit_mb is not None
        if kept is not None and later is None:
            kept.close()
        elif kept is not None and later is not None:
            replaced = self._idle.pop(later, None)
            if replaced is not None:
                replaced.close()
            self._idle[later] = kept
            self._trim()
        return result

    def start_ahead(
        self, specs: Sequence[TrialSpec], cancel: threading.Event | None = None
    ) -> None:
        """Start a fresh worker for each of ``specs`` (trials that will not find a warm one)
        side by side, and return once each has done its imports and waits for its trial; a
        later :meth:`run` that needs a fresh worker in the same environment takes one of them.

        A worker's start counts against its trial's time limit (``timeout_s``), from the
        moment it is spawned. One that makes no progress (no CPU time for :data:`STALL_S`: a
        driver stuck in its initialisation, a network file system, a stopped process) is not
        waited for: the others' trials go on, and its own trial waits for it within its limit.
        One still starting when that limit is up is killed then, its threads' stacks kept, and
        its trial ends ``timeout`` the moment it runs. A worker that fails to start is let go
        (its trial then starts its own and reports why).

        Raises:
            TrialCancelled: ``cancel`` was set; every worker started here is ended.
        """
        self._prepare(specs, cancel)
        started: list[tuple[str, WorkerProcess, float]] = []
        for spec in specs:
            env = worker_environment(spec)
            worker = WorkerProcess(env, announce_import=True)
            started.append((_env_key(env), worker, worker.spawned + spec.timeout_s))
        waiting = {w.read_fd: (key, w, deadline) for key, w, deadline in started}
        try:
            with selectors.DefaultSelector() as selector:
                for fd in waiting:
                    selector.register(fd, selectors.EVENT_READ)
                while waiting:
                    if cancel is not None and cancel.is_set():
                        raise TrialCancelled("workers started ahead")
                    now = time.monotonic()
                    for fd, (key, worker, deadline) in list(waiting.items()):
                        if worker.exited():
                            worker.close()  # its trial starts its own, and says why
                        elif now >= deadline:
                            worker.start_timed_out = True
                            worker.stop_at_limit()
                            self._spares.append((key, worker))  # its trial times out
                        elif worker.stalled(now):
                            self._spares.append((key, worker))  # its trial waits for it
                        else:
                            continue
                        selector.unregister(fd)
                        del waiting[fd]
                    if not waiting:
                        break
                    wait = min(d for _, _, d in waiting.values()) - now
                    for ready, _ in selector.select(
                        timeout=max(0.0, min(MEMORY_SAMPLE_INTERVAL_S, wait))
                    ):
                        fd = int(ready.fd)
                        selector.unregister(fd)
                        key, worker, _ = waiting.pop(fd)
                        if worker.read_imported():
                            self._spares.append((key, worker))
                        else:
                            worker.close()
        except BaseException:
            for _, worker, _ in started:
                worker.close()
            self._spares = [(k, w) for k, w in self._spares if not w.closed]
            raise

    def _prepare(self, specs: Sequence[TrialSpec], cancel: threading.Event | None) -> None:
        """Let the launcher get ready for the environments of ``specs``
        (:meth:`tuner.trials.launcher.Launcher.prepare`), within the shortest of their trials'
        limits; what it prepared ends with the pool. The product's launcher prepares nothing:
        each worker it starts does its own imports."""
        envs = [worker_environment(spec) for spec in specs]
        deadline = time.monotonic() + min(spec.timeout_s for spec in specs)
        self._prepared.append(launcher.current().prepare(envs, deadline, cancel))
        if cancel is not None and cancel.is_set():
            raise TrialCancelled("workers started ahead")

    def _spare(self, env: dict[str, str]) -> WorkerProcess | None:
        """A worker started ahead for this environment, if one waits: one that is up first,
        then one still starting (its trial waits for it), then one stopped at its limit while
        it started (its trial times out); None otherwise."""
        key = _env_key(env)
        mine = [(i, w) for i, (k, w) in enumerate(self._spares) if k == key]
        if not mine:
            return None
        i, worker = min(mine, key=lambda iw: (iw[1].start_timed_out, iw[1].announcing, iw[0]))
        del self._spares[i]
        if worker.start_timed_out or not worker.exited():
            return worker
        worker.close()
        return self._spare(env)

    def _trim(self) -> None:
        """End the longest-waiting workers past what may wait (see the class)."""
        import psutil

        newest = self._idle[list(self._idle)[-1]]
        memory = psutil.virtual_memory()
        short_of_memory = memory.available < memory.total / 4
        arena = not newest.on_cpu and newest.holds_arena
        allowed = 1 if short_of_memory or arena else self.max_idle
        while len(self._idle) > allowed:
            self._idle.pop(next(iter(self._idle))).close()

    @property
    def idle_pids(self) -> list[int]:
        """The process ids of the workers waiting for a trial: those started ahead, then the
        warm ones, the most recently used last (not those stopped at their limit)."""
        spares = [w.proc.pid for _, w in self._spares if not w.start_timed_out]
        return spares + [w.proc.pid for w in self._idle.values()]

    def close(self) -> None:
        """End every waiting worker."""
        idle, self._idle = self._idle, {}
        spares, self._spares = self._spares, []
        for worker in [*(w for _, w in spares), *idle.values()]:
            worker.close()
        prepared, self._prepared = self._prepared, []
        for end in prepared:
            end()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What a warm worker changes between trials by itself: the batch size (the data has no fixed
#: batch dimension) and what compile() sets (it compiles again with a new optimizer). The
#: policy (layer dtypes are fixed when the model is built), TF32 (a process-wide setting), the
#: seed and the device are not among them.
WARM_VARIES = ("batch_size", "loss_scale", *(knob.name for knob in KNOBS if knob.warm))


def warm_key(spec: TrialSpec, source: ModelSource) -> str | None:
    """What must match for a trial to run in a warm worker: the model, the policy and how the
    trial measures (everything but :data:`WARM_VARIES`, the timeout and the pruning rate, which
    are the trial's: a search moves the rate with its leader). None for a trial that runs the
    numerics probe (it builds a float32 twin and may change the model), which always gets a
    fresh worker."""
    if spec.probe and spec.policy.is_half:
        return None
    data = spec.to_dict()
    for name in (*WARM_VARIES, "timeout_s", "probe", "prune_below"):
        data.pop(name, None)
    data["source"] = _source_dict(source)
    return json.dumps(data, sort_keys=True, default=str)


def _env_key(env: dict[str, str]) -> str:
    return json.dumps(env, sort_keys=True)


class _WorkerRun:
    """One worker process from spawn to result: the state of a single :func:`run_trial`."""

    def __init__(
        self,
        spec: TrialSpec,
        source: ModelSource,
        on_event: EventCallback | None,
        cancel: threading.Event | None,
    ) -> None:
        self.spec = spec
        self.source = source
        self.on_event = on_event
        self.cancel = cancel
        #: Every line the worker writes carries it; a line without it was not written by mptune.
        self.token = secrets.token_hex(16)
        self.reader = EventReader(self.token)
        self.started: StartedMessage | None = None
        self.started_at: float | None = None
        self.result: ResultMessage | None = None
        self.error: ErrorMessage | None = None
        self.warnings: list[str] = []
        self.hazards: list[Hazard] = []
        self.numerics: dict[str, Any] = {}
        self.prediction: dict[str, Any] = {}
        self.steps: list[StepMessage] = []
        self.timed_out = False
        #: where the worker is, as its last ``phase`` message said (``import`` before any)
        self.phase = START_PHASE
        #: every thread's Python stack, written by the worker when its time was up
        self.stack: str | None = None
        self.over_memory_limit = False
        self.peak_rss_mb: float | None = None
        #: the worker's CPU seconds and the wall clock at the last memory sample
        self._cpu_mark: tuple[float, float] | None = None
        self.load_window: _LoadWindow | None = None
        self.background_load: float | None = None
        #: a warm worker finished this trial and waits for the next
        self.ready = False
        #: what a script's fit trains, read back (a spec that observes: issue 70)
        self.observed: ObservedMessage | None = None

    def run(
        self, worker: WorkerProcess | None, warm: bool
    ) -> tuple[TrialResult, WorkerProcess | None]:
        """Run the trial in ``worker`` (a warm one) or a new worker; returns the result and the
        worker when it stays warm for another trial (``warm`` asked, the trial ``ok``)."""
        t0 = time.monotonic()
        worker = worker or WorkerProcess(worker_environment(self.spec))
        # Every phase of the worker's life counts against the trial's limit: the start of a
        # worker started ahead too (its interpreter and imports, done before this trial).
        deadline = t0 + self.spec.timeout_s - worker.start_spent()
        payload: dict[str, Any] = {
            "spec": self.spec.to_dict(),
            "source": _source_dict(self.source),
            "token": self.token,
            "warm": warm,
        }
        returncode: int | None = None
        log_tail = ""
        keep = False
        try:
            if worker.start_timed_out or (
                worker.announcing and not worker.wait_up(deadline, self.cancel)
            ):
                # Started ahead, and not up within this trial's limit.
                self.timed_out = True
            else:
                # One line; stdin then stays open as the worker's lifeline: when this process
                # closes it or dies, the worker ends its process group (Lifeline).
                # What is left of its limit, so that the worker stops timing in time to
                # report what it measured (a trial never times out while it times).
                payload["seconds_left"] = deadline - time.monotonic()
                worker.send(payload)
                self._pump(worker.proc, worker.read_fd, t0, deadline)
                keep = self.ready
                worker.on_cpu = self._on_cpu()
        finally:
            if not keep:
                if self.timed_out:
                    worker.stop_at_limit()
                self.stack = worker.stack
                returncode, log_tail = worker.close()
        total_s = time.monotonic() - t0
        if self.timed_out and worker.up_s is None and self.phase == START_PHASE:
            # A worker that never came up spent its whole life on this trial's start, part of
            # it before the trial (started ahead).
            total_s = max(total_s, worker.lived_s)
        status, error = classify(self._facts(returncode, log_tail))
        refused = self.error is not None and self.error.predicted
        if keep and status is not TrialStatus.OK and not refused:
            # Any trial that is not ok ends its worker: the next one starts fresh. One refused
            # by its predicted memory ran no step: its worker is as it was.
            worker.close()
            keep = False
        worker.used = True
        return self._assemble(status, error, total_s), (worker if keep else None)

    def _facts(self, returncode: int | None, log_tail: str) -> WorkerFacts:
        return WorkerFacts(
            result=self.result,
            error=self.error,
            user_model=self.source.is_user_code,
            timed_out=self.timed_out,
            timeout_s=self.spec.timeout_s,
            over_memory_limit=self.over_memory_limit,
            memory_limit_mb=self.spec.memory_limit_mb,
            returncode=returncode,
            log_tail=log_tail,
            batch_size=self.spec.batch_size,
            measured_step_ms=tuple(float(s.time_ms or 0.0) for s in self._measured()),
            foreign_lines=self.reader.foreign_lines,
            hazards=tuple(self.hazards),
            phase=self.phase,
            stack=self.stack,
            model_path=self.source.path,
            model_spec=self.source.spec,
        )

    def _pump(self, proc: WorkerHandle, read_fd: int, t0: float, deadline: float) -> None:
        next_sample = t0
        with selectors.DefaultSelector() as selector:
            selector.register(read_fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if self.cancel is not None and self.cancel.is_set():
                    kill_group(proc)
                    raise TrialCancelled(self.spec.describe())
                if now >= deadline:
                    self.timed_out = True
                    return
                if now >= next_sample:
                    next_sample = now + MEMORY_SAMPLE_INTERVAL_S
                    if self._sample_memory(proc, now - t0):
                        return
                exited = has_exited(proc)
                # Once the worker has exited, read what it left in the pipe and stop: a child
                # it forked may hold the pipe open, so end-of-file may never come.
                timeout = 0.0 if exited else min(MEMORY_SAMPLE_INTERVAL_S, deadline - now)
                if selector.select(timeout=timeout):
                    data = os.read(read_fd, 1 << 16)
                    if data:
                        for event in self.reader.feed(data):
                            self._handle(parse_message(event), t0)
                        if self.ready:
                            return  # the worker waits for its next trial
                        continue
                elif not exited:
                    continue
                for event in self.reader.close():  # closed, or exited and drained
                    self._handle(parse_message(event), t0)
                return

    def _handle(self, message: WorkerMessage, t0: float) -> None:
        if isinstance(message, StartedMessage):
            self.started, self.started_at = message, time.monotonic() - t0
        elif isinstance(message, PhaseMessage):
            self.phase = message.phase
            if message.phase == "measure":
                pid = self.started.pid if self.started is not None else None
                self.load_window = _LoadWindow.open(pid) if pid else None
        elif isinstance(message, StepMessage):
            self.steps.append(message)
        elif isinstance(message, WarningMessage):
            self.warnings.append(message.message)
        elif isinstance(message, HazardMessage):
            self.hazards.append(message.hazard)
        elif isinstance(message, PredictionMessage):
            self.prediction = dict(message.figures)
        elif isinstance(message, NumericsMessage):
            # As the worker sent it, its time included (TrialResult.numerics is stored).
            self.numerics = {k: v for k, v in message.to_dict().items() if k != "type"}
        elif isinstance(message, ResultMessage):
            self.result = message
            if self.load_window is not None:
                self.background_load = self.load_window.close()
        elif isinstance(message, ErrorMessage):
            self.error = message
        elif isinstance(message, ObservedMessage):
            self.observed = message
        elif isinstance(message, ReadyMessage):
            self.ready = self.result is not None or (
                self.error is not None and self.error.predicted
            )
            return  # the worker's business, not the trial's
        if self.on_event is not None:
            self.on_event(message)

    def _on_cpu(self) -> bool:
        """Whether the worker trains on the CPU (as its ``started`` message said)."""
        return self.started is not None and str(self.started.device or "").startswith("cpu")

    def _cpu_use(self, pid: int) -> float | None:
        """The worker's CPU use since the last sample, in percent of the machine's cores (100:
        every core busy with it); None at the first sample or where it cannot be read."""
        seconds = _cpu_seconds(pid)
        if seconds is None:
            return None
        now = time.monotonic()
        mark, self._cpu_mark = self._cpu_mark, (seconds, now)
        if mark is None or now <= mark[1]:
            return None
        cores = os.cpu_count() or 1
        return max(0.0, min(100.0, 100 * (seconds - mark[0]) / (now - mark[1]) / cores))

    def _measured(self) -> list[StepMessage]:
        return [s for s in self.steps if s.phase == "measure"]

    def _sample_memory(self, proc: WorkerHandle, t: float) -> bool:
        """Record the worker's RSS; True when it passed the CPU memory limit."""
        rss_mb = _rss_mb(proc.pid)
        if rss_mb is not None:
            rss_mb += proc.uncounted_mb()  # as a fresh worker holds it (the worker's peak too)
        if rss_mb is None:
            return False
        self.peak_rss_mb = max(self.peak_rss_mb or 0.0, rss_mb)
        if self.on_event is not None:
            self.on_event(MemoryMessage(t=t, rss_mb=rss_mb, cpu_percent=self._cpu_use(proc.pid)))
        limit = self.spec.memory_limit_mb
        if limit is not None and self._on_cpu() and rss_mb > limit:
            self.over_memory_limit = True
            return True
        return False

    def _assemble(self, status: Any, error: Any, total_s: float) -> TrialResult:
        """The trial's result: the worker's :class:`Measured` figures and stage times as it sent
        them (where it timed out or died, what its steps already told), and the parent's own."""
        res = self.result
        if res is not None:
            measured, stages = part(res, Measured), part(res, StageTimes)
        else:
            steps = self._measured()
            measured = part(
                Measured(
                    losses=tuple(math.nan if s.loss is None else s.loss for s in steps),
                    loss_scales=tuple(s.loss_scale for s in steps),
                    skipped_steps=sum(s.skipped for s in steps),
                    nonfinite_steps=sum(s.nonfinite for s in steps),
                    peak_memory_mb=self.peak_rss_mb,
                    memory_kind="cpu_rss" if self.peak_rss_mb else None,
                ),
                Measured,
            )
            stages = {
                "probe_s": self.numerics.get("probe_s"),
                "compile_s": self.prediction.get("compile_s"),
            }
        device_rate, fed = (res.samples_per_second, res.input) if res else (None, None)
        return TrialResult(
            **measured,
            spec=self.spec,
            status=status,
            # What fit can reach, from what the device trains at and what the input delivers.
            samples_per_second=(
                reachable(device_rate, fed) if device_rate and fed is not None else device_rate
            ),
            device_samples_per_second=device_rate,
            steps_completed=len(measured["losses"]),
            timings=Timings(
                **stages,
                startup_s=self.started_at,
                total_s=total_s,
                input_s=fed.seconds if fed else None,
            ),
            error=error,
            warnings=tuple(self.warnings) + self._foreign_warning(),
            device=self.started.device if self.started else None,
            versions=dict(self.started.versions) if self.started else {},
            background_load=self.background_load,
            hazards=merge(self.hazards),
            numerics=dict(self.numerics),
            memory_prediction=(
                MemoryPrediction.from_dict(self.prediction) if self.prediction else None
            ),
        )

    def _foreign_warning(self) -> tuple[str, ...]:
        if not self.reader.foreign_lines:
            return ()
        return (
            f"ignored {self.reader.foreign_lines} line(s) that the model wrote to mptune's "
            "event channel",
        )


@dataclass
class _LoadWindow:
    """CPU time the machine spent on other processes while a trial measured.

    The machine's busy CPU time over the window, less the worker's (and its children's) and this
    process's own, as a share of the window's CPU capacity: a busy machine is named in the
    recommendation so that its user knows to re-run, instead of trusting a slow figure.
    """

    wall: float
    busy: float
    ours: float
    pid: int

    @classmethod
    def open(cls, pid: int) -> _LoadWindow | None:
        ours = _our_cpu_s(pid)
        if ours is None:
            return None
        return cls(time.monotonic(), _machine_busy_s(), ours, pid)

    def close(self) -> float | None:
        ours = _our_cpu_s(self.pid)
        wall = time.monotonic() - self.wall
        if ours is None or wall <= 0:
            return None
        import psutil

        capacity = wall * (psutil.cpu_count() or 1)
        others = (_machine_busy_s() - self.busy) - (ours - self.ours)
        return min(1.0, max(0.0, others / capacity))


def _machine_busy_s() -> float:
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return float(sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


def _our_cpu_s(pid: int) -> float | None:
    """CPU seconds of the worker (with its finished children) plus this process."""
    import psutil

    try:
        total = 0.0
        for proc in (psutil.Process(pid), psutil.Process()):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        return total
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ValueError):
        return None


def _source_dict(source: ModelSource) -> dict[str, Any]:
    return {
        "spec": source.spec,
        "kind": source.kind,
        "name": source.name,
        "path": source.path,
        "params": dict(source.params),
        "has_make_dataset": source.has_make_dataset,
        "args": list(source.args),
        "fit_call": source.fit_call,
    }


def _rss_mb(pid: int) -> float | None:
    import psutil

    try:
        rss: float = psutil.Process(pid).memory_info().rss / 2**20
        return rss
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system) process ``pid`` has used, or None."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
