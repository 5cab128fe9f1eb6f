"""Issue 70: a script search begins with what the script trains today, observed (never read
from its text): its precision however it is set, its batch from what its fit gets, its
compile settings. That setup runs unchanged as trial #0, the baseline, named with the lines
that set it, and every speed-up is stated against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_scripts import SCRIPTS

from tuner import cli
from tuner.setup import Setup
from tuner.trials.models import ScriptCommand, parse_model_spec
from tuner.trials.observe import ScriptSetup, observe_script

ARGPARSE_TFDATA = SCRIPTS / "argparse_tfdata.py"
COMPILE_KNOBS = SCRIPTS / "compile_knobs.py"


def test_a_scripts_setup_round_trips_and_says_its_lines() -> None:
    seen = ScriptSetup(
        Setup("mixed_bfloat16", 32, xla=True, steps_per_execution=4),
        {"policy": "train.py:12", "batch_size": "train.py:40", "compile": "train.py:31"},
    )
    assert ScriptSetup.from_dict(json.loads(json.dumps(seen.to_dict()))) == seen
    assert seen.words() == (
        "mixed_bfloat16 (set at train.py:12), batch size 32 (fit at train.py:40), "
        "XLA, 4 steps per execution (compile at train.py:31)"
    )
    # The backend is the whole search's, not a compile setting of the script's.
    on_jax = ScriptSetup(Setup("float32", 64, backend="jax"), {"compile": "train.py:31"})
    assert on_jax.words() == "float32, batch size 64"
    refused = ScriptSetup(None, {}, "its model is not compiled when it calls fit")
    assert refused.words() == "not run as a trial: its model is not compiled when it calls fit"


def test_keras_own_default_policy_is_not_a_setting_of_the_scripts() -> None:
    """Keras sets its default policy itself the first time a layer asks for one and none is
    set: that is not the script's setting (a KerasHub backbone built first read "float32 (set
    at train.py:18)", the backbone's line); the script's own call after it is."""
    import keras
    from keras.src.backend.common import global_state

    from tuner.worker import script

    held: list[script.HeldSetting] = []
    saved = global_state.get_global_attribute("dtype_policy")
    global_state.set_global_attribute("dtype_policy", None)
    try:
        with script.policy_held(held, hold=False):
            keras.layers.Dense(2)  # Keras' getter sets float32 here
            assert keras.config.dtype_policy().name == "float32"
            keras.config.set_dtype_policy("mixed_bfloat16")
    finally:
        global_state.set_global_attribute("dtype_policy", saved)
    assert [h.policy for h in held] == ["mixed_bfloat16"]


@pytest.mark.slow
def test_the_precision_and_batch_are_observed_not_read_from_the_text() -> None:
    """The policy passes through an argparse default and a variable (no literal to read), and
    the batch is the tf.data pipeline's (no static batch dimension): both read back."""
    source = parse_model_spec(ScriptCommand(str(ARGPARSE_TFDATA)).spec)
    assert source.user_policy is None  # the text alone does not tell
    seen = observe_script(source, "tensorflow", "cpu")
    assert seen.setup == Setup("mixed_bfloat16", 32, "none", backend="tensorflow")
    assert seen.at == {
        "policy": "argparse_tfdata.py:16",
        "batch_size": "argparse_tfdata.py:36",
        "compile": "argparse_tfdata.py:31",
    }
    other = parse_model_spec(ScriptCommand(str(ARGPARSE_TFDATA), ("--precision", "float32")).spec)
    assert observe_script(other, "tensorflow", "cpu").setup == Setup(
        "float32", 32, backend="tensorflow"
    )


def _tune(capsys: pytest.CaptureFixture[str], script: Path, store: str, *flags: str) -> dict:  # type: ignore[type-arg]
    code = cli.main(
        ["tune", "--script", str(script), "--backend", "tensorflow", "--device", "cpu",
         "--measure-seconds", "0.5", "--storage", store, "--json", *flags]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _show(capsys: pytest.CaptureFixture[str], session: str, store: str, *flags: str) -> str:
    assert cli.main(["show", session, "--storage", store, *flags]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_trial_0_is_the_script_as_it_is_and_the_speedups_are_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    rec = _tune(
        capsys, ARGPARSE_TFDATA, store,
        "--policies", "float32,mixed_bfloat16", "--batch-sizes", "32,64", "--max-trials", "6",
    )  # fmt: skip
    shown = json.loads(_show(capsys, rec["session"], store, "--json"))
    first = shown["trials"][0]
    assert first["number"] == 0
    assert first["stage"] == "baseline"
    assert (first["result"]["spec"]["policy"], first["result"]["spec"]["batch_size"]) == (
        "mixed_bfloat16",
        32,
    )
    words = (
        "mixed_bfloat16 (set at argparse_tfdata.py:16), batch size 32 (fit at "
        "argparse_tfdata.py:36)"
    )
    assert rec["today"] == words
    assert shown["recommendation"]["today"] == words
    baseline = first["result"]["samples_per_second"]
    assert rec["baseline_samples_per_second"] == pytest.approx(baseline)
    assert rec["speedup_vs_baseline"] == pytest.approx(rec["samples_per_second"] / baseline)
    text = _show(capsys, rec["session"], store)
    assert "what you run today" in text
    assert f"{rec['speedup_vs_baseline']:.2f}x what your script trains today" in " ".join(
        text.split()
    )
    assert "float32 at the starting batch size" not in text
    snippet = _export(capsys, rec["session"], store, "snippet")
    assert f"{rec['speedup_vs_baseline']:.2f}x what you run today ({words}" in " ".join(
        snippet.split()
    )
    config = json.loads(_export(capsys, rec["session"], store, "json"))
    assert config["evidence"]["today"] == words


def _export(capsys: pytest.CaptureFixture[str], session: str, store: str, fmt: str) -> str:
    assert cli.main(["export", session, "--storage", store, "--format", fmt]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_the_scripts_compile_knobs_and_global_batch_are_its_baseline_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """jit_compile, steps_per_execution and gradient accumulation are in trial #0 and every
    precision's start; on this CPU the search tries none of them off (XLA is tried on a GPU
    only), so the recommendation keeps them, and the global batch of 16 x 2."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    rec = _tune(
        capsys, COMPILE_KNOBS, store,
        "--policies", "float32,mixed_bfloat16", "--max-trials", "6",
    )  # fmt: skip
    shown = json.loads(_show(capsys, rec["session"], store, "--json"))
    spec = shown["trials"][0]["result"]["spec"]
    assert (spec["batch_size"], spec["xla"], spec["steps_per_execution"]) == (16, True, 4)
    assert spec["gradient_accumulation_steps"] == 2
    # The guard's IEEE float32 references are not candidates: they run without XLA.
    for trial in [t for t in shown["trials"] if t["stage"] != "guard"]:
        s = trial["result"]["spec"]
        assert s["batch_size"] * s.get("gradient_accumulation_steps", 1) == 32, s
        assert s.get("xla"), s
        assert s.get("steps_per_execution", 1) >= 4, s
    setup = Setup.from_dict(rec["setup"])
    assert setup.xla
    assert setup.steps_per_execution >= 4
    assert setup.batch_size * setup.gradient_accumulation_steps == 32
    assert rec["global_batch"] == 32
