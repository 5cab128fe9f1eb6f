"""Where a search's trials run: the evaluator runs a trial in a free slot (or hands it out
through the store to ``mptune worker`` processes), recalls a stored one instead of running it
again (so a resumed search continues where it stopped), enforces the trial and time budgets,
and passes the events of trials running in lanes (``--parallel``) on to the search's thread.
The strategy (:mod:`tuner.search.strategy`) decides what to measure; this module only measures.
"""

from __future__ import annotations

import dataclasses
import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tuner.errors import Terminated
from tuner.policies import FLOAT32
from tuner.said import setting
from tuner.search.events import (
    LeaderChanged,
    SearchEvent,
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkerReported,
)
from tuner.search.lease import Heartbeat
from tuner.search.measures import Measured
from tuner.search.session import TuningSession, stored_result
from tuner.search.space import SearchSettings
from tuner.search.stage import Stage
from tuner.search.storage import GRACE_S
from tuner.setup import Setup
from tuner.trials.models import ModelSource
from tuner.trials.outcome import lost
from tuner.trials.process import TrialCancelled
from tuner.trials.protocol import TrialRunner
from tuner.trials.result import TrialResult
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    import optuna

#: Starts the fresh workers of some trials ahead, side by side (WorkerPool.start_ahead).
StartAhead = Callable[[Sequence[TrialSpec], threading.Event | None], None]


class SearchState(Protocol):
    """What the evaluator asks of the search it serves (issue 36: asked of one declared
    object, not of callbacks the search planted in it): the rate under which a trial of a setup
    in a stage stops measuring, how many trials the leader's check against float32 still needs
    (side stages leave the time and the trials for them, :data:`CHECKS`), how many trials a
    time budget keeps from a stage for the stages after it, and the leader's setup, whose
    trial prices that check. :class:`~tuner.search.stages.context.SearchContext`
    is one."""

    def prune_below(self, setup: Setup, stage: str) -> float | None: ...

    def reserved(self) -> int: ...

    def kept_after(self, stage: str) -> tuple[int, int]: ...

    def leader_setup(self) -> Setup | None: ...

    def leading(self) -> LeaderChanged | None: ...


class _NoSearch:
    """Before a search is served: nothing pruned, nothing reserved, no leader."""

    def prune_below(self, setup: Setup, stage: str) -> float | None:
        return None

    def reserved(self) -> int:
        return 0

    def kept_after(self, stage: str) -> tuple[int, int]:
        return 0, 0

    def leader_setup(self) -> Setup | None:
        return None

    def leading(self) -> LeaderChanged | None:
        return None


class BudgetExhausted(Exception):
    """The next trial would pass ``--max-trials`` or ``--budget-minutes``."""


class StageCut(Exception):
    """The next trial of a stage would spend the time a time budget keeps for the stages after
    it (``SearchState.kept_after``): that stage ends with what it measured, and the search
    goes on to the next."""


#: Without ``--budget-minutes`` or ``--max-trials`` a search on a GPU gets a time budget of
#: this many of its own trials (their median cost, the probe taken out), at least
#: :data:`GPU_BUDGET_MIN_S` and at most :data:`GPU_BUDGET_MAX_S`: on a GPU a trial costs half a
#: minute or more (XLA's compile of each new batch size, the probe) and an open-ended search
#: would run for hours. Ten minutes at most (issue 50): the simulated GPU search of ResNet50 on
#: an H200 with warm workers reaches every stage within them, each stage after the ladders
#: keeping its first trials from the stages before it (``SearchState.kept_after``), and picks
#: the grid's best (bench/bench_gpu_search.py, docs/benchmarks.md); run to its end it takes
#: 16-17 min. A CPU search stays open-ended.
GPU_BUDGET_TRIALS = 48
GPU_BUDGET_MIN_S = 5 * 60.0
GPU_BUDGET_MAX_S = 10 * 60.0
#: The stages whose trials may use the time reserved for the leader's checks.
CHECKS = frozenset({Stage.GUARD})


class LaneStopped(Exception):
    """Another lane of :meth:`SearchContext.concurrently` ended in an error: this one starts no more
    trials (the error is raised once all lanes have stopped)."""


