"""A knob added as one row of ``tuner.knobs.KNOBS``, and nothing else, reaches every place a
knob must (issue 52): the ``mptune trial`` flag and a real trial, what Keras is told, the
search's stage for it (tried, skipped, not reached), the neighbourhood around a pick, the
guard's float32 references (it groups the losses), the recommendation's evidence, the export
and the window's knobs tooltip.

The row goes into a copy of the source (tuner/, app/, assets/), which a subprocess then runs
(``PYTHONPATH``; the trial's worker inherits it): the copy differs from the source by the row
alone, so anything a knob needs beyond its row fails here. The knob clips the gradients' global
norm (Keras' ``global_clipnorm``), an optimizer argument; it is declared to group the losses so
that the guard's references carry it too.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The throwaway knob: the whole of its declaration.
ROW = """\
    Knob(
        name="clip",
        default=False,
        kind=bool,
        rank=70,
        label="Gradient clipping",
        evidence="clip",
        warm=True,
        option="clip",
        help="clip the gradients' global norm at 1 (a test's throwaway knob)",
        what="gradient clipping",
        stage="clip",
        keras2=False,
        short=lambda s: "clip" if s.clip else None,
        say=lambda s: "gradient clipping" if s.clip else None,
        aliases=lambda s: ("clip",),
        setting=lambda s: _on(s.clip),
        optimizer_argument=lambda s: ("global_clipnorm", 1.0 if s.clip else None),
        groups_losses=True,
        around=lambda a: (False, True) if a.searched else (a.value,),
    ),
"""

#: Run in the copy: each place the knob must reach, checked there.
CHECKS = r"""
import dataclasses, json, sys
from pathlib import Path

sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]) / "tuner")]  # the tests' helpers
import keras
from tests_support import make_config
from test_search_strategy import FakeProfile, Machine, tune_with

from app.tooltips import TOOLTIPS
from tuner import keras_setup
from tuner.cli import build_parser
from tuner.export.config import ConfigError
from tuner.export.render import render
from tuner.search.measures import reference_of
from tuner.search.recommend import evidence_rows
from tuner.search.session import TuningSession
from tuner.search.stages import neighbourhood
from tuner.search.space import SearchSettings
from tuner.setup import Setup
from tuner.trials.result import TrialError, TrialResult, TrialStatus

found = {}
base = ["trial", "--model", "builtin:mlp", "--policy", "float32", "--batch-size", "8"]
found["flag"] = [build_parser().parse_args(base + extra).clip for extra in ([], ["--clip"])]

def optimizer_of(setup):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    keras_setup.compile_model(model, setup, keras.optimizers.Adam(1e-3), "mse")
    return getattr(model.optimizer, "inner_optimizer", model.optimizer)

found["keras"] = [optimizer_of(Setup("float32", 8, clip=c)).global_clipnorm for c in (False, True)]
found["keras_float16"] = optimizer_of(Setup("mixed_float16", 8, clip=True)).global_clipnorm

plain = make_config()
clipped = dataclasses.replace(plain, setup=Setup("float32", 64, clip=True))
snippet = render(clipped, "snippet")
compile(snippet, "snippet", "exec")
found["export"] = ["global_clipnorm" in render(c, "snippet") for c in (plain, clipped)]
try:
    render(clipped, "snippet", "2")
    found["keras2"] = "rendered"
except ConfigError as exc:
    found["keras2"] = str(exc)
found["tooltip"] = TOOLTIPS["knobs"]
found["reference"] = reference_of(Setup("mixed_bfloat16", 64, clip=True)).to_dict()

