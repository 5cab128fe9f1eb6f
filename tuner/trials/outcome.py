"""The one place that decides how a trial ended.

Like Optuna's ``_run_trial``, the facts are gathered first (what the worker reported, as its
typed messages; whether the parent had to kill it) and a single function maps them to a
:class:`TrialStatus`. The worker never decides a status: it reports what happened. A trial
whose worker was lost without a word (a fleet worker's heartbeat stopped; a stored trial closed
without a result) is decided here too (:func:`lost`): no other engine code makes a status
(tests/test_architecture.py checks it).
"""

from __future__ import annotations

import math
import os
import re
import signal
import statistics
from dataclasses import dataclass

from tuner.trials.events import PHASES
from tuner.trials.hazards import TITLES, Hazard
from tuner.trials.messages import ErrorMessage, ResultMessage
from tuner.trials.result import TrialError, TrialStatus


@dataclass(frozen=True)
class WorkerFacts:
    """What the parent knows when the worker is gone.

    Attributes:
        result: the worker's ``result`` event, if one arrived.
        error: the worker's ``error`` event, if one arrived.
        user_model: the model came from the user's file (so an exception is theirs to fix).
        timed_out: the parent killed the worker at its time limit.
        timeout_s: that limit, for the message.
        over_memory_limit: the parent saw the worker's memory pass the limit and killed it.
        memory_limit_mb: that limit, for the message.
        returncode: the worker's exit status (negative: killed by that signal).
        log_tail: the end of the worker's stdout/stderr, for a crash with no error event.
        batch_size: the trial's batch size, to check the result's throughput.
        measured_step_ms: the times of the measured ``step`` events the parent received, which
            the result must agree with.
        foreign_lines: lines on the event channel that mptune's code did not write.
        hazards: what the numerics probe and the model checks found.
        phase: the worker's phase as its last ``phase`` message said (``import`` before
            any): where it was when it was killed at a limit or died.
        stack: every thread's Python stack, which the worker wrote when its time was up
            (None: it could not say, e.g. stopped).
        model_path: the user's model file, to find where in it a stack points; None for
            a built-in.
        model_spec: the model as the user gave it, to name that place (``model.py:12``).
    """

    result: ResultMessage | None
    error: ErrorMessage | None
    user_model: bool
    timed_out: bool = False
    timeout_s: float | None = None
    over_memory_limit: bool = False
    memory_limit_mb: float | None = None
    returncode: int | None = None
    log_tail: str = ""
    batch_size: int | None = None
    measured_step_ms: tuple[float, ...] | None = None
    foreign_lines: int = 0
    hazards: tuple[Hazard, ...] = ()
    phase: str = ""
    stack: str | None = None
    model_path: str | None = None
    model_spec: str | None = None


def classify(facts: WorkerFacts) -> tuple[TrialStatus, TrialError | None]:
    """Map what happened to a status and, unless ``ok``, the reason."""
    if facts.over_memory_limit:
        return TrialStatus.OOM, TrialError(
            f"worker memory passed the limit of {facts.memory_limit_mb:.0f} MB"
        )
    # Where the worker was when it was killed or died: the phase, in words.
    during = f" while {PHASES[facts.phase]}" if facts.phase in PHASES else ""
    phase = facts.phase or None
    if facts.timed_out:
        return TrialStatus.TIMEOUT, TrialError(
            f"killed at the time limit of {facts.timeout_s:g} s{during}",
            location=stack_location(facts.stack, facts.model_path, facts.model_spec),
            traceback=facts.stack,
            phase=phase,
        )
    if facts.error is not None:
        return _classify_error(facts.error, facts.user_model)
    unsafe = next((h for h in facts.hazards if h.unsafe), None)
    if facts.result is None:
        message = _death_message(facts.returncode) + during
        if facts.foreign_lines:
            message += (
                f"; the model wrote {facts.foreign_lines} line(s) to mptune's event channel, "
                "which were ignored"
            )
        return TrialStatus.CRASHED, TrialError(
            message, traceback=facts.log_tail or None, phase=phase
        )
    contradiction = _contradiction(facts)
    if contradiction is not None:
        return TrialStatus.CRASHED, TrialError(contradiction)
    if unsafe is not None:
        # The figures stand (taken with the hazard's fix applied); the policy does not.
        where = f" in {unsafe.layer}" if unsafe.layer else ""
        where += f" at {unsafe.at}" if unsafe.at else ""  # a trap's place (issue 71)
        return TrialStatus.UNSAFE, TrialError(
            f"{unsafe.policy} is unsafe for this model: {TITLES[unsafe.kind]}{where}"
        )
    return _classify_result(facts.result)


#: How far a result's throughput may be from what its step events imply (rounding of step times).
RESULT_TOLERANCE = 0.05


