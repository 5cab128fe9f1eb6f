"""What every stage of a search shares: the search's state (its evaluator, space and settings, the
picks and findings so far) and the helpers that read it (a measurement with its retry, a setup
at a batch size, whether a run fits, a precision's pick, what a setup stands on). The stages
(:mod:`tuner.search.stages`) are functions of a :class:`SearchContext`; the conductor
(:class:`tuner.search.strategy.Search`) runs them in order.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from tuner.policies import FLOAT32, MIXED_FLOAT16
from tuner.search.evaluator import BudgetExhausted, Evaluator, LaneStopped, StageCut
from tuner.search.events import LeaderChanged, PlanUpdated, StageStarted
from tuner.search.measures import (
    Candidate,
    KnobTrial,
    Measured,
    Paired,
    choose,
    first_held,
    first_ok,
    held,
    reference_of,
    representative,
)
from tuner.search.space import DeviceTraits, SearchSettings, SearchSpace
from tuner.search.stage import (
    AFTER_STANDING,
    EXPLORING,
    FIRST_TRIALS,
    LATE_STAGES,
    Stage,
    budget_group,
    first_trials_after,
)
from tuner.search.wording import where
from tuner.setup import KNOBS, TF32, Knob, Searching, Setup
from tuner.trials.hazards import NOT_TRAINING, UNSCALED_LOSS
from tuner.trials.result import START_PHASE, TrialStatus

T = TypeVar("T")
R = TypeVar("R")

#: A trial that ended like this may have been unlucky (a worker killed from outside, a stalled
#: machine), so it is run once more before its setup counts as failed. An OOM, a divergence or
#: an error in the user's code would only repeat: those are not retried.
RETRIED = frozenset({TrialStatus.CRASHED, TrialStatus.TIMEOUT})
ENDED = {TrialStatus.CRASHED: "crashed", TrialStatus.TIMEOUT: "timed out"}
#: Steps per execution is tried only when the pick's median step (``step_time_ms["p50"]``) is
#: shorter than this. Each ``train_function`` call costs the host about a millisecond (Python
#: dispatch of the compiled step, callbacks, fetching the logs), whatever the step does; running
#: several steps per call hides it. At 20 ms a step that millisecond is about 5% of the time,
#: just above the 3% noise floor; on a longer step the gain would be inside the noise, and the
#: trials would be spent for nothing.
SPE_STEP_MS = 20.0
#: The plan's price of a batch-size ladder, in trials (:meth:`SearchContext.left`): its rungs
#: up to where throughput stops growing or memory ends, one each side of the knee to refine,
#: and the odd retry. This and the three below are what the recorded real searches and the
#: scripted ones took (tests/tuner/test_plan.py holds the plan made after the policies stage
#: to within 30% of the trials each search ran), so that a progress bar moves as the search
#: does instead of sitting near its end while the total grows under it.
LADDER_TRIALS = 4
#: The stages after the knob stages, in trials: the leader's confirming run, the next batch
#: size each way around the leading pick, the guard's float32 reference and a share of the
#: runoff's and the final's turns (three back to back, where setups tie).
AROUND_TRIALS = 6
#: ...and for each knob tried both ways around a pick (XLA), each leading pick's setups with
#: and without it.
AROUND_KNOB = 2
#: ...and where steps are short enough for steps per execution too, the knob combinations
#: around each leading pick, and the runoff among those within the noise.
AROUND_SHORT = 8
#: A trial in an exploring stage stops measuring once it runs under this share of the leading
#: setup's throughput (:attr:`TrialSpec.prune_below`): a third, since a setup at that rate
#: cannot lead whatever the noise (runs on a busy 2-core machine swing up to 2x), and what it
#: would gain (memory) is not worth a third of the speed to any objective.
PRUNE_SHARE = 1 / 3


def unlucky_once(runs: Sequence[Measured]) -> bool:
    """One run, which crashed or timed out: it is owed its retry."""
    return len(runs) == 1 and runs[0].result.status in RETRIED


def unsafe_text(m: Measured, baseline: Measured | None) -> str:
    """Why a policy is not recommended, and what it would gain once the model is fixed."""
    reason = m.result.error.message if m.result.error else "unsafe for this model"
    if (
        m.speed
        and baseline is not None
        and baseline.result.ok
        and baseline.speed
        and baseline.result.spec.policy == FLOAT32
    ):
        # Weights that did not move (issue 71): its steps ran, nothing was fixed, nothing
        # trained; its rate is no gain. A trap the trial does not fix (a train_step that does
        # not scale its loss) was measured as the model runs; the probe's hazards with their
        # fix applied.
        unsafe = [h.kind for h in m.result.hazards if h.unsafe]
        if NOT_TRAINING in unsafe:
            how = "its steps, training nothing, ran at"
        elif UNSCALED_LOSS in unsafe:
            how = "measured as it runs it reached"
        else:
            how = "measured with the fix applied it reached"
        reason += (
            f"; {how} {m.speed / baseline.speed:.2f}x "
            f"float32's throughput at batch size {m.result.spec.batch_size}"
        )
    return reason


def plain(setup: Setup, own: Setup | None = None) -> bool:
    """At the knobs a batch-size ladder measures: every knob with a stage of its own at its
    default (no XLA, one step per execution; TF32 is a precision of its own, accumulation
    follows the batch size), or at ``own``'s (what a training script compiles with: its
    search's ladders climb with them, issue 70; :meth:`SearchContext.plain`)."""
    return all(
        getattr(setup, k.name) == (k.default if own is None else getattr(own, k.name))
        for k in KNOBS
        if k.stage
    )


