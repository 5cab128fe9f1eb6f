"""Issue 71: KerasHub tasks as the KerasHub guides write them, at a tiny size built from their
constructors (no preset, no download): a BertTextClassifier and a GemmaCausalLM, each compiled
in its constructor (the script never calls ``compile()``), LoRA on the backbone, a dict of
token ids (and segment ids) and a padding mask as the input. Each is tuned (``tune --script``)
and run (``mptune run``), one on TensorFlow and one on JAX: what the user runs today is read
back (the BERT script's mixed_bfloat16 from an argparse default, at its batch of 16), the LoRA
layers are named as kept out of float8, and ``run`` times the script's 2 epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_scripts import SCRIPTS

from tuner import cli

if sys.version_info < (3, 11):
    pytest.skip("keras-hub 0.32 needs Python 3.11 (the hub extra)", allow_module_level=True)
pytest.importorskip("keras_hub", reason="KerasHub is the hub extra: pip install 'mptune[hub]'")

BERT = SCRIPTS / "hub_bert_lora.py"
GEMMA = SCRIPTS / "hub_gemma_lora.py"


def _tune(capsys: pytest.CaptureFixture[str], script: Path, backend: str, store: str,
          out: Path, *flags: str) -> dict:  # type: ignore[type-arg]  # fmt: skip
    code = cli.main(
        ["tune", "--script", str(script), "--backend", backend, "--device", "cpu",
         "--measure-seconds", "0.5", "--storage", store, "--out", str(out), "--json", *flags]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    return json.loads(printed)  # type: ignore[no-any-return]


def _trials(capsys: pytest.CaptureFixture[str], session: str, store: str) -> list[dict]:  # type: ignore[type-arg]
    assert cli.main(["show", session, "--storage", store, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["trials"]  # type: ignore[no-any-return]


def _run(script: Path, config: Path, store: str, backend: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(script), "--config", str(config),
         "--storage", store],
        capture_output=True, text=True, timeout=400, check=False,
        env={**os.environ, "KERAS_BACKEND": backend},
    )  # fmt: skip


@pytest.mark.slow
def test_a_bert_classifier_with_lora_tunes_from_its_own_mixed_bfloat16_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TensorFlow. Trial #0 is the script as it runs today: mixed_bfloat16 (an argparse
    default, set at line 17) at the batch of 16 its fit gets, compiled in the classifier's
    constructor (line 40). A mixed_float16 trial's record keeps the script's own run without a
    loss scale (Keras wrapped the optimizer for the trial's policy, not the script's). The LoRA
    layers are the ones float8 leaves out. ``run`` times its second epoch: 16 steps of 16."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    out = tmp_path / "tuned.json"
    rec = _tune(
        capsys, BERT, "tensorflow", store, out,
        "--policies", "mixed_bfloat16,mixed_float16", "--batch-sizes", "16", "--max-trials", "3",
    )  # fmt: skip
    today = (
        "mixed_bfloat16 (set at hub_bert_lora.py:17), batch size 16 (fit at hub_bert_lora.py:44)"
    )
    assert rec["today"] == today
    trials = _trials(capsys, rec["session"], store)
    first = trials[0]["result"]
    assert (trials[0]["stage"], first["status"]) == ("baseline", "ok"), first.get("error")
    assert (first["spec"]["policy"], first["spec"]["batch_size"]) == ("mixed_bfloat16", 16)
    assert first["trained"]["policy"] == "mixed_bfloat16"
    # fit's input is the tf.data pipeline the task's own fit makes of the script's arrays,
    # timed as it is (its own batch of 16: not rebatched), and named as the task's
    fed = [t["result"]["input"] for t in trials if t["result"].get("input")]
    assert fed
    assert {f["made_by"] for f in fed} == {"BertTextClassifier.fit"}
    assert "as BertTextClassifier.fit makes it, a tf.data.Dataset" in fed[0]["fed_by"]
    lora = [name for name in first["trained"]["not_quantizable"] if "LoRA" in name]
    assert sorted(lora) == ["query (LoRA enabled)"] * 2 + ["value (LoRA enabled)"] * 2
    f16 = [t["result"] for t in trials if t["result"]["spec"]["policy"] == "mixed_float16"]
    assert f16, [t["result"]["spec"] for t in trials]
    assert f16[0]["status"] == "ok", f16[0].get("error")
    assert f16[0]["trained"]["loss_scale"].startswith("dynamic")
    assert (f16[0]["script"]["policy"], f16[0]["script"]["loss_scale"]) == (
        "mixed_bfloat16",
        "none",
    )

    done = _run(BERT, out, store, "tensorflow")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"hub_bert_lora.py's fit runs {rec['setup']['policy']}" in done.stderr
    assert "hub_bert_lora.py:17 sets mixed_bfloat16 itself" in done.stderr
    timed = "over 1 whole epoch after the first: 16 steps, 256 samples"
    assert timed in done.stderr, done.stderr[-2000:]
    # At the script's own batch its input is its task's own pipeline, not rebatched (which
    # loses its length: Keras warned that it "ran out of data" at the first epoch's end).
    assert "ran out of data" not in done.stderr


@pytest.mark.slow
def test_a_tiny_gemma_with_lora_tunes_and_runs_on_jax(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JAX. The script sets no precision: what it runs today is float32 (Keras' own default,
    not a line of the script's) at its batch of 8, compiled in GemmaCausalLM's constructor;
    ``run`` applies the recommendation and times the second of its 2 epochs: 16 steps of 8."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    out = tmp_path / "tuned.json"
    rec = _tune(
        capsys, GEMMA, "jax", store, out,
        "--policies", "float32,mixed_bfloat16", "--batch-sizes", "8", "--max-trials", "2",
    )  # fmt: skip
    assert rec["today"] == "float32, batch size 8 (fit at hub_gemma_lora.py:28)"
    trials = _trials(capsys, rec["session"], store)
    assert all(t["result"]["status"] == "ok" for t in trials), [
        t["result"].get("error") for t in trials
    ]
    assert trials[0]["result"]["spec"]["policy"] == "float32"
    assert {t["result"]["trained"]["policy"] for t in trials} == {"float32", "mixed_bfloat16"}

    done = _run(GEMMA, out, store, "jax")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"hub_gemma_lora.py's fit runs {rec['setup']['policy']}" in done.stderr
    timed = "over 1 whole epoch after the first: 16 steps, 128 samples"
    assert timed in done.stderr, done.stderr[-2000:]
    assert "ran out of data" not in done.stderr
    assert cli.main(["show", rec["session"], "--storage", store, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["covered"]["steps"], r["covered"]["samples"]) for r in runs] == [(16, 128)]
