"""Setups measured back to back, in turns (:class:`~tuner.search.measures.Paired`): the way the
runoff and the final compare setups too close to call on one trial each.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.search.evaluator import StageCut
from tuner.search.measures import Measured, Paired, median_bounds, settled
from tuner.search.stages.context import SearchContext
from tuner.setup import Setup

#: ...measured back to back in at most this many turns (two when they settle it)...
RUNOFF_RUNS = 3


def back_to_back(
    ctx: SearchContext, setups: Sequence[Setup], stage: str, turns: int, margin: float | None = None
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
        runs = ctx.evaluator.known.get(s, [])
        nxt[s] = next((i for i, r in enumerate(runs) if r.stage == stage), len(runs))
    speeds: list[tuple[float, ...]] = []
    numbers: list[tuple[int, ...]] = []
    for turn in range(turns):
        order = list(setups) if turn % 2 == 0 else list(reversed(setups))

        def one(s: Setup) -> Measured:
            return ctx.measure(s, stage, nxt[s])

        try:
            ran = dict(zip(order, ctx.concurrently(order, one), strict=True))
        except StageCut as cut:  # a turn cut short: the turns before it decide
            ctx.cut(stage, f"{stage}: turn {turn + 1} of {turns}", cut)
            break
        for s, m in ran.items():
            nxt[s] = [r.number for r in ctx.evaluator.known[s]].index(m.number) + 1
        speeds.append(tuple(ran[s].speed if ran[s].result.ok else 0.0 for s in setups))
        numbers.append(tuple(ran[s].number for s in setups))
        so_far = Paired(stage, tuple(setups), tuple(speeds), tuple(numbers))
        if margin is not None and turn + 1 < turns:
            bounds = median_bounds(so_far, turns)
            if bounds is not None and settled(bounds, margin):
                break
    return Paired(stage, tuple(setups), tuple(speeds), tuple(numbers))