def multiple_of_8(value: int) -> int:
    return max(8, round(value / 8) * 8)


class SearchContext:
    """The state of one search and the helpers its stages share.

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
        self.evaluator = evaluator
        self.space = space
        self.settings = settings
        self.device = device or DeviceTraits()
        self.abandoned: dict[str, str] = {}
        self.notes: list[str] = []
        #: the stages a time budget cut short (:meth:`cut`), by their budget group
        self.cut_short: list[str] = []
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
        #: a lane's own notes and knob findings (:meth:`concurrently`)
        self._lane = threading.local()
        #: the setups measured in a runoff (:func:`tuner.search.stages.runoff.run`)
        self.ran_off: set[Setup] = set()
        #: precision -> the setup its neighbourhood last moved away from, and the move's gain
        self.moved_from: dict[str, tuple[Measured, float]] = {}
        #: (stage, precision) -> the setups measured back to back there (turns.back_to_back)
        self.paired: dict[tuple[str, str], Paired] = {}
        #: precision -> the smallest per-step batch above its fit that did not fit (global batch)
        self.failed_above: dict[str, int] = {}
        #: precision -> the rung its ladder leapt to first (:func:`ladder.scout`)
        self.leaps: dict[str, int] = {}
        evaluator.serve(self)

    def prune_below(self, setup: Setup, stage: str) -> float | None:
        """The rate under which a trial of ``setup`` in ``stage`` stops measuring: a share
        (:data:`PRUNE_SHARE`) of the fastest setup measured so far; None for a stage that does
        not explore and for IEEE float32 (the guard's reference, whose losses must be whole)."""
        if stage not in EXPLORING or setup.precision == FLOAT32:
            return None
        fastest = max((m.speed for p in self.precisions for m in self.usable(p)), default=0.0)
        return fastest * PRUNE_SHARE if fastest > 0 else None

    def leader(self) -> Measured | None:
        """The fastest setup measured so far that is not IEEE float32 (the setup a budget
        that ends must still be able to recommend), unsafe ones left out."""
        usable = [m for p in self.precisions if p != FLOAT32 for m in self.usable(p)]
        return max(usable, key=lambda m: m.speed, default=None)

    def leading(self) -> LeaderChanged | None:
        """The setup the search leads with now, for the objective, at the figure it stands on:
        the median of its runs that ended ok (those that held: :func:`held`; its one run's
        figure until it ran again), so
        that a setup's best run never outranks another's median, nor its own. Every
        precision counts, IEEE float32 too (the search may recommend it); the policies found
        unsafe and the runs over the memory budget do not. None before a setup ran ok."""
        known = self.evaluator.known
        firsts = [m for p in self.precisions if p not in self.unsafe for m in self.usable(p)]
        if not firsts:
            return None
        medians: dict[Setup, tuple[float, tuple[int, ...]]] = {}
        for m in firsts:
            runs = [r for r in held(known[m.result.spec.setup]) if self.fits(r)]
            medians[m.result.spec.setup] = (
                statistics.median(r.speed for r in runs),
                tuple(r.number for r in runs),
            )
        best = choose(firsts, self.settings, speed=lambda m: medians[m.result.spec.setup][0])
        assert best is not None
        figure, numbers = medians[best.result.spec.setup]
        return LeaderChanged(best.result.spec.setup, figure, numbers)

    def leader_setup(self) -> Setup | None:
        """The leader's setup (see :meth:`leader`), or None."""
        leader = self.leader()
        return None if leader is None else leader.result.spec.setup

    def reserved(self) -> int:
        """How many trials the leader's check against IEEE float32 still needs: its float32
        reference at its batch size (none when one ran, or when float32 already ran out of
        memory at or below it and the leader itself ran at the batch size where float32 did)."""
        leader = self.leader()
        if leader is None:
            return 0
        setup = leader.result.spec.setup
        known = self.evaluator.known
        if reference_of(setup) in known:
            return 0
        f32 = [s for s in known if s.precision == FLOAT32 and self.plain(s)]
        # TF32 keeps float32's tensors: its out-of-memory errors are float32's too.
        same_memory = [s for s in known if s.precision in (FLOAT32, TF32) and self.plain(s)]
        oom = [s.batch_size for s in same_memory if known[s][0].result.status is TrialStatus.OOM]
        if not oom or min(oom) > setup.batch_size:
            return 1
        ran = [s.batch_size for s in f32 if first_ok(known[s]) is not None]
        below = [b for b in ran if b < setup.batch_size]
        return 0 if below and self.at_batch(setup, max(below)) in known else 1

    def alive(self) -> list[str]:
        """The precisions the search has not abandoned, in its order."""
        return [p for p in self.precisions if p not in self.abandoned]

    def cut(self, stage: str, what: str, cut: StageCut) -> None:
        """A time budget cut ``what`` (trials of ``stage``) short, to keep the first trials of
        the stages after it: kept in :attr:`cut_short`, and said in the notes."""
        self.cut_short.append(budget_group(stage))
        self.note(f"{what} cut short: {cut}")

    def kept_after(self, stage: str) -> tuple[int, int]:
        """Under a time budget, the trials a trial of ``stage`` leaves for the stages after it:
        the first trials of those that will run (:data:`~tuner.search.stage.FIRST_TRIALS`;
        the loss scales where mixed_float16 is searched with a choice of scales, the knobs
        where one is tried here, the runoff for the speed objective, the final where two
        precisions are left), and apart the guard's references (:meth:`_guard_trials`, each
        priced as the leader's check). None for a stage's own first trials (the stages before
        it kept them), and none for the ladders' first steps, one a precision."""
        group = budget_group(stage)
        own = dict(FIRST_TRIALS).get(group, 0)
        if group == "ladders":
            # Each ladder's first step (on a GPU its leap towards the largest batch that fits,
            # the search's largest gain) comes before anything kept for later.
            own = len(self.alive())
        if own and self._ran_in(group) < own:
            return 0, 0
        later = first_trials_after(stage)
        kept = sum(trials for name, trials in later if self._will_run(name))
        # Every stage that keeps trials for others comes before the guard.
        return kept, (self._guard_trials() if later else 0)

    def _guard_trials(self) -> int:
        """The trials the leader's check is expected to run beyond the one :meth:`reserved`
        keeps: where its batch is larger than any float32 ran at, float32 may not fit there,
        and the two are then compared at a smaller batch, the leader's precision run there
        too. (The other picks' checks run in the time left: :meth:`affords_check`.)"""
        leader = self.leader()
        known = self.evaluator.known
        if leader is None or reference_of(leader.result.spec.setup) in known:
            return 0
        ran = [
            s.batch_size
            for s, runs in known.items()
            if s.precision in (FLOAT32, TF32) and self.plain(s) and first_ok(runs) is not None
        ]
        return 1 if leader.result.spec.batch_size > max(ran, default=0) else 0

    def affords_check(self) -> bool:
        """Whether a time budget leaves room, after the leader's, for one more pick's check
        against float32 (two trials at the leader's price, where float32 may not fit) and the
        final's first turn; always without a time budget."""
        ev = self.evaluator
        left = ev.seconds_left()
        final = dict(FIRST_TRIALS)[Stage.FINAL] if self._will_run(Stage.FINAL) else 0
        return left is None or 2 * ev.check_cost() + final * ev.cost() <= left

    def _ran_in(self, group: str) -> int:
        """The runs of this session's stages in ``group`` (:func:`budget_group`)."""
        return sum(
            1
            for runs in self.evaluator.known.values()
            for m in runs
            if budget_group(m.stage) == group
        )

    def _will_run(self, group: str) -> bool:
        """Whether the stages of ``group`` have trials to run in this search, as far as it
        can tell before they begin."""
        alive = self.alive()
        if group == Stage.LOSS_SCALE:
            return MIXED_FLOAT16 in alive and len(self.space.loss_scales) > 1
        if group == "knobs":
            return any(self.knob_skipped(k) is None for k in KNOBS if k.stage)
        if group == Stage.RUNOFF:
            return self.settings.objective == "speed"
        if group == Stage.FINAL:
            return len(alive) > 1
        return True

    @property
    def reference(self) -> str:
        """The precision the user's training runs in today, unchanged (``float32+tf32`` where
        the backend's float32 defaults to TF32 on this device)."""
        own = self.space.user_policy
        if own is not None and own != FLOAT32 and own in self.precisions:
            return own  # a training script's own precision (issue 49)
        return self.device.default_precision(self.settings.backend)

    def plan(self, remaining: int) -> None:
        """Tell listeners how many trials are done and about how many are left."""
        ev = self.evaluator
        done = ev.closed_trials
        self.planned = done + max(0, remaining)
        if self.settings.max_trials is not None:
            self.planned = min(self.planned, self.settings.max_trials)
        budget_left = ev.seconds_left()
        seconds = (self.planned - done) * ev.cost() or None
        if seconds is not None and budget_left is not None:
            seconds = min(seconds, budget_left)
        ev.on_event(PlanUpdated(done, self.planned, seconds, budget_left))

    def announce(self, name: str, message: str) -> None:
        """Tell listeners a stage began."""
        self.evaluator.on_event(StageStarted(name, message))

    def left(
        self, alive: list[str], ladders_left: int, scales: bool = True, knobs: bool = True
    ) -> int:
        """About how many trials are left with ``ladders_left`` ladders still to climb, the
        loss-scale stage (``scales``) and the knob stages (``knobs``) still to come, and every
        stage after them (:meth:`left_around`)."""
        ladders = LADDER_TRIALS * ladders_left
        float16 = MIXED_FLOAT16 in alive and scales
        loss_scales = len(self.space.loss_scales) - 1 if float16 else 0
        tries = sum(k.tries for k in KNOBS if k.stage and not self.knob_skipped(k))
        return (
            ladders + loss_scales + (len(alive) * tries if knobs else 0) + self.left_around(alive)
        )

    def left_around(self, alive: list[str]) -> int:
        """About how many trials the stages after the knob stages take: the leader's
        confirming run, the neighbourhoods and runoffs around the leading picks, the guard's
        references and the final (:data:`AROUND_TRIALS`; more where a knob tried both ways
        (XLA) and, with short steps, steps per execution multiply the setups around a pick)."""
        both = sum(1 for k in KNOBS if k.around and k.tries and not self.knob_skipped(k))
        if not both:
            return AROUND_TRIALS
        steps = [m.result.step_time_ms.get("p50") for p in alive for m in self.usable(p)]
        short = any(ms is not None and ms < SPE_STEP_MS for ms in steps)
        return AROUND_TRIALS + AROUND_KNOB * both + (AROUND_SHORT if short else 0)

    def try_also(self, precisions: list[str], why: str) -> None:
        """Search ``precisions`` too, after those the space asked for (issue 71: a full half
        policy beside its mixed one, for a frozen backbone), with ``why`` in a note."""
        self.precisions.extend(p for p in precisions if p not in self.precisions)
        self.note(why)

    def note(self, text: str) -> None:
        """Keep ``text`` for the recommendation's notes (a lane's own, merged in order)."""
        notes = getattr(self._lane, "notes", self.notes)
        if text not in notes and text not in self.notes:  # a recalled retry is met again
            notes.append(text)

    def record_knob(self, found: KnobTrial) -> None:
        """Keep a knob stage's finding (a lane's own, merged in order)."""
        getattr(self._lane, "knobs", self.knobs).append(found)

    # What the stages find is kept through the methods below, here and nowhere else
    # (tests/test_architecture.py): a stage reads the context's attributes and changes them
    # by saying what it found.

    def set_baseline(self, m: Measured) -> None:
        """float32 at the start, as it fitted: what the policies are compared with."""
        self.baseline = m

    def abandon(self, policy: str, why: str, unsafe: Measured | None = None) -> None:
        """Drop ``policy`` from the search, and why; ``unsafe``: the trial that found the model
        unsafe under it."""
        self.abandoned[policy] = why
        if unsafe is not None:
            self.unsafe[policy] = unsafe

    def skip_knob(self, knob: str, why: str) -> None:
        """No precision tries ``knob`` (a knob's name), and why."""
        self.knobs_skipped[knob] = why

    def adopt(self, precision: str, base: Setup, current: Measured) -> None:
        """``precision``'s knob stages and the search around its pick left ``current`` where
        they started from ``base``: said as each knob's try is adopted, and again once the
        search around the pick is done."""
        self.adopted[precision] = (base, current)

    def move_pick(self, precision: str, frm: Setup, to: Measured) -> None:
        """``precision``'s pick moves from ``frm`` to ``to`` (a knob's try adopted, a
        neighbour that beat it), so that a search that ends before the stages around the pick
        are done (its trial limit, budget, a Stop) recommends what its evidence says was
        taken. Where the pick moved before, it still started from where it first started."""
        started = self.adopted.get(precision, (frm, to))[0]
        self.adopt(precision, started, to)

    def leap(self, precision: str, batch_size: int) -> None:
        """``precision``'s ladder leapt to ``batch_size`` first."""
        self.leaps[precision] = batch_size

    def did_not_fit(self, precision: str, batch_size: int) -> None:
        """A per-step ``batch_size`` above ``precision``'s fit did not fit (the smallest such
        is the last one said, as the ladder comes down)."""
        self.failed_above[precision] = batch_size

    def move(self, precision: str, center: Measured, gain: float) -> None:
        """``precision``'s neighbourhood moved away from ``center``, gaining ``gain``."""
        self.moved_from[precision] = (center, gain)

    def run_off(self, setups: Iterable[Setup]) -> None:
        """``setups`` are measured in a runoff."""
        self.ran_off.update(setups)

    def pair(self, stage: str, precision: str, paired: Paired) -> None:
        """The setups measured back to back in ``stage`` for ``precision`` (``""``: all)."""
        self.paired[(stage, precision)] = paired

    def concurrently(self, items: Iterable[T], work: Callable[[T], R]) -> list[R]:
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
        if self.evaluator.parallel == 1 or len(todo) < 2 or not self.evaluator.on_search_thread():
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
                self.evaluator.halted.set()
            finally:
                self.evaluator.lane_done()

        threads = [
            threading.Thread(target=lane, args=(i, x), name=f"mptune-lane-{i}", daemon=True)
            for i, x in enumerate(todo)
        ]
        for t in threads:
            t.start()
        try:
            self.evaluator.pump(len(threads))
        except BaseException:
            # Ctrl-C or a stop signal on this thread: stop the lanes' trials, then go.
            if self.evaluator.cancel is not None:
                self.evaluator.cancel.set()
            self.evaluator.halted.set()
            raise
        finally:
            for t in threads:
                t.join()
        for lane_notes, lane_knobs in zip(notes, knobs, strict=True):
            for text in lane_notes:
                self.note(text)
            self.knobs.extend(lane_knobs)
        if errors:
            self.evaluator.halted.clear()
            raise min(errors, key=lambda e: e[0])[1]
        return results  # type: ignore[return-value]

    def measure(self, setup: Setup, stage: str, repeat: int = 0) -> Measured:
        """The ``repeat``-th measurement of ``setup``, with its retry (:meth:`_measure_once`).
        In an exploring stage (:data:`EXPLORING`) a figure that does not hold
        (:attr:`TrialResult.holds`: its steps disagree with their own median, as the first
        trial of a fresh worker's did on an H200) is measured again once, in the same stage,
        before it decides anything (issue 70); the run that holds is returned and stands for
        the setup (:func:`first_held`), else the first. Recalled trials come back the same way,
        so a resumed search takes the same path."""
        m = self._measure_once(setup, stage, repeat)
        if stage not in EXPLORING or not m.result.ok or m.result.holds:
            return m
        runs = [r.number for r in self.evaluator.known.get(setup, [])]
        at = runs.index(m.number) if m.number in runs else repeat
        again = self._measure_once(setup, stage, at + 1)
        figure = (
            f"{again.speed:,.0f} samples/s" + ("" if again.result.holds else ", nor did that")
            if again.result.ok
            else self.failure(again)
        )
        self.note(
            f"{where(setup)} did not hold at {m.speed:,.0f} samples/s (trial #{m.number}: "
            f"{m.result.unheld_words}), measured again: {figure} (#{again.number})"
        )
        return again if again.result.ok and again.result.holds else m

    def _measure_once(self, setup: Setup, stage: str, repeat: int) -> Measured:
        """The ``repeat``-th measurement of ``setup``; one that crashed or timed out is run
        once more (``repeat + 1``), and that second run is returned, unless it failed in the
        model's own code (``TrialResult.model_failed``)."""
        m = self.evaluator.measure(setup, stage, repeat=repeat)
        if m.result.status not in RETRIED or m.result.model_failed:
            # A hang or an exit while the model's own code builds it would only repeat.
            return m
        error = m.result.error
        started = error is None or error.phase != START_PHASE
        if m.result.status is TrialStatus.TIMEOUT and self.evaluator.budgeted() and started:
            # Under a budget a timeout is not run again: it would cost the trial's whole time
            # limit once more, and a batch that compiles past it (XLA at a large batch) will
            # again. A worker that never started (stuck in its imports) says nothing of the
            # setup: that one is run again, in a fresh worker.
            return m
        again = self.evaluator.measure(setup, stage, repeat=repeat + 1)
        if again.result.ok:
            self.note(f"{where(setup)} {ENDED[m.result.status]}, ran again: ok")
        return again

    def failure(self, m: Measured) -> str:
        """How ``m`` failed, counting the run before it when ``m`` was its retry: ``oom``,
        ``crashed twice``, ``timed out, then crashed``."""
        runs = self.evaluator.known.get(m.result.spec.setup, [])
        index = next((i for i, r in enumerate(runs) if r.number == m.number), 0)
        status = m.result.status
        before = runs[index - 1].result.status if index > 0 else None
        if before not in RETRIED or status is TrialStatus.OK:
            return status.value
        assert before is not None
        if status is before:
            return f"{ENDED[before]} twice"
        return f"{ENDED[before]}, then {ENDED.get(status, status.value)}"

    def recall_or_measure(
        self, setup: Setup, stage: str, allow_new_trials: bool
    ) -> Measured | None:
        """The stored run that stands for ``setup``, or a new measurement (with its retry) when
        there is none and new trials are allowed; None when neither."""
        runs = self.evaluator.known.get(setup, [])
        if runs and not (allow_new_trials and unlucky_once(runs)):
            return representative(runs)
        if not allow_new_trials:
            return None
        try:
            return self.measure(setup, stage)
        except BudgetExhausted:
            return representative(runs) if runs else None

    def accumulation(self, batch_size: int) -> int:
        """The accumulation steps that keep the global batch at ``batch_size`` (1 without
        one)."""
        return self.space.global_batch // batch_size if self.space.global_batch else 1

    def at_batch(self, setup: Setup, batch_size: int) -> Setup:
        """``setup`` at ``batch_size``, with the accumulation that keeps the global batch."""
        return setup.replace(
            batch_size=batch_size,
            gradient_accumulation_steps=self.accumulation(batch_size),
            backend=self.settings.backend,
        )

    def accumulating(self, batch_size: int) -> str:
        acc = self.accumulation(batch_size)
        return f" x {acc} accumulation steps" if acc > 1 else ""

    def fits(self, m: Measured) -> bool:
        """Ran ok within the memory budget."""
        return m.result.ok and not self.evaluator.over_memory_budget(m)

    def too_big(self, m: Measured) -> bool:
        """Did not fit: out of memory, or over the memory budget."""
        return m.result.status is TrialStatus.OOM or (
            m.result.ok and self.evaluator.over_memory_budget(m)
        )

    def rung_below(self, batch_size: int) -> int | None:
        """The next rung down: the largest at most half of ``batch_size``."""
        return max((r for r in self.space.rungs() if r <= batch_size // 2), default=None)

    def usable(self, precision: str) -> list[Measured]:
        """Every setup of ``precision`` (``Setup.precision``) that ran ok within the memory
        budget (first ok runs, on a figure that holds where one did: :func:`first_held`)."""
        firsts = [
            first_held(runs)
            for setup, runs in self.evaluator.known.items()
            if setup.precision == precision
        ]
        return [m for m in firsts if m is not None and not self.evaluator.over_memory_budget(m)]

    def base_pick(self, precision: str, late: bool = False) -> Measured | None:
        """The precision's best setup with the default knobs (no XLA, one step per execution)
        for the objective, over the batch sizes and loss scales measured. ``late``: counting
        the guard's and the re-measuring stage's trials (float32's final pick); else without
        them, as the search met them before those stages (a resumed search knows them early)."""
        at_defaults = [
            m
            for m in self.usable(precision)
            if self.plain(m.result.spec.setup) and (late or m.stage not in LATE_STAGES)
        ]
        return choose(at_defaults, self.settings)

    def pick(self, precision: str) -> Candidate | None:
        """The precision's best setup: its best default-knob setup, or the setup its knob stages
        adopted on it. A knob variant that did not win its stage is never the pick."""
        late = precision == FLOAT32
        chosen = self.base_pick(precision, late)
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
            return Candidate(setup, self.ran_off_runs(setup) or [chosen])
        return Candidate(setup, [chosen])

    def ran_off_runs(self, setup: Setup) -> list[Measured]:
        """``setup``'s ok runs in its runoff: what it stands on after one."""
        return [
            r
            for r in self.evaluator.known.get(setup, [])
            if r.result.ok and r.stage == Stage.RUNOFF
        ]

    def standing(self, m: Measured) -> tuple[float, tuple[int, ...]]:
        """What ``m``'s setup stands on: the median of its runs that ended ok when it ran more
        than once (a confirmed leader, a re-measured one), else ``m``'s own figure; a run
        whose figure did not hold is left out where another held (:func:`held`)."""
        runs = held(
            [
                r
                for r in self.evaluator.known.get(m.result.spec.setup, [])
                if r.stage not in AFTER_STANDING
            ]
        )
        if len(runs) < 2:
            return m.speed, (m.number,)
        return statistics.median(r.speed for r in runs), tuple(r.number for r in runs)

    def knob_skipped(self, knob: Knob) -> str | None:
        """Why no precision tries ``knob``, or None when its stage runs: a refusal the search
        met (:meth:`skip_knob`), or what its row says of this search (:attr:`Knob.skipped`)."""
        if knob.name in self.knobs_skipped:
            return self.knobs_skipped[knob.name]
        if knob.skipped is None:
            return None
        choice = self.space.choice(knob.name)
        trained = self.baseline.result.trained if self.baseline is not None else None
        return knob.skipped(
            Searching(
                self.settings.backend,
                self.device.gpu,
                str(choice),
                self.device.compute_capability,
                trained.quantizable_share if trained is not None else None,
            )
        )

    def plain(self, setup: Setup) -> bool:
        """:func:`plain` in this search: at the knobs its ladders climb with (a training
        script's own where it compiles with some: issue 70)."""
        return plain(setup, self.space.user_setup)

    def start_setup(self, precision: str, batch_size: int) -> Setup:
        """A precision's first setup in the policies stage; in a training script's search,
        with the execution knobs the script compiles with (XLA, steps per execution, float8:
        issue 70), which the knob stages then try the other way."""
        if precision == TF32:
            setup = self.at_batch(Setup(FLOAT32, batch_size, tf32=True), batch_size)
        else:
            setup = self.at_batch(Setup(precision, batch_size), batch_size)
        own = self.space.user_setup
        if own is None:
            return setup
        try:
            return setup.replace(
                xla=own.xla, steps_per_execution=own.steps_per_execution, float8=own.float8
            )
        except ValueError:
            return setup  # a knob this precision refuses: it starts without the script's
