"""The stages of a search, by name: each trial is stored with the stage that ran it, and the
search's decisions read those names (a resumed search recalls the stored trials with them).

A :class:`Stage` is its stored name (``Stage.RUNOFF == "runoff"``), so names stored by any
earlier version compare equal to the members, and a stage prints as its name. An execution
knob's stage (XLA's ``xla``, steps per execution's ``steps-per-execution``) is named by its
row of :data:`tuner.knobs.KNOBS` (``Knob.stage``), not here: :data:`KNOB_STAGES`.
"""

from __future__ import annotations

import enum

from tuner.setup import KNOB_BY_NAME, KNOBS


class Stage(str, enum.Enum):
    """A stage of the search, in the order a search meets them (docs/search.md)."""

    #: float32 at the starting batch size
    BASELINE = "baseline"
    #: every other precision at the starting batch size
    POLICIES = "policies"
    #: a precision's batch-size ladder
    BATCH = "batch"
    #: between the ladder's rungs
    REFINE = "refine"
    #: mixed_float16's loss scales at its pick's batch size
    LOSS_SCALE = "loss-scale"
    #: (then each execution knob on a precision's pick: :data:`KNOB_STAGES`)
    #: the leader's confirming run, and the leading candidate's re-measurement
    REMEASURE = "remeasure"
    #: every knob combination and the next batch size each way around a leading pick
    NEIGHBOURHOOD = "neighbourhood"
    #: a pick and its near ties measured back to back
    RUNOFF = "runoff"
    #: IEEE float32 at a candidate's batch size, for the loss gap
    GUARD = "guard"
    #: the leading precisions' picks measured back to back
    FINAL = "final"
    #: an exhaustive grid's trials (bench/bench_search.py), never a search's
    GRID = "grid"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: Stages whose trials come after the knob stages: left out of the picks the knob stages start
#: from, so that a resumed search (which knows them from the start) takes the same path.
LATE_STAGES = frozenset(
    {Stage.NEIGHBOURHOOD, Stage.RUNOFF, Stage.GUARD, Stage.REMEASURE, Stage.FINAL}
)
#: Stages whose runs a setup's standing leaves out: they come after every decision taken on
#: it, and a resumed search, which knows them from the start, must take those decisions as the
#: search did.
AFTER_STANDING = frozenset({Stage.RUNOFF, Stage.GUARD, Stage.FINAL})
#: The execution knobs' stages, by their stored names, in the order they run on a precision's
#: pick (each knob's ``stage``; :data:`tuner.search.stages.knobs.TRIES` holds what each runs).
KNOB_STAGES: tuple[str, ...] = tuple(knob.stage for knob in KNOBS if knob.stage)


def knob_stage(knob: str) -> str:
    """The stored name of the stage that tries the execution knob named ``knob``.

    Raises:
        ValueError: the knob has no stage of its own.
    """
    stage = KNOB_BY_NAME[knob].stage
    if stage is None:
        raise ValueError(f"the knob {knob} has no stage of its own")
    return stage
