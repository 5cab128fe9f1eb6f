"""mixed_float16's loss scales at its pick's batch size: dynamic against the fixed scales the space
holds, a fixed scale the numerics probe shows would overflow left out.
"""

from __future__ import annotations

from tuner.policies import MIXED_FLOAT16
from tuner.search.measures import Candidate
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext
from tuner.setup import LossScale


def run(ctx: SearchContext) -> None:
    pick = ctx.base_pick(MIXED_FLOAT16)
    assert pick is not None
    cand = Candidate(pick.result.spec.setup, [pick])
    others = [s for s in ctx.space.loss_scales if s != cand.setup.loss_scale]
    if not others:
        return
    ctx.announce(
        Stage.LOSS_SCALE, f"loss scales for mixed_float16 at batch size {cand.setup.batch_size}"
    )
    evidence = ctx.evaluator.probed(MIXED_FLOAT16)
    numerics = evidence.result.numerics if evidence is not None else {}
    shares = numerics.get("flush_share") or {}
    if "1" in shares:
        ctx.note(
            f"numerics probe (trial #{evidence.number if evidence else '?'}): without loss "
            f"scaling {shares['1']:.2%} of float32's gradient values would flush to zero "
            "in float16"
        )

    def one(scale: LossScale) -> None:
        limit = numerics.get("overflow_scale")
        if scale.kind == "fixed" and limit and scale.value and scale.value > limit:
            ctx.note(
                f"mixed_float16 with loss scale {scale}: not run; the numerics probe's "
                f"largest gradient ({numerics.get('grad_max', 0):.3g}) times {scale.value:g} "
                "passes float16's 65,504, so every step would overflow and a fixed scale "
                "never skips a step"
            )
            return
        m = ctx.measure(cand.setup.replace(loss_scale=scale), Stage.LOSS_SCALE)
        r = m.result
        if not r.ok:
            ctx.note(
                f"mixed_float16 with loss scale {scale}: {ctx.failure(m)}"
                + (f" ({r.error.message})" if r.error else "")
            )
            return
        if r.skipped_steps > 0.1 * max(1, r.steps_completed):
            ctx.note(
                f"mixed_float16 with loss scale {scale}: {r.skipped_steps} of "
                f"{r.steps_completed} steps skipped"
            )

    ctx.concurrently(others, one)
