"""Issue 36: a trial's figures are declared once. The worker's ``result`` message and the trial's
result are both :class:`~tuner.trials.result.Measured` records; they, and the worker's stage
times, are written and read from their declared fields (:mod:`tuner.record`).

The tests are derived from the declarations: each field gets a value of its declared type that
differs from its default, so a field added to a record and lost anywhere on the way (the
worker's wire, the runner's assembling, storage) fails here without the test naming it."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any

import pytest

from tuner import record
from tuner.trials.events import TOKEN_FIELD, encode_event
from tuner.trials.hazards import KINDS, Hazard
from tuner.trials.messages import ResultMessage, StartedMessage, parse_message
from tuner.trials.models import parse_model_spec
from tuner.trials.result import (
    InputRate,
    Measured,
    MemoryPrediction,
    StageTimes,
    Timings,
    TrialError,
    TrialResult,
    TrialStatus,
)
from tuner.trials.runner import _WorkerRun
from tuner.trials.spec import TrialSpec


def _value(hint: Any, i: int) -> Any:
    """A value of the declared type ``hint``, told apart by ``i``, never a field's default."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in typing.get_args(hint) if a is not type(None)), i)
    if origin is tuple:
        return (_value(typing.get_args(hint)[0], i), _value(typing.get_args(hint)[0], i + 1))
    if origin is dict:
        return {f"k{i}": _value(typing.get_args(hint)[1], i)}
    if hint is bool:
        return True  # every bool field defaults to False or None
    if hint is int:
        return 3 + i
    if hint is float:
        return 1.5 + i
    if hint is str:
        return f"text {i}"
    if hint is Any:
        return f"any {i}"
    if hint is InputRate:
        return InputRate(samples_per_second=900.0 + i, kind="arrays", fed_by="x", fit_loop=True)
    if hint is Hazard:  # its kind and severity are checked against their lists
        return Hazard(
            kind=KINDS[i % len(KINDS)],
            policy="mixed_float16",
            layer=None,
            evidence=f"seen {i}",
            fix="fix it",
            severity="unsafe",
            figure=f"{i}%",
        )
    if hint is TrialStatus:
        return TrialStatus.OK
    if hint is TrialSpec:
        return TrialSpec.create("builtin:mlp", "mixed_float16", 8 + i, steps=2, device="cpu")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _every_field(hint, i)
    raise AssertionError(f"no test value for {hint!r}: teach _value the new type")


def _values(record_type: type, start: int = 0) -> dict[str, Any]:
    hints = typing.get_type_hints(record_type)
    return {
        f.name: _value(hints[f.name], start + n)
        for n, f in enumerate(dataclasses.fields(record_type))
        if f.init
    }


def _every_field(record_type: type, start: int = 0) -> Any:
    return record_type(**_values(record_type, start))


def test_the_result_message_and_the_trial_result_are_one_record() -> None:
    """Both are Measured records: no figure of it is declared a second time."""
    assert issubclass(ResultMessage, Measured)
    assert issubclass(TrialResult, Measured)
    assert issubclass(ResultMessage, StageTimes)
    assert issubclass(Timings, StageTimes)
    for record_type in (ResultMessage, TrialResult, Timings):
        names = [f.name for f in dataclasses.fields(record_type)]
        assert len(names) == len(set(names))


def test_every_figure_the_worker_sends_reaches_the_trial_result() -> None:
    """A result message with every field set, on the wire and through the runner: the trial
    keeps each Measured figure and each stage time as the worker sent them."""
    sent = _every_field(ResultMessage)
    spec = TrialSpec.create("builtin:mlp", "float32", 8, steps=2, device="cpu")
    run = _WorkerRun(spec, parse_model_spec(spec.model), None, None)
    wire = [StartedMessage(t=0.1, pid=1, device="cpu"), sent]
    data = b"".join(encode_event({**m.to_dict(), TOKEN_FIELD: run.token}) for m in wire)
    for event in run.reader.feed(data):
        run._handle(parse_message(event), 0.0)
    assert run.result == sent  # the wire loses nothing
    trial = run._assemble(TrialStatus.OK, None, 9.0)
    assert record.part(trial, Measured) == record.part(sent, Measured)
    assert record.part(trial.timings, StageTimes) == record.part(sent, StageTimes)
    assert trial.device_samples_per_second == sent.samples_per_second
    assert trial.samples_per_second == sent.input.samples_per_second  # fit's own loop ranks
    assert trial.steps_completed == len(sent.losses)
    assert trial.timings.input_s == sent.input.seconds
    assert trial.timings.total_s == 9.0


def test_a_trial_result_with_every_field_set_survives_storage() -> None:
    result = _every_field(TrialResult)
    stored = json.loads(json.dumps(result.to_dict()))
    assert TrialResult.from_dict(stored) == result


def test_fields_added_later_are_left_out_at_their_default_so_older_records_match() -> None:
    """A result stored before calibration, pruning, the memory prediction or the error's phase
    existed is written again the same: those fields are left out while at their defaults."""
    spec = TrialSpec.create("builtin:mlp", "float32", 8, steps=2, device="cpu")
    result = TrialResult(spec, TrialStatus.OOM, error=TrialError("out of memory"))
    data = result.to_dict()
    for name in ("calibration_steps", "warmup_updates", "pruned", "memory_prediction"):
        assert name not in data
    assert "phase" not in data["error"]
    assert "compile_s" not in data["timings"]
    assert TrialResult.from_dict(data) == result
    predicted = dataclasses.replace(result, memory_prediction=MemoryPrediction(peak_mb=10.0))
    assert predicted.to_dict()["memory_prediction"]["peak_mb"] == 10.0


def test_json_has_no_nan_and_the_declared_type_says_what_null_was() -> None:
    """A loss (a ``float``) stored as null is NaN again; a figure that may be missing
    (``float | None``) stays None."""
    spec = TrialSpec.create("builtin:mlp", "float32", 8, steps=2, device="cpu")
    result = TrialResult(
        spec, TrialStatus.DIVERGED, losses=(0.5, math.nan), loss_scales=(None, 2.0)
    )
    stored = json.loads(json.dumps(result.to_dict()))
    assert stored["losses"] == [0.5, None]
    assert stored["peak_memory_mb"] is None
    again = TrialResult.from_dict(stored)
    assert again.losses[0] == 0.5
    assert math.isnan(again.losses[1])
    assert again.loss_scales == (None, 2.0)
    assert again.peak_memory_mb is None


def test_a_worker_input_without_a_finite_rate_is_none() -> None:
    assert InputRate.read({"samples_per_second": "nan", "kind": "arrays", "fed_by": ""}) is None
    assert InputRate.read({"samples_per_second": 0.0, "kind": "arrays", "fed_by": ""}) is None
    assert InputRate.read("junk") is None
    fed = InputRate.read({"samples_per_second": 5.0, "kind": "tf_data", "fed_by": "x"})
    assert fed == InputRate(samples_per_second=5.0, kind="tf_data", fed_by="x")


@pytest.mark.parametrize("record_type", [InputRate, MemoryPrediction, Timings, TrialError])
def test_each_nested_record_round_trips(record_type: type) -> None:
    value = _every_field(record_type)
    assert record_type.from_dict(json.loads(json.dumps(value.to_dict()))) == value  # type: ignore[attr-defined]
