"""Issue 37: a training script as the user has it. ``tune --script`` and ``trial --script`` run
it unmodified up to its ``model.fit`` and train the model it built on the data it passes, fed
as that data allows at each batch size; ``mptune run`` runs it for real with a tuned setup
applied at its fit. The scripts in data/scripts/ are written as keras.io writes them (arrays
in fit; a tf.data pipeline with map and prefetch, token ids in a float32 Input; a two-input
model fed by a PyDataset; argparse options), each making its own synthetic data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_backends import BACKENDS, _installed
from tests_support import running_children

from tuner import cli
from tuner.errors import MptuneError
from tuner.setup import Setup
from tuner.trials.models import ScriptCommand, parse_model_spec
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

SCRIPTS = Path(__file__).parent / "data" / "scripts"
ARRAYS = SCRIPTS / "mnist_arrays.py"
TF_DATA = SCRIPTS / "text_tfdata.py"
PY_DATASET = SCRIPTS / "two_inputs_pydataset.py"
SEEN = SCRIPTS / "seen_in_fit.py"


def _trial(
    script: Path,
    batch: int,
    backend: str = "tensorflow",
    args: tuple[str, ...] = (),
    policy: str = "float32",
    **env: str,
) -> TrialResult:
    spec = TrialSpec(
        model=ScriptCommand(str(script), args).spec,
        setup=Setup(policy, batch, backend=backend),
        device="cpu",
        measure_seconds=0.5,
        warmup_steps=2,
        min_steps=8,
        timeout_s=240,
    )
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run_trial(spec)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_a_script_spec_keeps_its_arguments_and_fit_call() -> None:
    spec = ScriptCommand(str(ARRAYS), ("--samples", "512", "--note", "two words"), fit_call=2).spec
    source = parse_model_spec(spec)
    assert source.kind == "script"
    assert source.path == str(ARRAYS.resolve())
    assert source.args == ("--samples", "512", "--note", "two words")
    assert source.fit_call == 2
    assert parse_model_spec(ScriptCommand(str(ARRAYS)).spec).fit_call == 1


@pytest.mark.parametrize(
    ("args", "batch"),
    [((), 128), (("--batch-size", "64"), 64), (("--batch-size=256",), 256)],
)
def test_the_scripts_own_batch_size_is_read_not_run(args: tuple[str, ...], batch: int) -> None:
    """What the user runs today: the batch on the script's command line, else its argparse
    default, its fit's batch_size or a top-level batch_size (the script is not run)."""
    assert parse_model_spec(ScriptCommand(str(ARRAYS), args).spec).user_batch == batch
    assert parse_model_spec(ScriptCommand(str(TF_DATA)).spec).user_batch == 32


