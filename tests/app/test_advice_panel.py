"""The hardware panel gives the advice as ``mptune detect`` does (issue 54): each policy with its
reason, measured here where a search on this kind of machine measured it, in the CLI's order."""

from __future__ import annotations

from test_search_strategy import Machine
from test_unused_gpu import plain

from tuner import api
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSpace
from tuner.search.tune import tune


def _advice(window) -> list[str]:
    """The advice list as the user reads it, a line per policy and per measurement."""
    return [line.strip() for line in plain(window.hardware.advice.text()).splitlines() if line]


def test_the_panel_lists_the_advice_then_what_was_measured_here(make_window, qtbot) -> None:
    window = make_window()
    profile = window.profile
    assert not window.hardware.advice.isHidden()
    # Nothing measured here yet: the prior's order and reasons, as detect prints them.
    rows = api.advice_rows(profile)
    assert _advice(window)[0] == f"{api.advice_heading()}:"
    assert [line.split(": ", 1)[0].split(". ")[-1] for line in _advice(window)[1:]] == [
        row.policy for row in rows
    ]
    assert rows[0].reason in _advice(window)[1]

    # A search on this machine, stored where the Search panel points: after the next search
    # (or at start) the advice says what it measured, measured policies first, fastest first.
    tune(
        TuneRequest(
            "builtin:mlp",
            storage=window.setup.storage.text(),
            study="here",
            profile=profile,
            space=SearchSpace(policies=("float32", "mixed_bfloat16", "mixed_float16")),
        ),
        runner=Machine(
            speed={"float32": 4000, "mixed_bfloat16": 6000, "mixed_float16": 30}, knee=64
        ),
        clock=lambda: 0.0,
    )
    window._read_measured()
    qtbot.waitUntil(lambda: window.hardware.measured is not None, timeout=10_000)
    measured = api.measured_here(profile, window.setup.storage.text())
    want = api.advice_rows(profile, measured)
    lines = _advice(window)
    assert lines[0] == f"{api.advice_heading(measured)}:"
    assert "measured on this machine first" in lines[0]
    text = "\n".join(lines)
    positions = [text.index(row.policy) for row in want]
    assert positions == sorted(positions)
    assert want[0].policy == "mixed_bfloat16"
    for row in want:
        assert row.measured
        assert row.measured in text
    # As the command line words it, from the same rows.
    assert want == api.advice_rows(profile, measured)
