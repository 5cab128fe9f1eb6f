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
#: The stages that explore. Their trials may be pruned (``SearchContext.prune_below``), and a
#: figure of theirs that does not hold (:attr:`~tuner.trials.result.TrialResult.holds`) is
#: measured again once before it decides anything (``SearchContext.measure``, issue 70). The
#: guard's float32 references and the trials measured back to back (runoff, final) run in
#: full, once: their losses and figures decide.
EXPLORING = frozenset(
    {
        Stage.POLICIES,
        Stage.BATCH,
        Stage.REFINE,
        Stage.LOSS_SCALE,
        *KNOB_STAGES,
        Stage.NEIGHBOURHOOD,
    }
)

#: Under a time budget, what each stage after the ladders keeps for itself from the stages
#: before it, in trials: its first (two for one that measures back to back), so that a budget
#: that ends reaches every stage instead of ending in the ladders, where each new batch size
#: compiles (on a GPU, tens of seconds a rung). In the order the stages run; the knob stages
#: keep one between them (``"knobs"``). The guard's reference is kept apart
#: (``SearchState.reserved``).
FIRST_TRIALS: tuple[tuple[str, int], ...] = (
    (Stage.LOSS_SCALE, 1),
    ("knobs", 1),
    (Stage.REMEASURE, 1),
    (Stage.NEIGHBOURHOOD, 1),
    (Stage.RUNOFF, 2),
    (Stage.FINAL, 2),
)


def budget_group(stage: str) -> str:
    """The name :data:`FIRST_TRIALS` knows ``stage`` by: ``"knobs"`` for an execution knob's
    stage, ``"ladders"`` for the ladders' rungs and refinements, else the stage itself."""
    if stage in KNOB_STAGES:
        return "knobs"
    if stage in (Stage.BATCH, Stage.REFINE):
        return "ladders"
    return stage


def first_trials_after(stage: str) -> tuple[tuple[str, int], ...]:
    """The stages after ``stage`` that keep their first trials from it (:data:`FIRST_TRIALS`):
    every one after the ladders; none after the baseline and policies (which run before any is
    kept), the guard (its reference is reserved apart) or the final."""
    names = [name for name, _ in FIRST_TRIALS]
    group = budget_group(stage)
    if group == "ladders":
        return FIRST_TRIALS
    if group in names:
        return FIRST_TRIALS[names.index(group) + 1 :]
    return ()


def knob_stage(knob: str) -> str:
    """The stored name of the stage that tries the execution knob named ``knob``.

    Raises:
        ValueError: the knob has no stage of its own.
    """
    stage = KNOB_BY_NAME[knob].stage
    if stage is None:
        raise ValueError(f"the knob {knob} has no stage of its own")
    return stage