def test_bad_script_specs_are_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import keras\nmodel.fit(\n")
    with pytest.raises(MptuneError) as caught:
        parse_model_spec(ScriptCommand(str(broken)).spec)
    assert caught.value.location == f"{broken}:2"
    # A script with no fit of its own is read, not refused: its fit may be in a module it
    # imports (issue 49); running it decides (BAD_SCRIPTS["no_fit"]).
    no_fit = tmp_path / "no_fit.py"
    no_fit.write_text("print('hello')\n")
    assert parse_model_spec(ScriptCommand(str(no_fit)).spec).kind == "script"
    with pytest.raises(MptuneError, match="not found"):
        parse_model_spec(ScriptCommand(str(tmp_path / "missing.py")).spec)
    notes = tmp_path / "notes.txt"
    notes.write_text("model.fit()\n")
    with pytest.raises(MptuneError, match=r"a \.py file"):
        parse_model_spec(ScriptCommand(str(notes)).spec)


#: Scripts that fail before their fit, each as the user would write the mistake; what the one
#: line says; and the trial's status (USER_ERROR: every setup would fail the same).
BAD_SCRIPTS = {
    "raises": (
        "import keras\nimport numpy as np\nx = np.zeros((8, 4))\nraise ValueError('no data')\n"
        "keras.Sequential().fit(x)\n",
        r"bad\.py:4.*no data",
    ),
    "exits": ("import sys\nimport keras\nsys.exit(3)\nkeras.Sequential().fit()\n", r"sys\.exit"),
    "never_fits": (
        "import keras\n\ndef train(model):\n    model.fit()\n\nprint('nothing to do')\n",
        "ended without calling its model.fit",
    ),
    "no_fit": ("print('hello')\n", "ended without calling its model.fit"),
    "catches_the_stop": (
        textwrap.dedent(
            """
            import keras
            import numpy as np

            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile(optimizer="adam", loss="mse")
            try:
                model.fit(np.zeros((64, 4)), np.zeros((64, 1)))
            except:  # noqa: E722
                print("training failed, carrying on")
            """
        ),
        r"bad\.py:9: .*caught mptune's stop at its model\.fit in the except at bad\.py:9",
    ),
    "uncompiled": (
        textwrap.dedent(
            """
            import keras
            import numpy as np

            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.fit(np.zeros((64, 4)), np.zeros((64, 1)))
            """
        ),
        "did not compile with a loss",
    ),
    # Issue 53: Keras cannot build a model under a quantized global policy to train it
    # (keras-team/keras#23479): one line that says to quantize after the build instead.
    "float8_policy": (
        textwrap.dedent(
            """
            import keras
            import numpy as np

            keras.mixed_precision.set_global_policy("float8_from_mixed_bfloat16")
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile(optimizer="adam", loss="mse")
            model.fit(np.zeros((64, 4)), np.zeros((64, 1)))
            """
        ),
        r"bad\.py:5: the global dtype policy float8_from_mixed_bfloat16 .*keras#23479.*set "
        r'mixed_bfloat16 instead.*model\.quantize\("float8"\)',
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_SCRIPTS))
def test_a_bad_script_is_one_line_and_exit_2_with_no_worker_left(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, said = BAD_SCRIPTS[name]
    script = tmp_path / "bad.py"
    script.write_text(source)
    argv = ["trial", "--script", str(script), "--policy", "float32", "--batch-size", "8"]
    # How a script is run up to its fit is the same on every backend: JAX starts fastest.
    code = cli.main([*argv, "--device", "cpu", "--timeout", "120", "--backend", "jax"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("mptune:")]
    assert len(lines) == 1, err
    assert re.search(said, lines[0]), lines[0]
    assert "Traceback" not in err
    assert not running_children()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_script_fitting_arrays_trains_what_it_built_on_what_it_passes(backend: str) -> None:
    """The arrays and the model the script made (its argparse options honoured), fed through
    fit's data adapter at the trial's batch size; nothing after its fit runs."""
    result = _trial(ARRAYS, 64, backend, ("--samples", "512", "--epochs", "1"))
    assert result.status is TrialStatus.OK, result.error
    assert result.input is not None
    assert result.input.kind == "arrays"
    assert "mnist_arrays.py's own fit data at batch 64" in result.input.fed_by
    assert result.losses
    assert all(loss == loss for loss in result.losses)
    assert not Path("never_written.keras").exists()  # the script's save, after its fit


@pytest.mark.slow
@pytest.mark.parametrize("batch", [32, 64])
def test_a_tf_data_pipeline_is_the_trials_input_rebatched(batch: int) -> None:
    """The script's own pipeline (map, prefetch; batches of 32) is what fit's loop is timed
    on: as it is at its own batch size, rebatched at another."""
    result = _trial(TF_DATA, batch)
    assert result.status is TrialStatus.OK, result.error
    assert result.input is not None
    assert result.input.kind == "tf_data"
    assert f"at batch {batch}" in result.input.fed_by


@pytest.mark.slow
def test_a_slow_pipeline_in_the_script_is_found_input_bound() -> None:
    """Each batch's map sleeps 30 ms: the device trains far faster than that, and the trial
    says the script's input holds fit back."""
    result = _trial(TF_DATA, 32, SLOW_INPUT_MS="30")
    assert result.status is TrialStatus.OK, result.error
    assert result.input is not None
    assert result.input.kind == "tf_data"
    assert result.input_bound
    # 32 samples per 30 ms at most: fit's rate is the input's.
    assert result.samples_per_second is not None
    assert result.samples_per_second < 32 / 0.03


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "batch"),
    [
        ("tensorflow", 32),
        ("tensorflow", 128),
        pytest.param("jax", 128, marks=pytest.mark.skipif(not _installed("jax"), reason="no jax")),
        pytest.param("torch", 32, marks=pytest.mark.skipif(not _installed("torch"), reason="-")),
    ],
)
def test_a_pydatasets_batches_are_joined_or_split(backend: str, batch: int) -> None:
    """A two-input model fed by the script's PyDataset of 64-sample batches: two joined for
    batch 128, each split in two for batch 32; its dict of inputs and one-hot labels kept."""
    result = _trial(PY_DATASET, batch, backend)
    assert result.status is TrialStatus.OK, result.error
    assert result.input is not None
    assert result.input.kind == "py_dataset"
    assert result.steps_completed >= 8


GENERATOR_SCRIPT = """
import keras
import numpy as np

def batches():
    rng = np.random.default_rng(0)
    while True:
        yield rng.random((8, 4), dtype=np.float32), rng.random((8, 1), dtype=np.float32)

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(batches(), steps_per_epoch=20, epochs=2)
"""


@pytest.mark.slow
def test_a_generator_is_regrouped_on_its_one_stream(tmp_path: Path) -> None:
    """A generator of 8-sample batches (read once): the trial's batches and fit's timed loop
    take turns on its stream, regrouped at the trial's batch size."""
    script = tmp_path / "generated.py"
    script.write_text(GENERATOR_SCRIPT)
    result = _trial(script, 32)
    assert result.status is TrialStatus.OK, result.error
    assert result.input is not None
    assert result.input.kind == "generator"
    assert result.steps_completed >= 8


def _run(config: Path, report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    return subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(SEEN), "--config", str(config), "--",
         "--report", str(report), *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BACKENDS[1]])
