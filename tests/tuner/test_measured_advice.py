"""The advice says what was measured here (issue 33, item 10): `mptune detect` lists a policy by
its prior until a search on this kind of machine has measured it, then by the measurement, with
the figure, the setup, the model and the session."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import mptune
from test_search_strategy import Machine

from tuner import api
from tuner.search.measured import measured_here
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSpace
from tuner.search.tune import tune


def _search_here(storage: str, study: str, speeds: dict[str, float]) -> None:
    """A scripted search with this machine's own profile: stored as measured on it."""
    tune(
        TuneRequest(
            "builtin:mlp",
            storage=storage,
            study=study,
            profile=api.detect(),
            space=SearchSpace(policies=("float32", "mixed_bfloat16", "mixed_float16")),
        ),
        runner=Machine(speed=speeds, knee=64),
        clock=lambda: 0.0,
    )


def test_detect_reports_what_searches_measured_on_this_machine(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'measured.db'}"
    before = mptune("detect", "--storage", storage)
    assert before.returncode == 0, before.stderr
    assert "measured here" not in before.stdout

    _search_here(
        storage, "slow-f16", {"float32": 4000, "mixed_bfloat16": 6000, "mixed_float16": 30}
    )
    _search_here(storage, "again", {"float32": 4000, "mixed_bfloat16": 5000, "mixed_float16": 20})

    measured = measured_here(api.detect(), storage)
    assert measured["mixed_float16"].speedup_vs_float32 < 0.01
    assert measured["mixed_float16"].sessions == 2
    assert measured["mixed_bfloat16"].speedup_vs_float32 > 1.2

    after = mptune("detect", "--storage", storage)
    assert after.returncode == 0, after.stderr
    advice = after.stdout.split("Advice")[1].split("Verdict")[0]
    # Ordered by what was measured: bfloat16 first, float32, float16 last - whatever the
    # prior said of this CPU's float16 units.
    order = [p for p in ("mixed_bfloat16", "float32", "mixed_float16") if p in advice]
    assert [advice.index(f"{i}. {p}") for i, p in enumerate(order, 1)] == sorted(
        advice.index(f"{i}. {p}") for i, p in enumerate(order, 1)
    )
    f16 = advice.split(f"{len(order)}. mixed_float16")[1]
    assert "measured here: 0.01x float32 at best" in " ".join(f16.split())
    assert "session slow-f16" in f16
    assert "2 sessions" in f16

    as_json = json.loads(mptune("detect", "--storage", storage, "--json").stdout)
    assert as_json["measured"]["mixed_float16"]["session"] == "slow-f16"


def test_sessions_of_another_machine_are_not_its_measurements(tmp_path: Path) -> None:
    from test_search_strategy import FakeProfile

    storage = f"sqlite:///{tmp_path / 'other.db'}"
    tune(
        TuneRequest("builtin:mlp", storage=storage, study="elsewhere", profile=FakeProfile()),
        runner=Machine(speed={"float32": 1000, "mixed_bfloat16": 2000, "mixed_float16": 10}),
        clock=lambda: 0.0,
    )
    assert measured_here(api.detect(), storage) == {}


def test_an_unreadable_store_leaves_the_advice_as_it_was(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.db"
    bad.write_text("this is not sqlite")
    proc = mptune("detect", "--storage", f"sqlite:///{bad}")
    assert proc.returncode == 0, proc.stderr
    assert "Advice (most promising first)" in proc.stdout
