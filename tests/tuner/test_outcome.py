"""The status decision, on scripted facts (no worker, no TensorFlow): the worker's messages
written as their wire form and read as the runner reads them (typed records)."""

from __future__ import annotations

import math
import signal

from tuner.trials.messages import ErrorMessage, ResultMessage
from tuner.trials.outcome import WorkerFacts, classify, lost
from tuner.trials.result import TrialStatus


def facts(**kwargs) -> WorkerFacts:
    values = {"result": None, "error": None, "user_model": False}
    values.update(kwargs)
    if isinstance(values["result"], dict):
        values["result"] = ResultMessage.from_dict(values["result"])
    if isinstance(values["error"], dict):
        values["error"] = ErrorMessage.from_dict(values["error"])
    return WorkerFacts(**values)


def test_a_lost_worker_is_a_crash_with_its_reason() -> None:
    status, error = lost("no heartbeat for 60 s")
    assert status is TrialStatus.CRASHED
    assert error.message == "no heartbeat for 60 s"


def ok_result(**kwargs) -> dict:
    result = {
        "losses": [2.0, 1.5],
        "loss_scales": [None, None],
        "skipped_flags": [False, False],
        "weights_finite": True,
    }
    result.update(kwargs)
    return result


def test_ok() -> None:
    assert classify(facts(result=ok_result())) == (TrialStatus.OK, None)


def test_oom_error_event() -> None:
    status, error = classify(
        facts(
            error={
                "oom": True,
                "message": "OOM when allocating",
                "exception": "ResourceExhaustedError",
            }
        )
    )
    assert status is TrialStatus.OOM
    assert error is not None
    assert error.exception == "ResourceExhaustedError"


def test_over_memory_limit_wins_over_anything_else() -> None:
    status, error = classify(facts(result=ok_result(), over_memory_limit=True, memory_limit_mb=100))
    assert status is TrialStatus.OOM
    assert "100 MB" in error.message


def test_timeout() -> None:
    status, error = classify(facts(timed_out=True, timeout_s=5))
    assert status is TrialStatus.TIMEOUT
    assert "5 s" in error.message


def test_user_error_keeps_location() -> None:
    status, error = classify(
        facts(error={"user_code": True, "message": "build_model() failed", "location": "m.py:3"})
    )
    assert status is TrialStatus.USER_ERROR
    assert error.location == "m.py:3"


def test_any_exception_with_a_user_model_is_a_user_error() -> None:
    status, _ = classify(facts(error={"message": "ValueError: shapes"}, user_model=True))
    assert status is TrialStatus.USER_ERROR


def test_exception_with_builtin_model_is_a_crash() -> None:
    status, _ = classify(facts(error={"message": "KeyError: x"}, user_model=False))
    assert status is TrialStatus.CRASHED


def test_death_without_result_is_a_crash_with_the_log() -> None:
    status, error = classify(facts(returncode=-signal.SIGKILL, log_tail="Segmentation fault"))
    assert status is TrialStatus.CRASHED
    assert "SIGKILL" in error.message
    assert error.traceback == "Segmentation fault"


def test_non_finite_last_loss_diverged() -> None:
    status, _ = classify(facts(result=ok_result(losses=[1.0, None], nonfinite_steps=1)))
    assert status is TrialStatus.DIVERGED
    status, _ = classify(facts(result=ok_result(losses=[1.0, math.inf])))
    assert status is TrialStatus.DIVERGED


def test_non_finite_weights_diverged() -> None:
    status, error = classify(facts(result=ok_result(weights_finite=False)))
    assert status is TrialStatus.DIVERGED
    assert "fixed loss scale" in error.message


def test_loss_scale_at_floor_still_overflowing_diverged() -> None:
    result = ok_result(loss_scales=[2.0, 1.0], skipped_flags=[True, True])
    status, error = classify(facts(result=result))
    assert status is TrialStatus.DIVERGED
    assert "collapsed" in error.message


def test_a_recovered_skip_is_fine() -> None:
    result = ok_result(loss_scales=[32768.0, 16384.0], skipped_flags=[True, False])
    assert classify(facts(result=result))[0] is TrialStatus.OK


def test_a_result_is_checked_against_its_step_events() -> None:
    steps = (10.0, 10.0, 10.0, 10.0)  # ms: 64 / 0.010 s = 6,400 samples/s at most
    honest = ok_result(
        losses=[1.0] * 4, samples_per_second=6000.0, median_samples_per_second=6400.0
    )
    status, _ = classify(facts(result=honest, batch_size=64, measured_step_ms=steps))
    assert status is TrialStatus.OK
    # A wall figure above what the steps allow, or a median figure they do not imply.
    for forged in (
        {**honest, "samples_per_second": 9000.0},
        {**honest, "median_samples_per_second": 9000.0},
    ):
        status, error = classify(facts(result=forged, batch_size=64, measured_step_ms=steps))
        assert status is TrialStatus.CRASHED
        assert "not trusted" in error.message
    # A result stored before the median figure was kept apart: its one figure is the median's.
    old = ok_result(losses=[1.0] * 4, samples_per_second=6400.0)
    status, _ = classify(facts(result=old, batch_size=64, measured_step_ms=steps))
    assert status is TrialStatus.OK


#: What faulthandler writes for a worker killed while its model's build_model() sleeps.
STACK = """Thread 0x00007fbc79f636c0 (most recent call first):
  File "/work/tuner/worker/channel.py", line 74 in _watch

Current thread 0x00007fbc7ae90b80 (most recent call first):
  File "/models/m.py", line 5 in build_model
  File "/work/tuner/worker/usercode.py", line 128 in call_user
  File "/models/m.py", line 9 in helper
"""


def test_a_timeout_says_its_phase_and_where_the_model_hung() -> None:
    status, error = classify(
        facts(timed_out=True, timeout_s=30, phase="build", stack=STACK, user_model=True,
              model_path="/models/m.py", model_spec="/models/m.py")
    )  # fmt: skip
    assert status is TrialStatus.TIMEOUT
    assert error.message == "killed at the time limit of 30 s while building the model"
    assert error.phase == "build"
    assert error.traceback == STACK
    assert error.location == "/models/m.py:5"  # the innermost frame in the model file
    _, started = classify(facts(timed_out=True, timeout_s=30, phase="import"))
    assert "while starting the worker" in started.message
    assert started.location is None


def test_a_death_says_its_phase() -> None:
    status, error = classify(facts(returncode=0, phase="build"))
    assert status is TrialStatus.CRASHED
    assert error.phase == "build"
    assert (
        error.message == "the worker exited with status 0 without a result while building the model"
    )


def test_an_error_stored_without_a_phase_reads_back_alike() -> None:
    from tuner.trials.result import TrialError, TrialResult
    from tuner.trials.spec import TrialSpec

    spec = TrialSpec.create("/models/m.py", "float32", 8)
    for error in (TrialError("x"), TrialError("x", phase="build")):
        result = TrialResult(spec, TrialStatus.TIMEOUT, error=error)
        data = result.to_dict()
        assert ("phase" in data["error"]) is (error.phase is not None)
        assert TrialResult.from_dict(data) == result
        # A hang in the model's own build fails every setup alike: the model's to fix.
        assert result.model_failed is (error.phase == "build")
