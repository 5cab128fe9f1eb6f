from __future__ import annotations

import ast
import dataclasses
import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tuner.search import events as search_events
from tuner.search.events import WorkerReported
from tuner.trials.events import TOKEN_FIELD, EventReader, as_float, encode_event
from tuner.trials.hazards import Hazard
from tuner.trials.messages import (
    ErrorMessage,
    HazardMessage,
    ImportedMessage,
    MemoryMessage,
    NumericsMessage,
    ObservedMessage,
    OtherMessage,
    PhaseMessage,
    PredictionMessage,
    ReadyMessage,
    ResultMessage,
    StartedMessage,
    StepMessage,
    WarningMessage,
    WorkerMessage,
    parse_message,
)

ROOT = Path(__file__).resolve().parents[2]


def test_events_split_across_reads_are_reassembled() -> None:
    reader = EventReader()
    data = encode_event({"type": "step", "step": 1}) + encode_event({"type": "step", "step": 2})
    first = reader.feed(data[:7])
    rest = reader.feed(data[7:])
    assert first == []
    assert [e["step"] for e in rest] == [1, 2]


def test_junk_lines_are_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    reader = EventReader()
    stream = (
        b"hello from the user's print\n"
        + encode_event({"type": "started"})
        + b"[1, 2, 3]\n"
        + b'{"no_type": 1}\n'
        + b"\n"
        + encode_event({"type": "result"})
    )
    with caplog.at_level(logging.WARNING):
        events = reader.feed(stream)
    assert [e["type"] for e in events] == ["started", "result"]
    assert reader.bad_lines == 3
    assert "not JSON" in caplog.text
    assert "no 'type' field" in caplog.text


def test_whole_last_line_without_newline_is_kept() -> None:
    reader = EventReader()
    assert reader.feed(b'{"type": "result", "x": 1}') == []
    assert reader.close() == [{"type": "result", "x": 1}]


def test_truncated_last_line_is_dropped_not_fatal() -> None:
    reader = EventReader()
    reader.feed(encode_event({"type": "step", "step": 1}) + b'{"type": "res')
    assert reader.close() == []
    assert reader.bad_lines == 1


def test_non_finite_floats_survive_the_channel() -> None:
    reader = EventReader()
    (event,) = reader.feed(encode_event({"type": "step", "loss": math.nan, "scale": math.inf}))
    assert math.isnan(as_float(event["loss"]))
    assert as_float(event["scale"]) == math.inf
    assert as_float(None) is None


def test_an_event_needs_a_type() -> None:
    with pytest.raises(ValueError, match="an event needs a 'type'"):
        encode_event({"step": 1})


# -- typed worker messages ------------------------------------------------------------------
UNDERFLOW = Hazard(
    "underflow", "mixed_float16", None, "2.1% of gradient values flush to zero", "scale the loss"
)
#: One message of every type the worker (and the parent) sends, with every field set.
EVERY_MESSAGE: list[WorkerMessage] = [
    ImportedMessage(),
    StartedMessage(t=0.5, pid=42, device="cpu", versions={"keras": "3.5"}, warm=True),
    PhaseMessage(t=0.6, phase="probe"),
    HazardMessage(t=0.7, hazard=UNDERFLOW),
    NumericsMessage(t=0.8, figures={"probe_s": 0.2, "layer_errors": [["dense", 0.01]]}),
    PredictionMessage(t=0.85, figures={"peak_mb": 900.0, "limit_mb": 800.0, "compile_s": 1.5}),
    WarningMessage(t=0.9, code="probe", message="the probe did not compare"),
    StepMessage(
        t=1.0, phase="measure", step=3, loss=0.5, loss_scale=1024.0, skipped=True, time_ms=2.5
    ),
    ResultMessage(
        t=2.0,
        samples_per_second=100.0,
        median_samples_per_second=101.0,
        step_time_ms={"p50": 1.0, "p90": 2.0},
        peak_memory_mb=512.0,
        memory_kind="cpu_rss",
        memory_method="VmHWM",
        losses=(1.0, 0.5),
        loss_scales=(None, None),
        skipped_flags=(False, True),
        skipped_steps=1,
        nonfinite_steps=0,
        weights_finite=True,
        build_s=0.1,
        probe_s=None,
        warmup_s=0.2,
        measure_s=0.3,
        executions=2,
    ),
    ErrorMessage(
        t=3.0,
        exception="ValueError",
        message="shapes differ",
        location="model.py:3",
        phase="build",
        user_code=True,
        traceback="Traceback ...",
    ),
    ObservedMessage(
        t=1.5,
        setup={"policy": "mixed_bfloat16", "batch_size": 32, "xla": True},
        at={"policy": "train.py:12", "batch_size": "train.py:40"},
        reason=None,
    ),
    ReadyMessage(t=4.0),
    MemoryMessage(t=0.25, rss_mb=300.5),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: m.type)
