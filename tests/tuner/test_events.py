from __future__ import annotations

import logging
import math

import pytest

from tuner.trials.events import EventReader, as_float, encode_event


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
    assert "not JSON" in caplog.text and "no 'type' field" in caplog.text


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
    with pytest.raises(ValueError):
        encode_event({"step": 1})