def test_tune_script_recommends_and_run_applies_it(backend: str, tmp_path: Path) -> None:
    """The whole way: tune the script, then run it with the result; its own fit sees the tuned
    batch size, and what follows its fit runs. On JAX alone (it starts fastest): the tune and
    the config it writes are the same on every backend, and ``run`` on each backend is
    test_run_applies_policy_batch_and_loss_scale_inside_the_scripts_fit's (three full tunes
    ran here before)."""
    config = tmp_path / "tuned.json"
    store = f"sqlite:///{tmp_path / 's.db'}"
    code = cli.main(
        ["tune", "--script", str(SEEN), "--backend", backend, "--device", "cpu",
         "--policies", "float32",
         "--batch-sizes", "16,64", "--measure-seconds", "0.5", "--storage", store,
         "--out", str(config), "--", "--report", str(tmp_path / "tune.json")]
    )  # fmt: skip
    assert code == 0
    tuned = json.loads(config.read_text())
    batch = tuned["setup"]["batch_size"]
    assert batch in (16, 64)
    report = tmp_path / "seen.json"
    done = _run(config, report)
    assert done.returncode == 0, done.stderr
    assert "after fit" in done.stdout  # what follows fit runs too
    seen = json.loads(report.read_text())
    assert seen == {
        "policy": "float32", "loss_scale_optimizer": False, "steps": 512 // batch, "epochs": 2,
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_run_applies_policy_batch_and_loss_scale_inside_the_scripts_fit(
    backend: str, tmp_path: Path
) -> None:
    """A mixed_float16 setup with dynamic loss scaling, tuned on ``backend``: the policy is set
    before the script builds its model, its optimizer is wrapped, its fit trains at the tuned
    batch size (the script asked for 8), on that backend whatever KERAS_BACKEND said."""
    config = tmp_path / "tuned.json"
    setup = Setup("mixed_float16", 128, "dynamic", backend=backend).to_dict(explicit=True)
    config.write_text(
        json.dumps(
            {
                "schema": "mptune.config",
                "schema_version": 1,
                "model": ScriptCommand(str(SEEN)).spec,
                "setup": setup,
                "evidence": {"samples_per_second": 900.0, "trials": [1]},
                "hardware": {"device": "cpu"},
            }
        )
    )
    report = tmp_path / "seen.json"
    done = _run(config, report, "--batch-size", "8")
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text()) == {
        "policy": "mixed_float16", "loss_scale_optimizer": True, "steps": 4, "epochs": 2,
    }  # fmt: skip
    assert (
        "fit runs mixed_float16, loss scale dynamic:32768:2000, batch size 128 (read back from "
        "the model)" in done.stderr
    )


