"""The end of a search: the leading candidate measured again, then the leader and a close runner-up
measured back to back, each then standing on those runs.
"""

from __future__ import annotations

from tuner.search.measures import Candidate
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext
from tuner.search.stages.turns import RUNOFF_RUNS, back_to_back

#: Re-measure a runner-up whose figure is within this of the leader's.
REMEASURE_WITHIN = 0.15


def run(ctx: SearchContext, candidates: list[Candidate]) -> None:
    """The leading candidate is measured once more (the confirming run of
    :func:`knobs.confirm_leader`, usually, recalled), unless it stands on its runoff's runs.
    Then the final: the leader and the fastest runner-up whose best figure comes within
    :data:`REMEASURE_WITHIN` of the leader's worst are measured back to back in
    :data:`RUNOFF_RUNS` turns (:func:`back_to_back`), and each stands on those runs; the
    recommendation decides between them on the median of their per-turn ratios."""
    viable = sorted(
        (c for c in candidates if c.rejected is None), key=lambda c: c.speed, reverse=True
    )
    if not viable:
        return
    leader = viable[0]
    if leader.setup not in ctx.ran_off:
        ctx.announce(Stage.REMEASURE, "measuring the leading setup again")
        measure_again(ctx, leader)
    viable = sorted((c for c in viable if c.rejected is None), key=lambda c: c.speed, reverse=True)
    if not viable:
        return
    leader = viable[0]
    # Close enough to measure back to back: the runner-up's best figure within 15% of
    # the leader's worst (on a machine that drifts, a leader's runs can lie far apart).
    runners = [c for c in viable[1:] if c.spread[1] >= (1 - REMEASURE_WITHIN) * leader.spread[0]]
    if not runners:
        return
    contenders = [leader, runners[0]]
    ctx.announce(
        Stage.FINAL,
        f"{leader.setup.label} and {runners[0].setup.label}: up to {RUNOFF_RUNS} turns "
        "back to back",
    )
    paired = back_to_back(
        ctx, [c.setup for c in contenders], Stage.FINAL, RUNOFF_RUNS, ctx.settings.noise_floor
    )
    ctx.pair(Stage.FINAL, "", paired)
    for cand in contenders:
        numbers = paired.numbers(cand.setup)
        runs = [r for r in ctx.evaluator.known[cand.setup] if r.number in numbers]
        failed = next((r for r in runs if not r.result.ok), None)
        if failed is not None:
            cand.rejected = f"a run measured back to back {ctx.failure(failed)}"
        cand.runs = [r for r in runs if r.result.ok] or cand.runs


def left(ctx: SearchContext, candidates: list[Candidate]) -> int:
    """The trials :func:`run` is expected to take (the plan's count): the leader's run again
    where it has one run, and two turns of two where a runner-up comes close (a third when
    those split)."""
    viable = sorted(
        (c for c in candidates if c.rejected is None), key=lambda c: c.speed, reverse=True
    )
    if not viable:
        return 0
    leader = viable[0]
    again = int(
        leader.setup not in ctx.ran_off and len(ctx.evaluator.known.get(leader.setup, ())) < 2
    )
    close = any(c.spread[1] >= (1 - REMEASURE_WITHIN) * leader.spread[0] for c in viable[1:])
    return again + (2 * (RUNOFF_RUNS - 1) if close else 0)


def measure_again(ctx: SearchContext, cand: Candidate) -> None:
    """Measure ``cand`` once more: the next measurement after those it stands on (a
    crashed run and its retry included), so that a resumed search recalls the same
    trials."""
    stored = [r.number for r in ctx.evaluator.known.get(cand.setup, [])]
    used = max(stored.index(r.number) for r in cand.runs if r.number in stored)
    measured = ctx.measure(cand.setup, Stage.REMEASURE, repeat=used + 1)
    if measured.number not in [r.number for r in cand.runs]:
        if measured.result.ok:
            cand.runs.append(measured)
        else:
            cand.rejected = f"re-measurement {ctx.failure(measured)}"