def test_each_message_round_trips_through_its_wire_form(message: WorkerMessage) -> None:
    data = message.to_dict()
    assert data["type"] == message.type
    # What the channel carries: the encoded line, read back by the parent's reader.
    (line,) = EventReader().feed(encode_event(data))
    assert parse_message(line) == message


def test_non_finite_figures_keep_their_wire_spelling() -> None:
    step = parse_message({"type": "step", "loss": "nan", "loss_scale": "inf", "phase": "warmup"})
    assert isinstance(step, StepMessage)
    assert step.loss is not None
    assert math.isnan(step.loss)
    assert step.loss_scale == math.inf
    assert step.to_dict()["loss"] == "nan"
    assert step.to_dict()["loss_scale"] == "inf"
    result = parse_message({"type": "result", "losses": [1.0, "-inf"]})
    assert isinstance(result, ResultMessage)
    assert result.losses == (1.0, -math.inf)


def test_missing_fields_take_their_defaults() -> None:
    step = parse_message({"type": "step"})
    assert step == StepMessage()
    assert (step.phase, step.step, step.loss, step.skipped) == ("", None, None, False)
    result = parse_message({"type": "result", "samples_per_second": 5})
    assert isinstance(result, ResultMessage)
    assert result.samples_per_second == 5.0
    assert result.losses == ()
    assert result.executions is None
    error = parse_message({"type": "error", "exception": "OSError"})
    assert isinstance(error, ErrorMessage)
    assert error.message == ""
    assert not error.oom


@pytest.mark.parametrize(
    "data, kind, problem",
    [
        ({"type": "telemetry", "gpu": 1}, "telemetry", None),  # a newer worker's type
        ({"type": "step", "step": "three"}, "step", "ValueError"),
        ({"type": "step", "loss": [1]}, "step", "ValueError: a malformed loss"),
        ({"type": "hazard", "policy": "mixed_float16"}, "hazard", "ValueError"),  # no kind
        ({"type": "hazard", **UNDERFLOW.to_dict(), "kind": "gremlins"}, "hazard", "ValueError"),
        ({"type": "started", "versions": ["not", "a", "dict"]}, "started", "AttributeError"),
        ({"no_type": 1}, "", None),
    ],
)
def test_unknown_or_unreadable_messages_are_kept_raw(
    data: dict[str, Any], kind: str, problem: str | None
) -> None:
    message = parse_message(data)
    assert isinstance(message, OtherMessage)
    assert message.kind == kind
    assert message.data == data
    assert message.to_dict() == data
    assert (message.problem or "").startswith(problem or "")
    assert (message.problem is None) is (problem is None)


def test_a_message_that_is_no_object_is_kept_too() -> None:
    message = parse_message([1, 2])  # type: ignore[arg-type]
    assert isinstance(message, OtherMessage)
    assert message.problem == "not a JSON object"


def test_messages_cannot_be_read_by_key() -> None:
    """The faces read attributes: a record read like the old dicts fails at once."""
    for message in [*EVERY_MESSAGE, OtherMessage("x", {"type": "x"})]:
        assert not hasattr(message, "__getitem__")
        assert not hasattr(message, "get")
        with pytest.raises(TypeError):
            message["type"]  # type: ignore[index]


def test_worker_reported_round_trips_its_typed_message() -> None:
    for message in [*EVERY_MESSAGE, OtherMessage("telemetry", {"type": "telemetry", "x": 1})]:
        event = WorkerReported(7, message)
        again = search_events.from_dict(json.loads(json.dumps(event.to_dict())))
        assert again == event


