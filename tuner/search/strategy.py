"""mptune's search strategy, driven through a stored session.

The order of work (DESIGN.md, "Search, in outline"):

1. a float32 baseline at the starting batch size;
2. every other policy at that batch size, and on an NVIDIA GPU of compute capability 8.0 or
   later float32 with TF32 matmuls (a precision of its own, ``float32+tf32``) at the float32
   baseline's; a precision that is clearly behind on both speed and memory is abandoned there;
3. per remaining precision, a batch-size ladder up the rungs: stop at OOM, at the memory budget,
   or when throughput stops growing; go down when the first step up does not pay; refine
   between the last fit and the first OOM when throughput was still growing, or around the
   knee when it stopped growing (a trial that crashed or timed out is run once more before its
   rung counts as failed). With a global batch (``--global-batch B``) every setup keeps
   ``batch_size * gradient_accumulation_steps == B``: the ladder starts at B and goes down;
4. for mixed_float16, the loss-scale candidates at its chosen batch size;
5. the knobs, on each precision's pick: XLA (adopted only when faster beyond the noise), then
   steps per execution where the step is short enough for host overhead to show; then the
   leading picks' neighbourhoods (every knob combination at the pick's batch size, its knobs
   at the next batch size each way), since the knobs and the batch size interact; then a
   runoff among the leading pick and its setups that measured within the noise floor of it
   (and the setup a narrow neighbourhood move left), measured back to back in up to three turns and
   decided on the medians of their per-turn ratios (:class:`Paired`);
6. the numerical guard: each precision's best setup against IEEE float32 at the same batch size
   (and accumulation), seed and data (a float32 trial is run if there is none); float32's own
   best setup is picked after these, so that it knows every float32 trial;
7. the final: the leading precision's pick and a runner-up whose best figure comes within 15%
   of the leader's worst are measured back to back in up to three turns, and the
   recommendation decides between them on the median of their per-turn ratios, never calling
   a winner inside the noise.

Every trial goes through :class:`Evaluator`, which recalls a finished trial of the session
instead of running it again (so a resumed search continues where it stopped) and enforces the
trial and time budgets.
"""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tuner.errors import MptuneError
from tuner.policies import FLOAT32, JAX, MIXED_FLOAT16, TENSORFLOW, TORCH
from tuner.search.evaluator import (
    BudgetExhausted,
    Evaluator,
    LaneStopped,
)
from tuner.search.events import (
    PlanUpdated,
    StageStarted,
)
from tuner.search.measures import (
    Candidate,
    KnobTrial,
    Measured,
    Paired,
    SearchOutcome,
    choose,
    decide,
    first_ok,
    loss_gap,
    median_bounds,
    representative,
    settled,
)
from tuner.search.space import DeviceTraits, SearchSettings, SearchSpace
from tuner.search.stage import AFTER_STANDING, LATE_STAGES, Stage
from tuner.setup import LossScale, Setup
from tuner.trials.result import TrialStatus

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: A policy is abandoned at the starting batch when it is this much slower than the best...
ABANDON_SLOWER = 0.25
#: ...and does not use at least this much less memory per sample.
ABANDON_MEMORY = 0.05
#: Re-measure a runner-up whose figure is within this of the leader's.
REMEASURE_WITHIN = 0.15
#: A trial that ended like this may have been unlucky (a worker killed from outside, a stalled
#: machine), so it is run once more before its setup counts as failed. An OOM, a divergence or
#: an error in the user's code would only repeat: those are not retried.
RETRIED = frozenset({TrialStatus.CRASHED, TrialStatus.TIMEOUT})
_ENDED = {TrialStatus.CRASHED: "crashed", TrialStatus.TIMEOUT: "timed out"}

#: The precision of float32 storage with TensorFloat-32 matmuls (``Setup.precision``): tried as
#: a variant of float32 on NVIDIA GPUs of compute capability 8.0 and later, nowhere else.
TF32 = "float32+tf32"
#: Steps per execution is tried only when the pick's median step (``step_time_ms["p50"]``) is
#: shorter than this. Each ``train_function`` call costs the host about a millisecond (Python
#: dispatch of the compiled step, callbacks, fetching the logs), whatever the step does; running
#: several steps per call hides it. At 20 ms a step that millisecond is about 5% of the time,
#: just above the 3% noise floor; on a longer step the gain would be inside the noise, and the
#: trials would be spent for nothing.
SPE_STEP_MS = 20.0
#: The steps-per-execution rungs, walked up from 1 while each pays beyond the noise: 4 already
#: hides most of the per-call overhead, 16 nearly all of it.
SPE_LADDER = (4, 16)
#: How many times the search moves to a better neighbour of a pick (the next batch size each
#: way, every XLA x steps-per-execution combination); each move costs at most seven trials,
#: fewer where the knob stages measured them already.
NEIGHBOURHOOD_MOVES = 2
#: The runoff (:meth:`Search._runoff`): a leading pick and at most this many setups in all that
#: measured within the noise floor of it...
RUNOFF_SIZE = 3
#: ...measured back to back in at most this many turns (two when they settle it)...
RUNOFF_RUNS = 3
#: ...and the fastest on the ratios wins unless a simpler setup is within this of it. One
#: trial each cannot tell two setups 3% apart on a machine whose figures swing by more than
#: that between runs; the ratios of runs taken back to back, in up to this many turns, can, and
#: the choice between them then costs two or three trials a setup (bench/bench_search.py,
#: docs/search.md).
RUNOFF_MARGIN = 0.01
#: The setup the neighbourhood last moved away from joins its runoff when the move gained less
#: than this many noise floors: a move decided by one trial just past the floor is itself a
#: near tie (bench run 8 moved to a batch size on a 3.1% lead that its next run did not keep).
RUNOFF_MOVED_FLOORS = 2.0


def _unlucky_once(runs: Sequence[Measured]) -> bool:
    """One run, which crashed or timed out: it is owed its retry."""
    return len(runs) == 1 and runs[0].result.status in RETRIED


