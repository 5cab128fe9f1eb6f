"""mptune's search strategy: the conductor that runs the stages (:mod:`tuner.search.stages`) in
order on a shared :class:`~tuner.search.stages.context.SearchContext`.

The order of work (docs/search.md):

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

Every trial goes through the :class:`~tuner.search.evaluator.Evaluator`, which recalls a
finished trial of the session instead of running it again (so a resumed search continues where
it stopped) and enforces the trial and time budgets.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.hardware.advice import DEFAULT_NOTES
from tuner.policies import FLOAT32, MIXED_FLOAT16
from tuner.search.evaluator import BudgetExhausted, Evaluator, StageCut
from tuner.search.measures import Measured, SearchOutcome
from tuner.search.space import DeviceTraits, SearchSettings, SearchSpace
from tuner.search.stage import KNOB_STAGES, Stage
from tuner.search.stages import (
    final,
    guard,
    knobs,
    ladder,
    loss_scales,
    neighbourhood,
    policies,
    runoff,
)
from tuner.search.stages.context import SearchContext
from tuner.setup import KNOBS, TF32, Setup

#: The plan's price of the guard and final before the guard ran: about the final's, two turns
#: of two where two precisions' picks come close (the guard's own are counted exactly).
FINAL_TRIALS = 2


class Search:
    """One search over a space: call :meth:`run` for the outcome. Its arguments make the
    :class:`~tuner.search.stages.context.SearchContext` every stage works on."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        settings: SearchSettings,
        device: DeviceTraits | None = None,
    ) -> None:
        self.ctx = SearchContext(evaluator, space, settings, device)

    def note(self, text: str) -> None:
        """Keep ``text`` for the recommendation's notes (the session's own, said before the
        search begins)."""
        self.ctx.note(text)

    @property
    def notes(self) -> list[str]:
        """What the search found worth telling, in the order it found it."""
        return self.ctx.notes

    def run(self) -> SearchOutcome:
        """Search, then guard and re-measure the finalists; what was found, also when a budget
        ended the search early."""
        ctx = self.ctx
        stopped = None
        try:
            self._search()
        except BudgetExhausted as exc:
            stopped = str(exc)
            ctx.note(f"stopped early: {exc}; the recommendation uses the trials so far")
        if stopped is None:
            ctx.plan(guard.left(ctx) + FINAL_TRIALS)
        candidates = guard.finalists(ctx, allow_new_trials=stopped is None)
        if stopped is None:
            ctx.plan(final.left(ctx, candidates))
            try:
                final.run(ctx, candidates)
            except BudgetExhausted as exc:
                stopped = str(exc)
                ctx.note(f"stopped before re-measuring: {exc}")
        self._skip_knobs()  # a search that ended before the knobs: why they were never to run
        return SearchOutcome(
            candidates,
            ctx.baseline,
            dict(ctx.abandoned),
            ctx.notes,
            stopped,
            dict(ctx.evaluator.known),
            ctx.evaluator.memory_budget_mb,
            list(ctx.knobs),
            dict(ctx.knobs_skipped),
            [ctx.paired[key] for key in sorted(ctx.paired, key=self._paired_order)],
            ctx.reference,
            DEFAULT_NOTES[ctx.settings.backend] if ctx.device.tf32 else None,
            list(dict.fromkeys(ctx.cut_short)),
        )

    def _skip_knobs(self) -> None:
        """Keep why each knob with a stage that its row skips in this search is not tried (the
        backend, the device, the user's switch, the model's layers), so that its evidence says
        that rather than that the search ended before its stage."""
        ctx = self.ctx
        for knob in KNOBS:
            skipped = ctx.knob_skipped(knob) if knob.stage else None
            if skipped:
                ctx.skip_knob(knob.name, skipped)

    def _paired_order(self, key: tuple[str, str]) -> tuple[int, int]:
        """Runoffs before the final, each in the order its trials ran."""
        return (key[0] == Stage.FINAL, min(self.ctx.paired[key].numbers(), default=0))

    def _search(self) -> None:
        at_start = self._baseline_and_policies()
        ctx = self.ctx
        alive = ctx.alive()
        self._ladders(alive, at_start)
        if MIXED_FLOAT16 in alive and ctx.base_pick(MIXED_FLOAT16) is not None:
            self._cut_short(
                Stage.LOSS_SCALE, "mixed_float16's loss scales", lambda: loss_scales.run(ctx)
            )
        ctx.plan(ctx.left(alive, 0, scales=False))
        self._knobs(alive)

    def _baseline_and_policies(self) -> dict[str, Measured]:
        """float32 (or the first policy) at the starting batch size, then every other precision
        there; the laggards abandoned. Each precision's first run, by precision. A training
        script's search begins with what the script trains today instead (issue 70)."""
        ctx = self.ctx
        own = ctx.space.user_setup
        if own is not None:
            today = policies.todays_baseline(ctx, own)
            if today is not None:
                ctx.announce(
                    Stage.POLICIES,
                    f"each policy at batch size {ctx.space.start_batch}, as the script trains",
                )
                return self._policies_beside(today, ctx.space.start_batch)
        start = ctx.space.start_batch
        first = FLOAT32 if FLOAT32 in ctx.space.policies else ctx.space.policies[0]
        ctx.plan(4 * len(ctx.precisions) + 4)
        ctx.announce(Stage.BASELINE, f"{first} at batch size {start}{ctx.accumulating(start)}")
        # Each precision's first trial starts a worker (the policy and TF32 are fixed in a
        # process): started side by side now, not one by one.
        ctx.evaluator.start_ahead(
            [ctx.at_batch(Setup(first, start), start)]
            + [ctx.start_setup(p, start) for p in ctx.precisions if p != first]
        )
        baseline = ladder.shrink_to_fit(
            ctx, policies.fitting_baseline(ctx, first, start), Stage.BASELINE
        )
        ctx.set_baseline(baseline)
        if ctx.space.global_batch is None and ctx.fits(baseline):
            start = baseline.result.spec.batch_size  # halved where the start did not fit
        ctx.announce(Stage.POLICIES, f"each policy at batch size {start}")
        return self._policies_beside(baseline, start)

    def _policies_beside(self, baseline: Measured, start: int) -> dict[str, Measured]:
        """Every other precision at ``start`` beside the baseline (with a script's compile
        settings: :meth:`SearchContext.start_setup`), the laggards abandoned. Each precision's
        first run, by precision."""
        ctx = self.ctx
        first = baseline.result.spec.setup.precision
        if baseline.result.ok:
            policies.offer_full_half(ctx, baseline)  # a frozen backbone's (issue 71)

        def at_start_of(precision: str) -> Measured:
            # TF32 is a variant of float32: at the batch size float32's baseline ran at.
            b = baseline.result.spec.batch_size if precision == TF32 else start
            setup = ctx.start_setup(precision, b)
            return ladder.shrink_to_fit(ctx, ctx.measure(setup, Stage.POLICIES), Stage.POLICIES)

        others = [p for p in ctx.precisions if p != first]
        at_start = {first: baseline} | dict(
            zip(others, ctx.concurrently(others, at_start_of), strict=True)
        )
        policies.abandon_laggards(ctx, at_start)
        return at_start

    def _ladders(self, alive: list[str], at_start: dict[str, Measured]) -> None:
        """Each surviving precision's batch-size ladder, from its first run."""
        ctx = self.ctx
        ctx.plan(ctx.left(alive, len(alive)))
        climbed: set[str] = set()
        if ctx.evaluator.budgeted():
            # A budget may end before every ladder ran: the most promising climbs first, and
            # on a GPU each leaps towards its largest batch before any climbs on.
            alive = sorted(alive, key=lambda p: -at_start[p].speed)
            ctx.concurrently(
                alive,
                lambda p: self._cut_short(
                    Stage.BATCH, f"{p}'s leap", lambda: ladder.scout(ctx, p, at_start[p])
                ),
            )
            alive = sorted(alive, key=lambda p: -max((m.speed for m in ctx.usable(p)), default=0))

        def climb(precision: str) -> None:
            ctx.announce(Stage.BATCH, f"batch-size ladder for {precision}")
            climb = ladder.climb if ctx.space.global_batch is None else ladder.climb_global
            self._cut_short(
                Stage.BATCH,
                f"the batch-size ladder for {precision}",
                lambda: climb(ctx, precision, at_start[precision]),
            )
            climbed.add(precision)
            ctx.plan(ctx.left(alive, len(alive) - len(climbed)))

        ctx.concurrently(alive, climb)

    def _cut_short(self, stage: str, what: str, work: Callable[[], object]) -> None:
        """``work``, trials of ``stage``; where a time budget keeps the rest of its time for
        the stages after it (:class:`~tuner.search.evaluator.StageCut`), what it measured
        stands (:meth:`SearchContext.cut`), and the search goes on."""
        try:
            work()
        except StageCut as cut:
            self.ctx.cut(stage, what, cut)

    def _knobs(self, alive: list[str]) -> None:
        """The knobs, on each surviving precision's pick: XLA, then steps per execution. A knob
        is adopted only when it pays beyond the noise floor; the pick is then what was
        adopted. The knobs and the batch size interact (XLA can lose at one step size and win
        with several steps per call, or at a smaller batch): the leading picks then look
        around them (neighbourhood, runoff)."""
        ctx = self.ctx
        self._skip_knobs()

        def tried(precision: str) -> tuple[Measured, Measured] | None:
            base = ctx.base_pick(precision)
            if base is None:
                return None
            current = base
            for stage in knobs.STAGES:
                try:
                    current = stage(ctx, precision, current)
                except StageCut as cut:
                    ctx.cut(KNOB_STAGES[0], f"{precision}'s execution knobs", cut)
                    break
            return base, current

        found = zip(alive, ctx.concurrently(alive, tried), strict=True)
        picks = {precision: pair for precision, pair in found if pair is not None}
        knobs.confirm_leader(ctx, picks)
        speeds = {p: ctx.standing(current)[0] for p, (_, current) in picks.items()}
        fastest = max(speeds.values(), default=0.0)
        ctx.plan(ctx.left_around(alive) - 1)  # the leader's confirming run is behind

        def around(precision: str) -> None:
            base, current = picks[precision]
            if speeds[precision] >= (1 - final.REMEASURE_WITHIN) * fastest:
                current = neighbourhood.explore(ctx, precision, current)
                current = runoff.run(ctx, precision, current)
            # What the search around the pick left stands, even where it is the pick the knob
            # stages started from (a runoff may keep it over an adopted knob).
            ctx.adopt(precision, base.result.spec.setup, current)

        ctx.concurrently(list(picks), around)