def _emitted_fields() -> dict[str, set[str]]:
    """The message types the worker's code emits and the keywords it gives each, read from
    its calls ``<something>.emit("type", field=...)`` (``**`` spreads are not counted), and
    those it sends as records, ``<something>.send(XMessage(...))`` (the record is the
    declaration: what it sends, the parent reads)."""
    found: dict[str, set[str]] = {}
    records = {type(m).__name__: type(m).type for m in EVERY_MESSAGE}
    for path in sorted((ROOT / "tuner" / "worker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "send"
                and node.args
                and isinstance(node.args[0], ast.Call)
                and isinstance(node.args[0].func, ast.Name)
                and node.args[0].func.id in records
            ):
                keywords = {k.arg for k in node.args[0].keywords if k.arg is not None}
                found.setdefault(records[node.args[0].func.id], set()).update(keywords)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                keywords = {k.arg for k in node.keywords if k.arg is not None}
                found.setdefault(str(node.args[0].value), set()).update(keywords)
    return found


def test_every_message_the_worker_emits_has_a_record_with_its_fields() -> None:
    """A field the worker starts sending, or a new type, needs its record here too (else the
    parent would drop it, or read the type as an OtherMessage)."""
    emitted = _emitted_fields()
    assert set(emitted) == {
        "started", "phase", "hazard", "numerics", "prediction", "warning", "step", "result",
        "error", "ready", "observed",
    }  # fmt: skip
    records = {type(m).type: type(m) for m in EVERY_MESSAGE}
    for kind, keywords in emitted.items():
        assert kind in records, f"the worker emits {kind!r}, which has no message record"
        names = {f.name for f in dataclasses.fields(records[kind])}
        assert keywords <= names, f"{kind}: {sorted(keywords - names)} are not read by the parent"


def test_the_worker_error_facts_are_fields_of_the_error_message() -> None:
    """The error is sent as ``**facts``: the keys blame's ``describe`` returns and its
    ``failure_facts`` sets or updates."""
    source = (ROOT / "tuner" / "worker" / "blame.py").read_text()
    names = {f.name for f in dataclasses.fields(ErrorMessage)}
    tree = ast.parse(source)
    describe = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "describe"
    )
    returned = next(n for n in ast.walk(describe) if isinstance(n, ast.Return))
    assert isinstance(returned.value, ast.Dict)
    keys = {k.value for k in returned.value.keys if isinstance(k, ast.Constant)}
    set_keys = set(re.findall(r'found\["(\w+)"\] =', source))
    updated = {
        k.arg
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update"
        for k in n.keywords
        if k.arg
    }
    assert set_keys >= {"policy_caused", "unsupported", "message"}  # the verdicts
    assert updated >= {"internal", "user_code", "location"}
    keys |= set_keys | updated
    assert keys
    assert keys <= names, sorted(keys - names)


def test_the_runner_hands_its_listener_typed_messages_and_reads_the_result_from_them() -> None:
    """The parent's side without a worker: the lines a worker writes, fed to the trial's
    runner as they arrive, reach the listener as records and make the trial's result."""
    from tuner.trials.models import parse_model_spec
    from tuner.trials.result import TrialStatus
    from tuner.trials.runner import _WorkerRun
    from tuner.trials.spec import TrialSpec

    spec = TrialSpec.create("builtin:mlp", "mixed_float16", 8, steps=2, device="cpu")
    heard: list[WorkerMessage] = []
    run = _WorkerRun(spec, parse_model_spec(spec.model), heard.append, None)
    steps = [
        StepMessage(t=1.0 + i, phase="measure", step=i + 1, loss=v, loss_scale=512.0, time_ms=8.0)
        for i, v in enumerate((0.9, 0.8))
    ]
    result = dataclasses.replace(
        next(m for m in EVERY_MESSAGE if isinstance(m, ResultMessage)),
        samples_per_second=1000.0,
        median_samples_per_second=1000.0,
        losses=(0.9, 0.8),
        loss_scales=(512.0, 512.0),
        skipped_flags=(False, False),
        skipped_steps=0,
    )
    wire = [
        StartedMessage(t=0.1, pid=0, device="cpu", versions={"keras": "3.5"}),
        HazardMessage(t=0.2, hazard=UNDERFLOW),
        NumericsMessage(t=0.3, figures={"probe_s": 0.25}),
        WarningMessage(t=0.4, code="probe", message="compared 3 layers"),
        *steps,
        result,
        ReadyMessage(t=3.0),
    ]
    # Each line carries the trial's token, as the worker's channel writes it.
    lines = [*(m.to_dict() for m in wire), {"type": "telemetry"}]
    data = b"".join(encode_event({**line, TOKEN_FIELD: run.token}) for line in lines)
    for event in run.reader.feed(data):
        run._handle(parse_message(event), 0.0)
    assert heard == [*wire[:-1], OtherMessage("telemetry", {"type": "telemetry"})]
    assert run.ready  # a warm worker's "ready" is the runner's own, never a listener's
    trial = run._assemble(TrialStatus.OK, None, 3.5)
    assert trial.device == "cpu"
    assert trial.versions == {"keras": "3.5"}
    assert trial.losses == (0.9, 0.8)
    assert trial.loss_scales == (512.0, 512.0)
    assert trial.samples_per_second == 1000.0
    assert trial.warnings == ("compared 3 layers",)
    assert trial.hazards == (UNDERFLOW,)
    assert trial.numerics == {"t": 0.3, "probe_s": 0.25}
    assert trial.timings.build_s == result.build_s
    facts = run._facts(0, "")
    assert facts.measured_step_ms == (8.0, 8.0)
    assert facts.result == result  # typed, as sent