def test_bad_command_lines_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before anything runs: a config that is not there, a script that is not one, arguments
    after -- for a command that runs no script, and --fit-call without --script."""
    assert cli.main(["run", str(SEEN), "--config", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    config = tmp_path / "tuned.json"
    config.write_text("{}")
    assert cli.main(["run", str(tmp_path / "missing.py"), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit) as stopped:
        cli.main(["sessions", "--", "x"])
    assert stopped.value.code == 2
    assert "sessions takes none" in capsys.readouterr().err
    argv = ["trial", "--model", "builtin:mlp", "--policy", "float32", "--batch-size", "8"]
    assert cli.main([*argv, "--fit-call", "2"]) == 2
    assert "--fit-call picks a training script's fit call" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("n", "own", "batch"), [(980, 64, 32), (1000, 64, 128), (1024, 64, 256), (1000, 64, 96)]
)
def test_a_pydataset_rebatched_gives_every_sample_once_in_order(
    n: int, own: int, batch: int
) -> None:
    """Joined, cut or regrouped across batches, a short last batch kept: what fit trains on in
    an epoch is the script's data, all of it (mptune run trains on it for real), each of its
    batches drawn once when read in order."""
    import keras
    import numpy as np

    from tuner.worker.script import Rebatched

    drawn: list[int] = []

    class Numbers(keras.utils.PyDataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return -(-n // own)

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            drawn.append(i)
            ids = np.arange(i * own, min((i + 1) * own, n))
            return ids.astype("float32"), ids

    rebatched = Rebatched(Numbers(), batch)
    drawn.clear()  # what it read to count the samples
    pieces = [rebatched[i][1] for i in range(len(rebatched))]
    assert (np.concatenate(pieces) == np.arange(n)).all()
    assert all(len(p) == batch for p in pieces[:-1])
    assert 0 < len(pieces[-1]) <= batch
    assert sorted(set(drawn)) == drawn  # each drawn once, in order


def test_a_generators_stream_is_regrouped_as_it_goes() -> None:
    import numpy as np

    from tuner.worker.script import regrouped

    def stream():  # batches of 50, then a short one of 30
        for start in range(0, 230, 50):
            ids = np.arange(start, min(start + 50, 230))
            yield {"ids": ids.astype("float32")}, ids

    pieces = [y for _, y in regrouped(stream(), 64)]
    assert [len(p) for p in pieces] == [64, 64, 64, 38]
    assert (np.concatenate(pieces) == np.arange(230)).all()


@pytest.mark.parametrize("drop", [False, True])
def test_a_tf_data_pipeline_is_rebatched_as_the_script_batched_it(drop: bool) -> None:
    """A remainder kept where the script's own batching keeps it (a real run loses no
    samples), dropped where it drops it; at its own batch size the dataset is its own."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tuner.worker.script import FitCall, fit_arguments_at, input_at

    data = tf.data.Dataset.from_tensor_slices((np.arange(100), np.arange(100)))
    call = FitCall(keras.Sequential(), {"x": data.batch(32, drop_remainder=drop).prefetch(2)})
    # At its own batch it is its own, static batch or not (its first batch read, issue 71:
    # rebatched at the same size it lost its known length)
    assert input_at(call, 32) is call.x
    assert fit_arguments_at(call, 32) == {}
    sizes = [int(x.shape[0]) for x, _ in input_at(call, 64)]
    assert sizes == ([64] if drop else [64, 36])


@pytest.mark.parametrize("kind", ["arrays", "generator", "tf_data"])
def test_run_scales_the_scripts_steps_per_epoch_to_the_tuned_batch(kind: str) -> None:
    """A script that says steps_per_epoch=20 at batch 8 covers 160 samples an epoch; at the
    tuned batch 32 it takes 5 steps, on the same samples in the same order."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tuner.worker.script import FitCall, fit_arguments_at

    ids = np.arange(400, dtype="float32")[:, None]
    given: dict[str, object] = {"steps_per_epoch": 20}
    if kind == "arrays":
        given.update(x=ids, y=ids, batch_size=8)
    elif kind == "generator":
        given["x"] = ((ids[i : i + 8], ids[i : i + 8]) for i in range(0, 400, 8))
    else:
        given["x"] = tf.data.Dataset.from_tensor_slices((ids, ids)).batch(8)
    changed = fit_arguments_at(FitCall(keras.Sequential(), given), 32)
    assert changed["steps_per_epoch"] == 5
    if kind == "arrays":
        assert changed["batch_size"] == 32
    else:
        first = next(iter(changed["x"]))  # type: ignore[call-overload]
        assert (np.asarray(first[1])[:, 0] == np.arange(32)).all()