class Clipping:
    # A scripted machine on which clipping is 30% faster (or refused: unsupported).
    def __init__(self, refuse=False):
        speed = {"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000}
        self.machine = Machine(speed=speed)
        self.refuse = refuse
    def __call__(self, spec, *args, **kwargs):
        result = self.machine(spec, *args, **kwargs)
        if not spec.setup.clip or not result.ok:
            return result
        if self.refuse:
            return TrialResult(spec, TrialStatus.UNSUPPORTED, error=TrialError("no clipping here"))
        sps = result.samples_per_second * 1.3
        return dataclasses.replace(result, samples_per_second=sps,
                                   step_time_ms={"p50": 1000.0 * spec.batch_size / sps})

looked_at = []  # every setup the neighbourhood looked at around a pick
neighbours = neighbourhood.neighbours
def recorded(ctx, precision, center):
    setups = neighbours(ctx, precision, center)
    looked_at.extend((center.result.spec.setup.to_dict(), s.to_dict()) for s in setups)
    return setups
neighbourhood.neighbours = recorded

def search(study, runner, **settings):
    looked_at.clear()
    url = f"sqlite:///{Path(sys.argv[2]) / 's.db'}"
    result = tune_with(model="builtin:cnn", storage=url, study=study, runner=runner,
                       profile=FakeProfile(), settings=SearchSettings(**settings))
    stored = TuningSession.load(study, url).trials()
    trials = [(t.stage, t.result.spec.setup.to_dict()) for t in stored]
    rec = result.recommendation
    return {"setup": rec.setup.to_dict(), "evidence": dict(evidence_rows(rec)),
            "not_tried": {i["what"]: i["why"] for i in rec.not_tried}, "notes": rec.notes,
            "trials": trials, "loss_gap": rec.loss_gap, "around": list(looked_at)}

found["pays"] = search("pays", Clipping())
found["refused"] = search("refused", Clipping(refuse=True))
found["cut_short"] = search("cut", Clipping(), max_trials=4)
print(json.dumps(found))
"""


def _copy_with_the_row(to: Path) -> Path:
    """The source (tuner/, app/, assets/) copied to ``to``, with :data:`ROW` added to KNOBS
    (tuner/knobs.py)."""
    for name in ("tuner", "app", "assets"):
        shutil.copytree(
            ROOT / name, to / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    setup = to / "tuner" / "knobs.py"
    text = setup.read_text()
    end = "        setting=lambda s: _on(s.remat),\n    ),\n)\n"
    assert text.count(end) == 1, "the last row of KNOBS moved: update this test's anchor"
    setup.write_text(text.replace(end, end[: -len(")\n")] + ROW + ")\n"))
    return to


@pytest.mark.slow
@pytest.mark.product_launcher  # the copy alone on PYTHONPATH: its mptune, its launcher
def test_a_knob_declared_by_its_row_alone_reaches_every_place(tmp_path: Path) -> None:
    copy = _copy_with_the_row(tmp_path / "src")
    added = [
        line[1:]
        for line in difflib.unified_diff(
            (ROOT / "tuner" / "knobs.py").read_text().splitlines(),
            (copy / "tuner" / "knobs.py").read_text().splitlines(),
            lineterm="",
        )
        if line.startswith("+") and not line.startswith("+++")
    ]
    assert added == ROW.splitlines(), "the copy differs from the source by more than the row"
    # The copy alone on PYTHONPATH, and its own launcher: the suite's (tests/launchers/) is not
    # on that path, and the product's default is what this test is for.
    env = {**os.environ, "PYTHONPATH": str(copy), "KERAS_BACKEND": "tensorflow"}
    env.pop("MPTUNE_LAUNCHER", None)
    trial = subprocess.run(
        [sys.executable, "-m", "tuner", "trial", "--model", "builtin:mlp", "--policy", "float32",
         "--batch-size", "8", "--steps", "4", "--warmup", "1", "--no-probe", "--clip", "--json"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert trial.returncode == 0, trial.stderr[-2000:]
    result = json.loads(trial.stdout)
    assert result["status"] == "ok"
    assert result["spec"].get("clip") is True
    run = subprocess.run(
        [sys.executable, "-c", CHECKS, str(ROOT / "tests"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])

    # The flag, what Keras is told (under loss scaling too), the export, the window.
    assert found["flag"] == [False, True]
    assert found["keras"] == [None, 1.0]
    assert found["keras_float16"] == 1.0
    assert found["export"] == [False, True]
    assert "gradient clipping, which tf_keras (Keras 2) cannot do" in found["keras2"]
    assert "clip: gradient clipping" in found["tooltip"]
    # It groups the losses: the float32 reference of a clipped setup clips too.
    assert found["reference"] == {
        "policy": "float32", "batch_size": 64, "loss_scale": "none", "clip": True
    }  # fmt: skip

    # Where it pays: its stage tries it, the pick keeps it, the neighbourhood looks at both
    # values at the pick's batch size, the loss gap is taken against float32 with it (the
    # reference the guard recalls), and the evidence says so.
    pays = found["pays"]
    stages = {stage for stage, _ in pays["trials"]}
    assert {"clip", "neighbourhood"} <= stages
    assert all(setup.get("clip") for stage, setup in pays["trials"] if stage == "clip")
    assert pays["setup"].get("clip") is True
    # (the center itself, with it, is not among its neighbours: without it, at its batch size)
    without = [
        s
        for center, s in pays["around"]
        if center.get("clip") and s["batch_size"] == center["batch_size"] and not s.get("clip")
    ]
    assert without, pays["around"]
    reference = {**pays["setup"], "policy": "float32", "loss_scale": "none"}
    assert pays["loss_gap"] is not None
    assert reference in [s for _, s in pays["trials"]]
    assert pays["evidence"]["Gradient clipping"].startswith("on: ")
    assert "1.30x" in pays["evidence"]["Gradient clipping"]

    # Where the model refuses it: tried once, then skipped for every precision, and why.
    refused = found["refused"]
    assert sum(1 for stage, _ in refused["trials"] if stage == "clip") == 1
    assert not refused["setup"].get("clip")
    assert refused["evidence"]["Gradient clipping"].startswith(
        "off: not tried (the model does not run with gradient clipping (trial #"
    )
    assert (
        "the model does not run with gradient clipping" in refused["not_tried"]["Gradient clipping"]
    )
    assert any(n.startswith("gradient clipping: ") and "unsupported" in n for n in refused["notes"])

    # Where the budget ends before its stage: not reached, and said so.
    cut = found["cut_short"]
    assert not any(stage == "clip" for stage, _ in cut["trials"])
    assert cut["evidence"]["Gradient clipping"] == (
        "off: not tried (the search ended before its gradient clipping stage)"
    )