def _contradiction(facts: WorkerFacts) -> str | None:
    """Why the result cannot be trusted: it disagrees with the step events the parent saw."""
    if facts.measured_step_ms is None or facts.result is None:
        return None
    steps = list(facts.measured_step_ms)
    result = facts.result
    claimed_steps = len(result.losses)
    if claimed_steps != len(steps):
        return (
            f"the result reports {claimed_steps} measured steps, but the worker reported "
            f"{len(steps)}: the result is not trusted"
        )
    # The median figure must be the batch size over the median step time, and the wall figure
    # cannot pass the batch size over the mean step time (the window holds every step and the
    # gaps between them). A result from before the median figure was kept apart had only it.
    median = (
        result.median_samples_per_second
        if result.median_samples_per_second is not None
        else result.samples_per_second
    )
    wall = result.samples_per_second if result.median_samples_per_second is not None else None
    if steps and facts.batch_size and isinstance(median, (int, float)):
        p50_s = statistics.median(steps) / 1000
        implied = facts.batch_size / p50_s if p50_s > 0 else math.inf
        if not math.isclose(median, implied, rel_tol=RESULT_TOLERANCE):
            return (
                f"the result claims {median:,.0f} samples/s, but its step times imply "
                f"{implied:,.0f}: the result is not trusted"
            )
    if steps and facts.batch_size and isinstance(wall, (int, float)):
        mean_s = statistics.fmean(steps) / 1000
        ceiling = facts.batch_size / mean_s if mean_s > 0 else math.inf
        if wall > ceiling * (1 + RESULT_TOLERANCE):
            return (
                f"the result claims {wall:,.0f} samples/s over its window, more than its step "
                f"times allow ({ceiling:,.0f}): the result is not trusted"
            )
    return None


def _classify_error(error: ErrorMessage, user_model: bool) -> tuple[TrialStatus, TrialError]:
    reason = TrialError(
        message=error.message or error.exception or "unknown error",
        location=error.location,
        exception=error.exception,
        traceback=error.traceback,
    )
    if error.oom:
        return TrialStatus.OOM, reason
    # The model fails under this policy and float32 runs the same data: not the user's error.
    if error.policy_caused:
        return TrialStatus.UNSAFE, reason
    # The setup's XLA (say) fails and the same step trains without it: the knob, not the model.
    if error.unsupported:
        return TrialStatus.UNSUPPORTED, reason
    # mptune's own code failed: its bug, whatever model it ran, with the traceback for a report.
    if error.internal:
        return TrialStatus.CRASHED, TrialError(
            message=f"{reason.message} (a bug in mptune: please report it with the traceback "
            "in this trial's record)",
            location=None,
            exception=reason.exception,
            traceback=reason.traceback,
        )
    # A user's model owns every other exception in its trial (shapes, its layers, its data);
    # with a built-in model an exception is mptune's own bug, reported as a crash.
    if error.user_code or user_model:
        return TrialStatus.USER_ERROR, reason
    return TrialStatus.CRASHED, reason


def _classify_result(result: ResultMessage) -> tuple[TrialStatus, TrialError | None]:
    losses = [math.nan if v is None else float(v) for v in result.losses]
    if losses and not math.isfinite(losses[-1]):
        return TrialStatus.DIVERGED, TrialError(
            f"the loss is not finite at the last step ({result.nonfinite_steps or 0} "
            "non-finite steps)"
        )
    if result.weights_finite is False:
        return TrialStatus.DIVERGED, TrialError(
            "weights hold inf/NaN after training: a step overflowed and was applied "
            "(a fixed loss scale never skips such a step)"
        )
    scales = [s for s in result.loss_scales if s is not None]
    skipped = result.skipped_flags
    if scales and scales[-1] <= 1.0 and skipped and skipped[-1]:
        return TrialStatus.DIVERGED, TrialError(
            "the dynamic loss scale collapsed to 1 and steps still overflow"
        )
    return TrialStatus.OK, None


def lost(why: str) -> tuple[TrialStatus, TrialError]:
    """A trial whose worker is gone without a result or an error, as the search finds it
    (``why``: its heartbeat stopped, its stored trial closed without a result): crashed, for
    the search to run again."""
    return TrialStatus.CRASHED, TrialError(why)


#: A frame of a stack as Python's faulthandler writes it: ``  File "path", line 12 in name``.
_STACK_FRAME = re.compile(r'^\s*File "(?P<path>.+)", line (?P<line>\d+) in (?P<name>\S+)', re.M)


def stack_location(stack: str | None, path: str | None, shown_as: str | None) -> str | None:
    """The innermost frame of ``stack`` (faulthandler's dump, most recent call first) in the
    user's file ``path``, as ``file:line`` (the file as ``shown_as``); None when none is."""
    if not stack or not path:
        return None
    target = os.path.realpath(path)
    for frame in _STACK_FRAME.finditer(stack):
        if os.path.realpath(frame["path"]) == target:
            return f"{shown_as or os.path.basename(path)}:{frame['line']}"
    return None


def _death_message(returncode: int | None) -> str:
    if returncode is None:
        return "the worker ended without a result"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker was killed by {name} without a result"
    return f"the worker exited with status {returncode} without a result"