class Search:
    """One search over a space: call :meth:`run` for the outcome.

    Args:
        evaluator: runs and recalls trials.
        space: what to try.
        settings: objective, tolerances.
        device: what the trials run on: whether ``--xla auto`` tries XLA (a GPU) and whether
            TF32 exists (an NVIDIA GPU of compute capability 8.0 or later); a CPU when None.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        settings: SearchSettings,
        device: DeviceTraits | None = None,
    ) -> None:
        self.ev = evaluator
        self.space = space
        self.settings = settings
        self.device = device or DeviceTraits()
        self.abandoned: dict[str, str] = {}
        self.notes: list[str] = []
        self.baseline: Measured | None = None
        self.planned = 0
        #: policies the model is unsafe under, with the trial that found it
        self.unsafe: dict[str, Measured] = {}
        #: the precisions searched, in order: the space's policies, and float32+tf32 right
        #: after float32 where the device has TF32 (never elsewhere)
        self.precisions: list[str] = list(space.policies)
        if self.device.tf32 and FLOAT32 in self.precisions:
            self.precisions.insert(self.precisions.index(FLOAT32) + 1, TF32)
        #: precision -> (the pick its knob stages started from, the setup they adopted)
        self.adopted: dict[str, tuple[Setup, Measured]] = {}
        self.knobs: list[KnobTrial] = []
        self.knobs_skipped: dict[str, str] = {}
        #: a lane's own notes and knob findings (:meth:`_concurrently`)
        self._lane = threading.local()
        #: the setups measured in a runoff (:meth:`_runoff`)
        self.ran_off: set[Setup] = set()
        #: precision -> the setup its neighbourhood last moved away from, and the move's gain
        self.moved_from: dict[str, tuple[Measured, float]] = {}
        #: (stage, precision) -> the setups measured back to back there (:meth:`_turns`)
        self.paired: dict[tuple[str, str], Paired] = {}
        #: precision -> the smallest per-step batch above its fit that did not fit (global batch)
        self.failed_above: dict[str, int] = {}

    # -- progress ---------------------------------------------------------------------------
    def _plan(self, remaining: int) -> None:
        """Tell listeners how many trials are done and about how many are left."""
        done = self.ev.closed_trials
        self.planned = done + max(0, remaining)
        if self.settings.max_trials is not None:
            self.planned = min(self.planned, self.settings.max_trials)
        self.ev.on_event(PlanUpdated(done, self.planned))

    def _stage(self, name: str, message: str) -> None:
        self.ev.on_event(StageStarted(name, message))

    def _left(self, alive: list[str], ladders_left: int) -> int:
        """About how many trials are left with ``ladders_left`` ladders still to climb."""
        xla = 0 if self._xla_skipped() else len(alive)
        scales = 3 if MIXED_FLOAT16 in alive else 0
        return 3 * ladders_left + scales + xla + 2

    # -- the search -------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        stopped = None
        try:
            self._search()
        except BudgetExhausted as exc:
            stopped = str(exc)
            self.notes.append(f"stopped early: {exc}; the recommendation uses the trials so far")
        candidates = self._finalists_after_guard(allow_new_trials=stopped is None)
        if stopped is None:
            try:
                self._remeasure(candidates)
            except BudgetExhausted as exc:
                stopped = str(exc)
                self.notes.append(f"stopped before re-measuring: {exc}")
        return SearchOutcome(
            candidates,
            self.baseline,
            dict(self.abandoned),
            self.notes,
            stopped,
            dict(self.ev.known),
            self.ev.memory_budget_mb,
            list(self.knobs),
            dict(self.knobs_skipped),
            [self.paired[key] for key in sorted(self.paired, key=self._paired_order)],
        )

    def _paired_order(self, key: tuple[str, str]) -> tuple[int, int]:
        """Runoffs before the final, each in the order its trials ran."""
        return (key[0] == Stage.FINAL, min(self.paired[key].numbers(), default=0))

    def _search(self) -> None:
        start = self.space.start_batch
        policies = list(self.space.policies)
        first = FLOAT32 if FLOAT32 in policies else policies[0]
        self._plan(4 * len(self.precisions) + 4)
        self._stage(Stage.BASELINE, f"{first} at batch size {start}{self._accumulating(start)}")
        # Each precision's first trial starts a worker (the policy and TF32 are fixed in a
        # process): started side by side now, not one by one.
        self.ev.start_ahead(
            [self._at(Setup(first, start), start)]
            + [self._start_setup(p, start) for p in self.precisions if p != first]
        )
        self.baseline = self._fit(self._first_trial(first, start), Stage.BASELINE)

        self._stage(Stage.POLICIES, f"each policy at batch size {start}")
        baseline = self.baseline

        def at_start_of(precision: str) -> Measured:
            # TF32 is a variant of float32: at the batch size float32's baseline ran at.
            b = baseline.result.spec.batch_size if precision == TF32 else start
            setup = self._start_setup(precision, b)
            return self._fit(self._measure(setup, Stage.POLICIES), Stage.POLICIES)

        others = [p for p in self.precisions if p != first]
        at_start = {first: baseline} | dict(
            zip(others, self._concurrently(others, at_start_of), strict=True)
        )
        self._abandon_laggards(at_start)

        alive = [p for p in self.precisions if p not in self.abandoned]
        self._plan(self._left(alive, len(alive)))
        climbed: set[str] = set()

        def ladder(precision: str) -> None:
            self._stage(Stage.BATCH, f"batch-size ladder for {precision}")
            if self.space.global_batch is None:
                self._ladder(precision, at_start[precision])
            else:
                self._global_ladder(precision, at_start[precision])
            climbed.add(precision)
            self._plan(self._left(alive, len(alive) - len(climbed)))

        self._concurrently(alive, ladder)

        if MIXED_FLOAT16 in alive and self._base_pick(MIXED_FLOAT16) is not None:
            self._loss_scale_stage()
        self._knob_stages(alive)

    def _start_setup(self, precision: str, batch_size: int) -> Setup:
        """A precision's first setup in the policies stage."""
        if precision == TF32:
            return self._at(Setup(FLOAT32, batch_size, tf32=True), batch_size)
        return self._at(Setup(precision, batch_size), batch_size)

    def _note(self, text: str) -> None:
        notes = getattr(self._lane, "notes", self.notes)
        if text not in notes and text not in self.notes:  # a recalled retry is met again
            notes.append(text)

    def _knob(self, found: KnobTrial) -> None:
        getattr(self._lane, "knobs", self.knobs).append(found)

    def _concurrently(self, items: Iterable[T], work: Callable[[T], R]) -> list[R]:
        """``work`` on each item, each in a lane of its own when the evaluator has several
        slots (``--parallel``), else one after the other; the results in the items' order.

        Only where the items are independent of each other (the policies' ladders, the loss
        scales, a neighbourhood's setups): a result that decides the next step stays in
        sequence. The lanes' notes and knob findings join the search's in the items' order,
        and their events reach ``on_event`` on this thread, so a search in parallel reads the
        same as one in sequence. A lane that fails stops the others from starting trials; the
        first failure (in the items' order) is raised once every lane has stopped. A lane
        does not start lanes of its own."""
        todo = list(items)
        if self.ev.parallel == 1 or len(todo) < 2 or not self.ev.on_search_thread():
            return [work(x) for x in todo]
        results: list[R | None] = [None] * len(todo)
        errors: list[tuple[int, BaseException]] = []
        notes: list[list[str]] = [[] for _ in todo]
        knobs: list[list[KnobTrial]] = [[] for _ in todo]

        def lane(i: int, item: T) -> None:
            self._lane.notes, self._lane.knobs = notes[i], knobs[i]
            try:
                results[i] = work(item)
            except LaneStopped:
                pass
            except BaseException as exc:  # noqa: BLE001 - raised on the search's thread
                errors.append((i, exc))
                self.ev.halted.set()
            finally:
                self.ev.lane_done()

        threads = [
            threading.Thread(target=lane, args=(i, x), name=f"mptune-lane-{i}", daemon=True)
            for i, x in enumerate(todo)
        ]
        for t in threads:
            t.start()
        try:
            self.ev.pump(len(threads))
        except BaseException:
            # Ctrl-C or a stop signal on this thread: stop the lanes' trials, then go.
            if self.ev.cancel is not None:
                self.ev.cancel.set()
            self.ev.halted.set()
            raise
        finally:
            for t in threads:
                t.join()
        for lane_notes, lane_knobs in zip(notes, knobs, strict=True):
            for text in lane_notes:
                self._note(text)
            self.knobs.extend(lane_knobs)
        if errors:
            self.ev.halted.clear()
            raise min(errors, key=lambda e: e[0])[1]
        return results  # type: ignore[return-value]

    def _measure(self, setup: Setup, stage: str, repeat: int = 0) -> Measured:
        """The ``repeat``-th measurement of ``setup``; one that crashed or timed out is run
        once more (``repeat + 1``), and that second run is returned. Recalled trials come back
        the same way, so a resumed search takes the same path."""
        m = self.ev.measure(setup, stage, repeat=repeat)
        if m.result.status not in RETRIED:
            return m
        again = self.ev.measure(setup, stage, repeat=repeat + 1)
        if again.result.ok:
            self._note(f"{_where(setup)} {_ENDED[m.result.status]}, ran again: ok")
        return again

    def _failure(self, m: Measured) -> str:
        """How ``m`` failed, counting the run before it when ``m`` was its retry: ``oom``,
        ``crashed twice``, ``timed out, then crashed``."""
        runs = self.ev.known.get(m.result.spec.setup, [])
        index = next((i for i, r in enumerate(runs) if r.number == m.number), 0)
        status = m.result.status
        before = runs[index - 1].result.status if index > 0 else None
        if before not in RETRIED or status is TrialStatus.OK:
            return status.value
        assert before is not None
        if status is before:
            return f"{_ENDED[before]} twice"
        return f"{_ENDED[before]}, then {_ENDED.get(status, status.value)}"

    def _recall_or_measure(
        self, setup: Setup, stage: str, allow_new_trials: bool
    ) -> Measured | None:
        """The stored run that stands for ``setup``, or a new measurement (with its retry) when
        there is none and new trials are allowed; None when neither."""
        runs = self.ev.known.get(setup, [])
        if runs and not (allow_new_trials and _unlucky_once(runs)):
            return representative(runs)
        if not allow_new_trials:
            return None
        try:
            return self._measure(setup, stage)
        except BudgetExhausted:
            return representative(runs) if runs else None

    def _first_trial(self, policy: str, batch_size: int) -> Measured:
        m = self._measure(self._at(Setup(policy, batch_size), batch_size), Stage.BASELINE)
        if m.result.status is TrialStatus.USER_ERROR:
            err = m.result.error
            where = f"{err.location}: " if err and err.location else ""
            raise MptuneError(
                f"the model fails in its own code, so no search can run: "
                f"{where}{err.message if err else 'unknown error'}"
            )
        return m

    # -- batch sizes and the global batch ---------------------------------------------------
    def _acc(self, batch_size: int) -> int:
        """The accumulation steps that keep the global batch at ``batch_size`` (1 without
        one)."""
        return self.space.global_batch // batch_size if self.space.global_batch else 1

    def _at(self, setup: Setup, batch_size: int) -> Setup:
        """``setup`` at ``batch_size``, with the accumulation that keeps the global batch."""
        return setup.replace(
            batch_size=batch_size,
            gradient_accumulation_steps=self._acc(batch_size),
            backend=self.settings.backend,
        )

    def _accumulating(self, batch_size: int) -> str:
        acc = self._acc(batch_size)
        return f" x {acc} accumulation steps" if acc > 1 else ""

    def _fits(self, m: Measured) -> bool:
        """Ran ok within the memory budget."""
        return m.result.ok and not self.ev.over_memory_budget(m)

    def _too_big(self, m: Measured) -> bool:
        """Did not fit: out of memory, or over the memory budget."""
        return m.result.status is TrialStatus.OOM or (m.result.ok and self.ev.over_memory_budget(m))

    def _below(self, batch_size: int) -> int | None:
        """The next rung down: the largest at most half of ``batch_size``."""
        return max((r for r in self.space.rungs() if r <= batch_size // 2), default=None)

    def _fit(self, m: Measured, stage: str) -> Measured:
        """With a global batch: ``m``, or when it did not fit (out of memory, or over the
        memory budget) the first smaller per-step batch that does, halving down the divisors of
        the global batch (more accumulation steps, the same samples per update). Without one:
        ``m`` as it is."""
        global_batch = self.space.global_batch
        if global_batch is None:
            return m
        setup = m.result.spec.setup
        while self._too_big(m):
            b = m.result.spec.batch_size
            self.failed_above[setup.precision] = b
            why = "over the memory budget" if m.result.ok else self._failure(m)
            lower = self._below(b)
            if lower is None:
                self._note(
                    f"{setup.precision}: batch size {b} {why}; no smaller per-step batch "
                    f"divides the global batch {global_batch}"
                )
                return m
            self._note(
                f"{setup.precision}: batch size {b} {why}; trying batch size {lower} with "
                f"{global_batch // lower} accumulation steps (global batch {global_batch} kept)"
            )
            m = self._measure(self._at(setup, lower), stage)
        return m

    # -- picks ------------------------------------------------------------------------------
    def usable(self, precision: str) -> list[Measured]:
        """Every setup of ``precision`` (``Setup.precision``) that ran ok within the memory
        budget (first ok runs)."""
        firsts = [
            first_ok(runs) for setup, runs in self.ev.known.items() if setup.precision == precision
        ]
        return [m for m in firsts if m is not None and not self.ev.over_memory_budget(m)]

    def _base_pick(self, precision: str, late: bool = False) -> Measured | None:
        """The precision's best setup with the default knobs (no XLA, one step per execution)
        for the objective, over the batch sizes and loss scales measured. ``late``: counting
        the guard's and the re-measuring stage's trials (float32's final pick); else without
        them, as the search met them before those stages (a resumed search knows them early)."""
        plain = [
            m
            for m in self.usable(precision)
            if _plain(m.result.spec.setup) and (late or m.stage not in LATE_STAGES)
        ]
        return choose(plain, self.settings)

    def pick(self, precision: str) -> Candidate | None:
        """The precision's best setup: its best default-knob setup, or the setup its knob stages
        adopted on it. A knob variant that did not win its stage is never the pick."""
        late = precision == FLOAT32
        chosen = self._base_pick(precision, late)
        adopted = self.adopted.get(precision)
        if adopted is not None:
            started_from, knobbed = adopted
            if chosen is None or chosen.result.spec.setup == started_from:
                chosen = knobbed
            else:
                # float32's guard references found a better batch size after its knob stages
                # ran: the better of the two.
                chosen = choose([chosen, knobbed], self.settings)
        if chosen is None:
            return None
        setup = chosen.result.spec.setup
        if setup in self.ran_off:  # it stands on its runoff's runs
            return Candidate(setup, self._ran_off_runs(setup) or [chosen])
        return Candidate(setup, [chosen])

    def _abandon_laggards(self, at_start: dict[str, Measured]) -> None:
        usable = {p: m for p, m in at_start.items() if m.result.ok}
        for policy, m in at_start.items():
            if m.result.status is TrialStatus.UNSAFE:
                self.unsafe[policy] = m
                self.abandoned[policy] = _unsafe_text(m, self.baseline)
            elif not m.result.ok:
                self.abandoned[policy] = (
                    f"{self._failure(m)} at batch size "
                    f"{m.result.spec.batch_size}: "
                    f"{m.result.error.message if m.result.error else ''}"
                )
        if not usable:
            return
        fastest = max(m.speed for m in usable.values())
        leanest = min(m.memory_per_sample for m in usable.values())
        for policy, m in usable.items():
            if policy == FLOAT32:
                continue  # the baseline and the guard's reference is never dropped
            slower = m.speed < (1 - ABANDON_SLOWER) * fastest
            no_memory_gain = (
                m.memory_per_sample >= (1 - ABANDON_MEMORY) * leanest
                if math.isfinite(leanest)
                else True
            )
            if slower and (no_memory_gain or self.settings.objective == "speed"):
                self.abandoned[policy] = (
                    f"clearly behind at batch size {m.result.spec.batch_size}: "
                    f"{m.speed / fastest:.2f}x the fastest policy's throughput"
                    + ("" if not no_memory_gain else " and no memory saving")
                )

    def _ladder(self, precision: str, first: Measured) -> None:
        rungs = self.space.rungs()
        base = first.result.spec.setup
        stage = Stage.BATCH
        start_index = rungs.index(base.batch_size)
        best = first
        seen = {base.batch_size: first}  # the rungs this ladder measured, not what else is known
        failed_at: int | None = None
        growth = 0.0
        stalled = False
        for b in rungs[start_index + 1 :]:
            m = self._measure(self._at(base, b), stage)
            seen[b] = m
            if not self._fits(m):
                failed_at = b
                why = "over the memory budget" if m.result.ok else self._failure(m)
                self._note(f"{precision}: batch size {b} {why}; larger batches skipped")
                break
            gain = m.speed / best.speed - 1 if best.speed else math.inf
            if gain < self.settings.noise_floor:
                if m.speed > best.speed:
                    best = m
                stalled = True
                break
            best, growth = m, gain
        if best is first and start_index > 0:
            # Going up did not pay: see whether a smaller batch is faster.
            for b in reversed(rungs[:start_index]):
                m = self._measure(self._at(base, b), stage)
                seen[b] = m
                if not m.result.ok:
                    self._note(
                        f"{precision}: batch size {b} {self._failure(m)}; smaller batches skipped"
                    )
                    break
                if m.speed < best.speed * (1 + self.settings.noise_floor):
                    break
                best = m
        if not self.space.refine:
            return
        if failed_at is not None and growth > 0.10 and best.result.spec.batch_size < failed_at:
            middle = _multiple_of_8((best.result.spec.batch_size + failed_at) // 2)
            if best.result.spec.batch_size < middle < failed_at:
                self._measure(self._at(base, middle), Stage.REFINE)
        elif stalled:
            self._refine_knee(base, best, seen)

    def _refine_knee(self, base: Setup, best: Measured, seen: dict[int, Measured]) -> None:
        """The ladder stopped because throughput stopped growing: the peak may lie between the
        best rung and a neighbour. Try the multiple of 8 midway to the faster neighbour; when it
        beats the best rung beyond the noise, one more midway step on towards that neighbour.
        At most two trials."""
        b = best.result.spec.batch_size
        below = max((s for s in seen if s < b), default=None)
        above = min((s for s in seen if s > b), default=None)
        near = [seen[s] for s in (below, above) if s is not None and self._fits(seen[s])]
        if not near:
            return
        target = max(near, key=lambda m: (m.speed, m.result.spec.batch_size)).result.spec
        for _ in range(2):
            middle = _multiple_of_8((b + target.batch_size) // 2)
            if not min(b, target.batch_size) < middle < max(b, target.batch_size):
                return
            m = self._measure(self._at(base, middle), Stage.REFINE)
            if not self._fits(m) or m.speed <= best.speed * (1 + self.settings.noise_floor):
                return
            best, b = m, middle

    def _global_ladder(self, precision: str, fit: Measured) -> None:
        """With a global batch: the policies stage found the largest per-step batch that fits
        (from the global batch down). Refine between it and the smallest that did not fit, then
        walk down (a smaller step can be faster on some hardware) while it pays beyond the
        noise. Every setup keeps ``batch_size * gradient_accumulation_steps`` at the global
        batch."""
        if not self._fits(fit):
            return
        base = fit.result.spec.setup
        size = base.batch_size
        best = fit
        failed = self.failed_above.get(precision)
        if self.space.refine and failed is not None:
            between = [r for r in self.space.rungs() if size < r < failed]
            if between:
                middle = min(between, key=lambda r: (abs(2 * r - size - failed), r))
                m = self._measure(self._at(base, middle), Stage.REFINE)
                if self._fits(m) and m.speed > best.speed:
                    best = m
        while (lower := self._below(size)) is not None:
            m = self._measure(self._at(base, lower), Stage.BATCH)
            if not m.result.ok:
                self._note(
                    f"{precision}: batch size {lower} {self._failure(m)}; smaller batches skipped"
                )
                break
            if m.speed <= best.speed * (1 + self.settings.noise_floor):
                break
            best, size = m, lower

    def _loss_scale_stage(self) -> None:
        pick = self._base_pick(MIXED_FLOAT16)
        assert pick is not None
        cand = Candidate(pick.result.spec.setup, [pick])
        others = [s for s in self.space.loss_scales if s != cand.setup.loss_scale]
        if not others:
            return
        self._stage(
            Stage.LOSS_SCALE, f"loss scales for mixed_float16 at batch size {cand.setup.batch_size}"
        )
        evidence = self.ev.probed(MIXED_FLOAT16)
        numerics = evidence.result.numerics if evidence is not None else {}
        shares = numerics.get("flush_share") or {}
        if "1" in shares:
            self._note(
                f"numerics probe (trial #{evidence.number if evidence else '?'}): without loss "
                f"scaling {shares['1']:.2%} of float32's gradient values would flush to zero "
                "in float16"
            )

        def one(scale: LossScale) -> None:
            limit = numerics.get("overflow_scale")
            if scale.kind == "fixed" and limit and scale.value and scale.value > limit:
                self._note(
                    f"mixed_float16 with loss scale {scale}: not run; the numerics probe's "
                    f"largest gradient ({numerics.get('grad_max', 0):.3g}) times {scale.value:g} "
                    "passes float16's 65,504, so every step would overflow and a fixed scale "
                    "never skips a step"
                )
                return
            m = self._measure(cand.setup.replace(loss_scale=scale), Stage.LOSS_SCALE)
            r = m.result
            if not r.ok:
                self._note(
                    f"mixed_float16 with loss scale {scale}: {self._failure(m)}"
                    + (f" ({r.error.message})" if r.error else "")
                )
                return
            if r.skipped_steps > 0.1 * max(1, r.steps_completed):
                self._note(
                    f"mixed_float16 with loss scale {scale}: {r.skipped_steps} of "
                    f"{r.steps_completed} steps skipped"
                )

        self._concurrently(others, one)

    # -- knobs ------------------------------------------------------------------------------
    def _xla_skipped(self) -> str | None:
        """Why no precision tries XLA, or None when the XLA stage runs."""
        if "xla" in self.knobs_skipped:
            return self.knobs_skipped["xla"]
        if self.settings.backend == JAX:
            return "JAX compiles every training step with XLA already"
        if self.space.xla == "off":
            return "--xla off"
        if self.space.xla == "auto" and not self.device.gpu:
            return "--xla auto tries XLA on a GPU only, and the trials ran on the CPU"
        return None

    def _knob_stages(self, alive: list[str]) -> None:
        """The knobs, on each surviving precision's pick: XLA, then steps per execution. A knob
        is adopted only when it pays beyond the noise floor; the pick is then what was
        adopted."""
        skipped = self._xla_skipped()
        if skipped:
            self.knobs_skipped["xla"] = skipped

        def knobs(precision: str) -> tuple[Measured, Measured] | None:
            base = self._base_pick(precision)
            if base is None:
                return None
            current = self._xla_stage(precision, base)
            current = self._spe_stage(precision, current)
            return base, current

        found = zip(alive, self._concurrently(alive, knobs), strict=True)
        picks = {precision: pair for precision, pair in found if pair is not None}
        # The knobs and the batch size interact (XLA can lose at one step size and win with
        # several steps per call, or at a smaller batch): the leading picks look around them.
        self._confirm_leader(picks)
        speeds = {p: self._standing(current)[0] for p, (_, current) in picks.items()}
        fastest = max(speeds.values(), default=0.0)

        def around(precision: str) -> None:
            base, current = picks[precision]
            if speeds[precision] >= (1 - REMEASURE_WITHIN) * fastest:
                current = self._neighbourhood(precision, current)
                current = self._runoff(precision, current)
            if current is not base:
                self.adopted[precision] = (base.result.spec.setup, current)

        self._concurrently(list(picks), around)

    def _confirm_leader(self, picks: dict[str, tuple[Measured, Measured]]) -> None:
        """Measure the fastest pick once more, so that it stands on the median of its runs
        (:meth:`_standing`) in choosing which picks look around them and in what its own
        neighbours must beat.

        One measurement can be luck (on this project's CPU one setup swings up to 2x between
        runs), and the fastest pick is the one most likely to owe its place to it. The
        re-measurement is the one the remeasure stage takes next when this pick still leads
        there, so it is recalled then, not run again."""
        if not picks:
            return
        current = max((current for _, current in picks.values()), key=lambda m: m.speed)
        stored = [r.number for r in self.ev.known.get(current.result.spec.setup, [])]
        at = stored.index(current.number) if current.number in stored else len(stored) - 1
        leader = current.result.spec.setup.precision
        self._stage(Stage.REMEASURE, f"confirming {leader}'s lead before looking around the picks")
        self._measure(current.result.spec.setup, Stage.REMEASURE, repeat=at + 1)

    def _neighbours(self, precision: str, center: Measured) -> list[Setup]:
        """Around ``center``: the next batch size down and up (the ladder's rungs and, with
        refinement, the multiples of 8 halfway between) with its knobs, and every combination
        of XLA (where it is searched and this precision ran it) and steps per execution (where
        the step is short enough for it to matter) at its batch size."""
        setup = center.result.spec.setup
        rungs = list(self.space.batch_sizes)
        sizes = set(rungs)
        if self.space.refine and self.space.global_batch is None:
            sizes |= {_multiple_of_8((a + b) // 2) for a, b in itertools.pairwise(rungs)}
        ordered = sorted(sizes)
        # Never up to a batch size that did not fit; never up at all past one that crashed or
        # timed out (its ladder ended there, as the notes say).
        ceiling: float = math.inf
        for s, runs in self.ev.known.items():
            if s.precision != precision or not runs or s.batch_size <= setup.batch_size:
                continue
            if self._too_big(runs[-1]):
                ceiling = min(ceiling, s.batch_size)
            elif not runs[-1].result.ok:
                ceiling = setup.batch_size
        found: list[Setup] = []
        smaller = [b for b in ordered if b < setup.batch_size]
        larger = [b for b in ordered if setup.batch_size < b < ceiling]
        for batch in ([smaller[-1]] if smaller else []) + ([larger[0]] if larger else []):
            found.append(self._at(setup, batch))
        xla_failed = any(
            k.precision == precision and k.knob == "xla" and k.status not in (None, "ok")
            for k in self.knobs
        )
        xlas = (False, True) if not self._xla_skipped() and not xla_failed else (setup.xla,)
        p50 = center.result.step_time_ms.get("p50")
        short = p50 is not None and p50 * setup.steps_per_execution < SPE_STEP_MS
        spes = (
            (1, *SPE_LADDER)
            if (short or setup.steps_per_execution > 1) and setup.backend != TORCH
            else (1,)
        )
        # The knobs are few: every combination at the pick's batch size (most were measured by
        # the knob stages already, and are recalled, not run again).
        for xla in xlas:
            for spe in spes:
                found.append(setup.replace(xla=xla, steps_per_execution=spe))
        return [s for s in dict.fromkeys(found) if s != setup]

    def _neighbourhood(self, precision: str, center: Measured) -> Measured:
        """Move to the best neighbour (:meth:`_neighbours`) while it is faster than the center
        beyond the noise floor, at most :data:`NEIGHBOURHOOD_MOVES` times; each setup stands
        on :meth:`_standing`."""
        speed, behind = self._standing(center)
        for _ in range(NEIGHBOURHOOD_MOVES):
            setups = self._neighbours(precision, center)
            if not setups:
                break
            self._stage(
                Stage.NEIGHBOURHOOD,
                f"around {precision}'s pick ({center.result.spec.setup.label}): "
                "batch size, XLA and steps per execution together",
            )
            tried = self._concurrently(setups, lambda s: self._measure(s, Stage.NEIGHBOURHOOD))
            scored = [(self._standing(m), m) for m in tried if self._fits(m)]
            if not scored:
                break
            (best_speed, best_behind), best = max(scored, key=lambda x: x[0][0])
            if best_speed <= speed * (1 + self.settings.noise_floor):
                break
            trials = (*behind, *best_behind)
            self._note(
                f"{precision}: {best.result.spec.setup.label} beat "
                f"{center.result.spec.setup.label} by {best_speed / speed - 1:.0%} "
                f"(trials {', '.join(f'#{n}' for n in trials)})"
            )
            self._knob(
                KnobTrial(
                    precision,
                    "neighbourhood",
                    center.result.spec.setup,
                    best.result.spec.setup,
                    speed,
                    best_speed,
                    trials,
                    True,
                    "ok",
                )
            )
            self.moved_from[precision] = (center, best_speed / speed)  # one lane a precision
            center, speed, behind = best, best_speed, best_behind
        return center

    def _runoff(self, precision: str, center: Measured) -> Measured:
        """Decide between ``center`` and the setups of ``precision`` that measured within the
        noise floor of it (either side; the nearest first, :data:`RUNOFF_SIZE` in all), and
        the setup a narrow neighbourhood move left (:data:`RUNOFF_MOVED_FLOORS`): measured
        back to back in :data:`RUNOFF_RUNS` turns (:meth:`_turns`), each compared with
        ``center`` on the median of its per-turn ratios. The fastest wins, unless a simpler
        setup is within :data:`RUNOFF_MARGIN` of it. Only for the speed objective: memory per
        sample does not swing between runs."""
        if self.settings.objective != "speed":
            return center
        speed, _ = self._standing(center)
        floor = self.settings.noise_floor
        here = center.result.spec.setup
        near = [
            m
            for m in self.usable(precision)
            if m.result.spec.setup != here
            and m.stage not in AFTER_STANDING  # after the runoff in a search not stopped
            and self._fits(m)
            and abs(self._standing(m)[0] - speed) <= floor * speed
        ]
        near.sort(key=lambda m: abs(self._standing(m)[0] - speed))
        finalists = [center, *near[: RUNOFF_SIZE - 1]]
        left = self.moved_from.get(precision)
        if (
            left is not None
            and left[1] <= 1 + RUNOFF_MOVED_FLOORS * floor
            and left[0].result.spec.setup not in {m.result.spec.setup for m in finalists}
        ):
            # The move that made ``center`` the pick won on one trial by a hair: the setup
            # it left is as near a tie as any, whatever its figure now.
            finalists = [*finalists[: RUNOFF_SIZE - 1], left[0]]
        if len(finalists) < 2:
            return center
        setups = [m.result.spec.setup for m in finalists]
        self._stage(
            Stage.RUNOFF,
            f"{precision}: {and_join([s.label for s in setups])} measured within "
            f"{floor:.0%} of each other; {RUNOFF_RUNS} turns back to back",
        )
        self.ran_off.update(setups)
        paired = self._turns(setups, Stage.RUNOFF, RUNOFF_RUNS, RUNOFF_MARGIN)
        self.paired[(Stage.RUNOFF, precision)] = paired
        ratios = {s: paired.ratio(here, s) for s in setups}  # ``here`` itself: 1.0
        valid = {s: r for s, r in ratios.items() if r is not None}
        if len(valid) < 2:
            return center
        winner = decide(valid, RUNOFF_MARGIN)
        standing = self._ran_off_runs(winner)
        if winner == here or not standing:
            return center
        ratio = valid[winner]
        turns = paired.numbers(here, winner)
        self._note(
            f"{precision}: {winner.label} beat {here.label} in a runoff, {ratio - 1:.1%} on "
            f"the median of {len(paired.ratios(here, winner))} turns back to back (trials "
            f"{', '.join(f'#{n}' for n in turns)})"
        )
        base_speed = statistics.median(r.speed for r in self._ran_off_runs(here) or [center])
        self._knob(
            KnobTrial(
                precision,
                "runoff",
                here,
                winner,
                base_speed,
                base_speed * ratio,
                turns,
                True,
                "ok",
            )
        )
        return standing[0]

    def _ran_off_runs(self, setup: Setup) -> list[Measured]:
        """``setup``'s ok runs in its runoff: what it stands on after one."""
        return [r for r in self.ev.known.get(setup, []) if r.result.ok and r.stage == Stage.RUNOFF]

    def _turns(
        self, setups: Sequence[Setup], stage: str, turns: int, margin: float | None = None
    ) -> Paired:
        """Measure ``setups`` back to back, up to ``turns`` times: each turn runs every setup
        once, in the reverse order of the turn before (so that a machine slowing or speeding
        up within a turn favours none of them). Each turn's run is a new measurement, never
        one taken earlier at another moment: a setup's runs in ``stage`` start after the runs
        it had before the stage (counted from its first run in ``stage``, so that a resumed
        search recalls the same trials), and a crashed run's retry stands in for it. With
        ``margin``, the turns stop early once the turns left cannot change what
        :func:`decide` chooses on the medians of the ratios (:func:`settled`): two turns that
        agree decide between two setups far apart, and the third runs only for a close
        call."""
        nxt: dict[Setup, int] = {}
        for s in setups:
            runs = self.ev.known.get(s, [])
            nxt[s] = next((i for i, r in enumerate(runs) if r.stage == stage), len(runs))
        speeds: list[tuple[float, ...]] = []
        numbers: list[tuple[int, ...]] = []
        for turn in range(turns):
            order = list(setups) if turn % 2 == 0 else list(reversed(setups))

            def one(s: Setup) -> Measured:
                return self._measure(s, stage, nxt[s])

            ran = dict(zip(order, self._concurrently(order, one), strict=True))
            for s, m in ran.items():
                nxt[s] = [r.number for r in self.ev.known[s]].index(m.number) + 1
            speeds.append(tuple(ran[s].speed if ran[s].result.ok else 0.0 for s in setups))
            numbers.append(tuple(ran[s].number for s in setups))
            so_far = Paired(stage, tuple(setups), tuple(speeds), tuple(numbers))
            if margin is not None and turn + 1 < turns:
                bounds = median_bounds(so_far, turns)
                if bounds is not None and settled(bounds, margin):
                    break
        return Paired(stage, tuple(setups), tuple(speeds), tuple(numbers))

    def _standing(self, m: Measured) -> tuple[float, tuple[int, ...]]:
        """What ``m``'s setup stands on: the median of its runs that ended ok when it ran more
        than once (a confirmed leader, a re-measured one), else ``m``'s own figure."""
        runs = [
            r
            for r in self.ev.known.get(m.result.spec.setup, [])
            if r.result.ok and r.stage not in AFTER_STANDING
        ]
        if len(runs) < 2:
            return m.speed, (m.number,)
        return statistics.median(r.speed for r in runs), tuple(r.number for r in runs)

    def _xla_stage(self, precision: str, base: Measured) -> Measured:
        """``base`` with XLA when that is faster beyond the noise floor, else ``base``. A model
        XLA cannot compile (``unsupported``) ends XLA for every precision; another failure
        ends it for this one."""
        if self._xla_skipped():
            return base
        setup = base.result.spec.setup
        tried = setup.replace(xla=True)
        self._stage(Stage.XLA, f"XLA for {precision} at batch size {setup.batch_size}")
        m = self._measure(tried, Stage.XLA)
        r = m.result
        trials = (base.number, m.number)
        if not self._fits(m):
            why = "over the memory budget" if r.ok else self._failure(m)
            message = r.error.message if r.error and not r.ok else ""
            self._knob(
                KnobTrial(
                    precision,
                    "xla",
                    setup,
                    tried,
                    base.speed,
                    None,
                    trials,
                    status=r.status.value,
                    reason=message or why,
                )
            )
            detail = f" ({message})" if message else ""
            if r.status is TrialStatus.UNSUPPORTED:
                self.knobs_skipped["xla"] = (
                    f"the model does not compile under XLA (trial #{m.number}{detail})"
                )
                self._note(
                    f"XLA: {precision} at batch size {setup.batch_size} is unsupported"
                    f"{detail}; the search goes on without XLA"
                )
            else:
                self._note(
                    f"XLA: {precision} at batch size {setup.batch_size} {why}{detail}; "
                    f"{precision} goes on without XLA"
                )
            return base
        adopted = m.speed > base.speed * (1 + self.settings.noise_floor)
        self._knob(
            KnobTrial(precision, "xla", setup, tried, base.speed, m.speed, trials, adopted, "ok")
        )
        return m if adopted else base

    def _spe_stage(self, precision: str, current: Measured) -> Measured:
        """Steps per execution up :data:`SPE_LADDER` from ``current``, while each rung is faster
        beyond the noise floor; run only when the median step is under :data:`SPE_STEP_MS`,
        where the host's per-call overhead shows."""
        p50 = current.result.step_time_ms.get("p50")
        if self.settings.backend == TORCH or p50 is None or not p50 < SPE_STEP_MS:
            reason = (
                "Keras runs one step per execution on the torch backend"
                if self.settings.backend == TORCH
                else "no step time was measured"
                if p50 is None
                else f"the median step takes {p50:.1f} ms, not under {SPE_STEP_MS:g} ms, so "
                "the host's per-call overhead is inside the noise"
            )
            self._knob(
                KnobTrial(
                    precision,
                    "steps_per_execution",
                    current.result.spec.setup,
                    None,
                    current.speed,
                    trials=(current.number,),
                    reason=reason,
                )
            )
            return current
        self._stage(
            Stage.STEPS_PER_EXECUTION,
            f"steps per execution for {precision} (median step {p50:.1f} ms)",
        )
        for steps in SPE_LADDER:
            setup = current.result.spec.setup
            if steps <= setup.steps_per_execution:
                continue
            tried = setup.replace(steps_per_execution=steps)
            m = self._measure(tried, Stage.STEPS_PER_EXECUTION)
            trials = (current.number, m.number)
            if not self._fits(m):
                r = m.result
                why = "over the memory budget" if r.ok else self._failure(m)
                message = r.error.message if r.error and not r.ok else ""
                self._knob(
                    KnobTrial(
                        precision,
                        "steps_per_execution",
                        setup,
                        tried,
                        current.speed,
                        None,
                        trials,
                        status=r.status.value,
                        reason=message or why,
                    )
                )
                self._note(
                    f"{precision} with {steps} steps per execution: {why}"
                    + (f" ({message})" if message else "")
                )
                break
            adopted = m.speed > current.speed * (1 + self.settings.noise_floor)
            self._knob(
                KnobTrial(
                    precision,
                    "steps_per_execution",
                    setup,
                    tried,
                    current.speed,
                    m.speed,
                    trials,
                    adopted,
                    "ok",
                )
            )
            if not adopted:
                break
            current = m
        return current

    # -- guard and noise --------------------------------------------------------------------
    def _finalists_after_guard(self, allow_new_trials: bool) -> list[Candidate]:
        """Each precision's best setup, all but IEEE float32 checked against it. float32 is
        picked last: the guard may run float32 at batch sizes its own ladder never reached, and
        the float32 candidate (what a speed-up is stated against) must know every float32
        trial."""
        others = {p: c for p in self.precisions if p != FLOAT32 and (c := self.pick(p)) is not None}
        self._concurrently(others.values(), lambda cand: self._guard(cand, allow_new_trials))
        f32 = self.pick(FLOAT32) if FLOAT32 in self.precisions else None
        if f32 is not None:
            f32.loss_gap = 0.0
        for policy, m in self.unsafe.items():
            # Never recommended; its figures (taken with the fix applied) still say what the
            # policy would gain once the model is fixed.
            runs = [m] if m.result.samples_per_second else []
            others[policy] = Candidate(
                m.result.spec.setup, runs, rejected=_unsafe_text(m, self.baseline)
            )
        finalists = [f32 if p == FLOAT32 else others.get(p) for p in self.precisions]
        return [c for c in finalists if c is not None]

    def _guard(self, cand: Candidate, allow_new_trials: bool) -> None:
        """Compare a candidate with IEEE float32 at the same batch size (and accumulation),
        seed and data; set its loss gap, or why it is rejected."""
        reference = self._float32_at(cand.setup, allow_new_trials)
        if reference is None:
            cand.rejected = "not compared with float32 at the same batch size (budget reached)"
            return
        mine = cand.runs[0]
        if not reference.result.ok:
            # float32 does not fit (or fails) where the candidate runs: compare the two at the
            # largest batch where both ran; precision, not batch size, is on trial.
            pair = self._common_batch(cand, allow_new_trials)
            if pair is None:
                cand.rejected = (
                    f"float32 at batch size {cand.setup.batch_size} "
                    f"{self._failure(reference)} and no smaller batch to "
                    "compare at"
                )
                return
            mine, reference = pair
            self._note(
                f"{cand.setup.precision} was compared with float32 at batch size "
                f"{reference.result.spec.batch_size}: float32 does not run at batch size "
                f"{cand.setup.batch_size}"
            )
        cand.guard_trial = reference.number
        gap = loss_gap(mine.result, reference.result, self.settings.guard_steps)
        cand.loss_gap = gap
        if gap is None or gap > self.settings.loss_tolerance:
            cand.rejected = (
                f"loss gap to float32 {_pct(gap)} over the tolerance "
                f"{self.settings.loss_tolerance:.0%}"
                if gap is not None
                else "no comparable loss window"
            )

    def _reference(self, batch_size: int, steps_per_execution: int = 1) -> Setup:
        """IEEE float32 at ``batch_size``, with the accumulation that keeps the global batch."""
        return _float32(
            batch_size, self._acc(batch_size), steps_per_execution, self.settings.backend
        )

    def _common_batch(
        self, cand: Candidate, allow_new_trials: bool
    ) -> tuple[Measured, Measured] | None:
        """The candidate's setup and float32 (with the candidate's steps per execution) at the
        largest smaller batch where float32 ran."""
        fits = sorted(
            s.batch_size
            for s, runs in self.ev.known.items()
            if s == self._reference(s.batch_size, s.steps_per_execution)
            and s.batch_size < cand.setup.batch_size
            and first_ok(runs) is not None
        )
        if not fits:
            return None
        there = self._at(cand.setup, fits[-1])
        mine = self._recall_or_measure(there, Stage.GUARD, allow_new_trials)
        reference = self._float32_at(there, allow_new_trials)
        if mine is None or not mine.result.ok or reference is None or not reference.result.ok:
            return None
        return mine, reference

    def _float32_at(self, setup: Setup, allow_new_trials: bool) -> Measured | None:
        """IEEE float32 at ``setup``'s batch size, accumulation and steps per execution:
        recalled, or run. The steps per execution must match: a trial of several steps per
        execution reports one loss per execution (its steps' mean) and warms up in whole
        executions, so only the same grouping compares step for step."""
        batch_size = setup.batch_size
        key = _float32(
            batch_size,
            setup.gradient_accumulation_steps,
            setup.steps_per_execution,
            setup.backend,
        )
        if key not in self.ev.known:
            oom_below = [
                runs[0]
                for s, runs in self.ev.known.items()
                if s.precision == FLOAT32
                and _plain(s)
                and s.batch_size <= batch_size
                and runs[0].result.status is TrialStatus.OOM
            ]
            if oom_below:  # it will not fit a larger batch either
                return min(oom_below, key=lambda m: m.result.spec.batch_size)
            if allow_new_trials:
                self._stage(
                    Stage.GUARD,
                    f"float32 reference at batch size {batch_size}{self._accumulating(batch_size)}",
                )
        return self._recall_or_measure(key, Stage.GUARD, allow_new_trials)

    def _remeasure(self, candidates: list[Candidate]) -> None:
        """The leading candidate is measured once more (the confirming run of
        :meth:`_confirm_leader`, usually, recalled), unless it stands on its runoff's runs.
        Then the final: the leader and the fastest runner-up whose best figure comes within
        :data:`REMEASURE_WITHIN` of the leader's worst are measured back to back in
        :data:`RUNOFF_RUNS` turns (:meth:`_turns`), and each stands on those runs; the
        recommendation decides between them on the median of their per-turn ratios."""
        viable = sorted(
            (c for c in candidates if c.rejected is None), key=lambda c: c.speed, reverse=True
        )
        if not viable:
            return
        leader = viable[0]
        if leader.setup not in self.ran_off:
            self._stage(Stage.REMEASURE, "measuring the leading setup again")
            self._again(leader)
        viable = sorted(
            (c for c in viable if c.rejected is None), key=lambda c: c.speed, reverse=True
        )
        if not viable:
            return
        leader = viable[0]
        # Close enough to measure back to back: the runner-up's best figure within 15% of
        # the leader's worst (on a machine that drifts, a leader's runs can lie far apart).
        runners = [
            c for c in viable[1:] if c.spread[1] >= (1 - REMEASURE_WITHIN) * leader.spread[0]
        ]
        if not runners:
            return
        contenders = [leader, runners[0]]
        self._stage(
            Stage.FINAL,
            f"{leader.setup.label} and {runners[0].setup.label}: up to {RUNOFF_RUNS} turns "
            "back to back",
        )
        paired = self._turns(
            [c.setup for c in contenders], Stage.FINAL, RUNOFF_RUNS, self.settings.noise_floor
        )
        self.paired[(Stage.FINAL, "")] = paired
        for cand in contenders:
            numbers = paired.numbers(cand.setup)
            runs = [r for r in self.ev.known[cand.setup] if r.number in numbers]
            failed = next((r for r in runs if not r.result.ok), None)
            if failed is not None:
                cand.rejected = f"a run measured back to back {self._failure(failed)}"
            cand.runs = [r for r in runs if r.result.ok] or cand.runs

    def _again(self, cand: Candidate) -> None:
        """Measure ``cand`` once more: the next measurement after those it stands on (a
        crashed run and its retry included), so that a resumed search recalls the same
        trials."""
        stored = [r.number for r in self.ev.known.get(cand.setup, [])]
        used = max(stored.index(r.number) for r in cand.runs if r.number in stored)
        measured = self._measure(cand.setup, Stage.REMEASURE, repeat=used + 1)
        if measured.number not in [r.number for r in cand.runs]:
            if measured.result.ok:
                cand.runs.append(measured)
            else:
                cand.rejected = f"re-measurement {self._failure(measured)}"


def _unsafe_text(m: Measured, baseline: Measured | None) -> str:
    """Why a policy is not recommended, and what it would gain once the model is fixed."""
    reason = m.result.error.message if m.result.error else "unsafe for this model"
    if (
        m.speed
        and baseline is not None
        and baseline.result.ok
        and baseline.speed
        and baseline.result.spec.policy == FLOAT32
    ):
        reason += (
            f"; measured with the fix applied it reached {m.speed / baseline.speed:.2f}x "
            f"float32's throughput at batch size {m.result.spec.batch_size}"
        )
    return reason


def _where(setup: Setup) -> str:
    """``float32: batch size 256``, with the loss scale where it is not the policy's default
    and the knobs that are not at theirs: ``float32+tf32: batch size 256 (XLA)``."""
    extras = []
    if setup.loss_scale != LossScale.default_for(setup.policy):
        extras.append(f"loss scale {setup.loss_scale}")
    extras += setup.knob_words()
    detail = f" ({', '.join(extras)})" if extras else ""
    return f"{setup.precision}: batch size {setup.batch_size}{detail}"


def _float32(
    batch_size: int,
    accumulation: int = 1,
    steps_per_execution: int = 1,
    backend: str = TENSORFLOW,
) -> Setup:
    """The IEEE float32 reference setup at ``batch_size`` on ``backend`` (no knobs but the
    accumulation and the steps per execution, which decide how losses are grouped)."""
    return Setup(
        FLOAT32,
        batch_size,
        LossScale("none"),
        gradient_accumulation_steps=accumulation,
        steps_per_execution=steps_per_execution,
        backend=backend,
    )


def _plain(setup: Setup) -> bool:
    """At the default knobs a batch-size ladder measures: no XLA, one step per execution
    (TF32 is a precision of its own, accumulation follows the batch size)."""
    return not setup.xla and setup.steps_per_execution == 1


def _multiple_of_8(value: int) -> int:
    return max(8, round(value / 8) * 8)


def and_join(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else ("inf" if math.isinf(value) else f"{value:.1%}")