@dataclass(frozen=True)
class Slot:
    """A place where a trial may run: the runner, and the device its trials are pinned to
    (``gpu:1``; None: the settings' device). A search with several slots runs up to that many
    independent trials at once (``--parallel``), each in its own slot."""

    runner: TrialRunner
    device: str | None = None

    def pin(self, spec: TrialSpec) -> TrialSpec:
        """``spec`` on this slot's device."""
        return spec if self.device is None else dataclasses.replace(spec, device=self.device)


#: How often a trial handed out through the store is looked at while it waits or runs
#: elsewhere.
SHARED_POLL_S = 0.5
#: With workers joining through the store, how many lanes may run at once (more than a fleet
#: of workers would want to start side by side; each costs a thread, not a process).
SHARED_LANES = 64

#: What a lane puts in the evaluator's outbox when it ends.
LANE_DONE = object()


class Evaluator:
    """Runs trials for the strategy, or recalls them from the session."""

    def __init__(
        self,
        session: TuningSession,
        source: ModelSource,
        settings: SearchSettings,
        on_event: Callable[[SearchEvent], None] | None = None,
        cancel: threading.Event | None = None,
        runner: TrialRunner = run_trial,
        memory_budget_mb: float | None = None,
        heartbeat: Heartbeat | None = None,
        start_ahead: StartAhead | None = None,
        slots: Sequence[Slot] | None = None,
        shared: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_gpu: bool = False,
    ) -> None:
        self.session = session
        #: the trials run on a GPU: without a budget the search gets the GPU's default one
        self.on_gpu = on_gpu
        #: the search's clock (a replay of a GPU's trials passes a simulated one)
        self.clock = clock
        #: trials go through the store, where ``mptune worker`` processes take them too
        self.shared = shared
        self._start_ahead = start_ahead
        self.heartbeat = heartbeat
        self.source = source
        self.settings = settings
        self._on_event = on_event or (lambda event: None)
        self.cancel = cancel
        self.memory_budget_mb = memory_budget_mb
        self.started = clock()
        #: each trial this search ran: its wall seconds and its probe's (0 without one)
        self.trial_seconds: list[tuple[float, float]] = []
        #: the search this evaluator serves (:meth:`serve`): its leader, what the leader's
        #: checks still need, and the rate under which a trial is pruned
        self.search: SearchState = _NoSearch()
        #: each setup's last trial's wall seconds, its probe taken out
        self.setup_seconds: dict[Setup, float] = {}
        #: every measurement by setup. Replaced, never changed in place, under the lock, so
        #: that a lane reading it while another adds to it reads a whole one.
        self.known: dict[Setup, list[Measured]] = {}
        self.closed_trials = 0
        #: the leader last passed on (:meth:`_tell_leader`)
        self._leader: LeaderChanged | None = None
        for stored in session.trials():
            # A trial that failed in the user's own code (raised, or hung or exited while the
            # model was built) is run again, neither recalled nor counted against the trial
            # budget: the model file may have been fixed since (that is how a search that ended
            # in the model's own error goes on). So is one that never finished (the search was
            # stopped or killed while it ran): it measured nothing, and a search stopped in its
            # last trial would otherwise resume to no trial at all.
            if stored.result is None or stored.result.model_failed:
                continue
            self.closed_trials += 1
            if stored.result is not None:
                self.known.setdefault(stored.result.spec.setup, []).append(
                    Measured(stored.number, stored.result, stored.stage)
                )
        self.recalled = sum(len(v) for v in self.known.values())
        self.ran = 0
        self.slots: tuple[Slot, ...] = tuple(slots) if slots else (Slot(runner),)
        self._free: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        for slot in self.slots:
            self._free.put(slot)
        self._lock = threading.Lock()
        self._inflight: dict[tuple[Setup, int], Future[Measured]] = {}
        #: the thread that called the search: events reach ``on_event`` on it
        self._owner = threading.get_ident()
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        #: set when a lane ended in an error: the other lanes start no more trials
        self.halted = threading.Event()

    @property
    def parallel(self) -> int:
        """How many trials may run at once: the slots, or with workers joining through the
        store (``shared``) as many as the search has independent trials."""
        return len(self.slots) if not self.shared else SHARED_LANES

    def on_search_thread(self) -> bool:
        """Whether this is the thread that called the search (not one of its lanes)."""
        return threading.get_ident() == self._owner

    def on_event(self, event: SearchEvent) -> None:
        """Pass ``event`` on: at once on the search's own thread; from a lane, through the
        outbox that :meth:`pump` empties on the search's thread."""
        if self.on_search_thread():
            self._on_event(event)
        else:
            self._outbox.put(event)

    def pump(self, lanes: int) -> None:
        """On the search's thread: pass on the lanes' events until ``lanes`` lanes ended."""
        while lanes:
            item = self._outbox.get()
            if item is LANE_DONE:
                lanes -= 1
            else:
                self._on_event(item)  # type: ignore[arg-type]

    def lane_done(self) -> None:
        self._outbox.put(LANE_DONE)

    def spec(self, setup: Setup) -> TrialSpec:
        probe = setup.policy != FLOAT32 and self.probed(setup.policy.name) is None
        return trial_spec(self.source, self.settings, setup, probe)

    def start_ahead(self, setups: Sequence[Setup]) -> None:
        """Let the runner start the fresh workers of these trials side by side, before the
        first of them runs; those already stored are left out, and one alone gains nothing."""
        todo = [s for s in dict.fromkeys(setups) if s not in self.known]
        # With several slots those trials run side by side anyway, each in its own slot.
        if self._start_ahead is not None and len(todo) > 1 and self.parallel == 1:
            self.on_event(
                StageStarted(
                    Stage.BASELINE,
                    f"starting {len(todo)} workers side by side (Python, TensorFlow), one per "
                    "policy",
                )
            )
            self._start_ahead([self.spec(s) for s in todo], self.cancel)

    def probed(self, policy: str) -> Measured | None:
        """The trial of ``policy`` in which the numerics probe ran, if one did."""
        for setup, runs in self.known.items():
            if setup.policy == policy:
                for m in runs:
                    if m.result.numerics:
                        return m
        return None

    def measure(self, setup: Setup, stage: str, repeat: int = 0) -> Measured:
        """The ``repeat``-th measurement of ``setup`` (0: the first), run only if not stored.
        Safe from several lanes at once: a measurement another lane is taking is waited for,
        not taken twice."""
        with self._lock:
            known = self.known.get(setup, [])
            if len(known) > repeat:
                return known[repeat]
            pending = self._inflight.get((setup, repeat))
            if pending is None:
                if self.halted.is_set():
                    raise LaneStopped
                self._check_budget(stage, setup)
                mine: Future[Measured] = Future()
                self._inflight[(setup, repeat)] = mine
        if pending is not None:
            return pending.result()
        try:
            measured = self._run(setup, stage)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(measured)
            return measured
        finally:
            with self._lock:
                del self._inflight[(setup, repeat)]

    def _run(self, setup: Setup, stage: str) -> Measured:
        """Run one trial of ``setup`` in the next free slot and store it."""
        spec = dataclasses.replace(
            self.spec(setup), prune_below=self.search.prune_below(setup, stage)
        )
        if self.cancel is not None and self.cancel.is_set():
            # Stopped between trials (a signal whose exception Python swallowed, say): no new
            # trial is opened only to be abandoned.
            raise TrialCancelled(spec.describe())
        if self.shared:
            return self._run_shared(setup, spec, stage)
        slot = self._free.get()  # blocks while every slot runs a trial
        try:
            if self.cancel is not None and self.cancel.is_set():
                raise TrialCancelled(spec.describe())  # stopped while this lane waited
            return self._run_in(slot, setup, slot.pin(spec), stage)
        finally:
            self._free.put(slot)

    def _run_in(
        self,
        slot: Slot,
        setup: Setup,
        spec: TrialSpec,
        stage: str,
        trial: optuna.Trial | None = None,
    ) -> Measured:
        """Run ``spec`` in ``slot``: in a new trial, or in ``trial`` (claimed from the store)."""
        if trial is None:
            trial = self.session.start_trial(spec, stage)
        self.on_event(TrialStarted(trial.number, stage, spec))
        t0 = self.clock()
        if self.heartbeat is not None:
            self.heartbeat.started(trial._trial_id)
        try:
            result = slot.runner(
                spec,
                lambda e: self.on_event(WorkerReported(trial.number, e)),
                cancel=self.cancel,
                source=self.source,
            )
        except (KeyboardInterrupt, TrialCancelled) as exc:
            stop = exc if isinstance(exc, KeyboardInterrupt) else getattr(self.cancel, "by", None)
            by = stop.name if isinstance(stop, Terminated) else "the user"
            self.session.abandon_trial(trial, f"stopped by {by}")
            raise
        except BaseException:
            self.session.abandon_trial(trial, "mptune failed while running this trial")
            raise
        finally:
            if self.heartbeat is not None:
                self.heartbeat.ended(trial._trial_id)
        number = self.session.finish_trial(trial, result)
        return self._record(setup, Measured(number, result, stage), self.clock() - t0)

    def _record(self, setup: Setup, measured: Measured, seconds: float) -> Measured:
        with self._lock:
            self.trial_seconds.append((seconds, measured.result.timings.probe_s or 0.0))
            self.setup_seconds[setup] = max(0.0, seconds - (measured.result.timings.probe_s or 0))
            self.ran += 1
            self.closed_trials += 1
            known = dict(self.known)
            known[setup] = [*known.get(setup, []), measured]
            self.known = known
        self.on_event(TrialFinished(measured.number, measured.stage, measured.result))
        self._tell_leader()
        return measured

    def _tell_leader(self) -> None:
        """Pass on the search's leader (:meth:`SearchState.leading`) when it or its figure
        moved: the faces mark it, and never a run the search does not stand on."""
        leading = self.search.leading()
        with self._lock:
            if leading is None or leading == self._leader:
                return
            self._leader = leading
        self.on_event(leading)

    # -- trials handed out through the store (mptune worker) --------------------------------
    def _run_shared(self, setup: Setup, spec: TrialSpec, stage: str) -> Measured:
        """Put the trial in the store as waiting and let the first taker run it: a free slot
        of this search, or an ``mptune worker`` of the same kind of machine. A trial whose
        worker stops sending its heartbeat (killed, its machine gone) ends ``crashed``, and
        the strategy runs it once more, like any crashed trial."""
        trial_id = self.session.enqueue_trial(spec, stage)
        t0 = self.clock()
        elsewhere = False  # a worker took it
        idle = threading.Event()
        while True:
            if self.cancel is not None and self.cancel.is_set():
                self.session.give_up(trial_id, "stopped by its search")
                raise TrialCancelled(spec.describe())
            if not elsewhere:
                try:
                    slot = self._free.get(timeout=SHARED_POLL_S)
                except queue.Empty:
                    slot = None
                if slot is not None:
                    try:
                        trial = self.session.claim(trial_id)
                        if trial is not None:
                            return self._run_in(slot, setup, slot.pin(spec), stage, trial)
                    finally:
                        self._free.put(slot)
            else:
                (self.cancel or idle).wait(SHARED_POLL_S)
            now, attrs = self.session.peek(trial_id)
            if now.state == "WAITING":
                continue
            if not elsewhere:
                elsewhere = True
                self.on_event(TrialStarted(now.number, stage, spec))
            if now.state != "RUNNING":
                result = stored_result(now, spec)
                return self._record(setup, Measured(now.number, result, stage), self.clock() - t0)
            if self.session.stale(trial_id):
                status, error = lost(
                    f"the mptune worker running it (pid {attrs.get('pid')} on "
                    f"{attrs.get('host')}) sent no heartbeat for {GRACE_S} s"
                )
                result = TrialResult(spec, status, error=error)
                if self.session.fail_stale(trial_id, result):
                    return self._record(
                        setup, Measured(now.number, result, stage), self.clock() - t0
                    )

    def serve(self, search: SearchState) -> None:
        """Serve ``search``: its leader and pruning decide this evaluator's budget checks and
        each trial's ``prune_below`` from now on."""
        self.search = search

    def cost(self, probe: bool = False) -> float:
        """What the next trial is expected to take, in seconds: the median of the trials this
        search ran, their probes taken out, and the median probe again when it will probe
        (a policy's first trial); 0 before any ran."""
        if not self.trial_seconds:
            return 0.0
        base = statistics.median(max(0.0, s - p) for s, p in self.trial_seconds)
        probes = [p for _, p in self.trial_seconds if p > 0]
        return base + (statistics.median(probes) if probe and probes else 0.0)

    def check_cost(self) -> float:
        """What a trial reserved for the leader's check is expected to take: the median trial,
        or the leader's own trial where that cost more."""
        leader = self.search.leader_setup()
        return max(self.cost(), self.setup_seconds.get(leader, 0.0) if leader else 0.0)

    def budget_s(self) -> float | None:
        """The time budget in seconds: ``--budget-minutes``, or on a GPU without either budget
        :data:`GPU_BUDGET_TRIALS` trials' cost (see there); None: open-ended."""
        s = self.settings
        if s.budget_minutes is not None:
            return s.budget_minutes * 60
        if s.max_trials is not None or not self.on_gpu:
            return None
        return min(GPU_BUDGET_MAX_S, max(GPU_BUDGET_MIN_S, GPU_BUDGET_TRIALS * self.cost()))

    def budgeted(self) -> bool:
        """Whether a budget (of time or trials) may end the search before its plan does."""
        return self.settings.max_trials is not None or self.budget_s() is not None

    def budget_words(self) -> str:
        """The time budget as the user reads it."""
        s = self.settings
        budget = self.budget_s()
        if s.budget_minutes is not None or budget is None:
            return f"the time budget of {s.budget_minutes:g} min"
        return (
            f"the default time budget on a GPU ({budget / 60:.0f} min, about "
            f"{GPU_BUDGET_TRIALS} trials; {setting('budget_minutes')} sets another)"
        )

    def seconds_left(self) -> float | None:
        """Time left in the budget (None: open-ended)."""
        budget = self.budget_s()
        return None if budget is None else max(0.0, budget - (self.clock() - self.started))

    def _check_budget(self, stage: str, setup: Setup) -> None:
        s = self.settings
        # The leader's checks keep their trials and time from every other stage: each priced as
        # the leader's own trial where it cost more than the median (a check at a large batch
        # compiles as long as the leader did: on a GPU the median trial left it too little).
        reserved = 0 if stage in CHECKS else self.search.reserved()
        kept = " (the rest is kept for the leading setup's check)" if reserved else ""
        # Trials running in other slots count: together they never pass the budget.
        running = self.closed_trials + len(self._inflight)
        if s.max_trials is not None and running + reserved >= s.max_trials:
            raise BudgetExhausted(f"the limit of {s.max_trials} trials was reached{kept}")
        budget = self.budget_s()
        if budget is not None:
            probe = self.spec(setup).probe
            needed = self.clock() - self.started + self.cost(probe) + reserved * self.check_cost()
            if needed > budget:
                raise BudgetExhausted(f"{self.budget_words()} was reached{kept}")
            # The stages after this one keep their first trials; the leader's check's extra
            # trial is priced as that check is (it compiles a batch size of its own).
            later, checks = (0, 0) if stage in CHECKS else self.search.kept_after(stage)
            kept_s = later * self.cost() + checks * self.check_cost()
            if kept_s and needed + kept_s > budget:
                raise StageCut(
                    f"the rest of {self.budget_words()} is kept for the stages after it "
                    f"(about {later + checks} trials)"
                )

    def over_memory_budget(self, m: Measured) -> bool:
        peak = m.result.peak_memory_mb
        return (
            self.memory_budget_mb is not None and peak is not None and peak > self.memory_budget_mb
        )


def trial_spec(
    source: ModelSource, settings: SearchSettings, setup: Setup, probe: bool = False
) -> TrialSpec:
    """The trial a search runs for ``setup``: its settings' warm-up (bounded in seconds),
    measuring time (at least
    the guard's window of steps), seed, time limit and device."""
    s = settings
    return TrialSpec(
        model=source.spec,
        setup=setup,
        warmup_steps=s.warmup_steps,
        warmup_seconds=s.warmup_seconds,
        measure_seconds=s.measure_seconds,
        min_steps=max(s.min_steps, s.guard_steps),
        min_steps_seconds=s.guard_seconds,
        seed=s.seed,
        timeout_s=s.timeout_s,
        device=s.device,
        probe=probe,
    )
