"""Float8 (issue 53): a knob on top of a policy, offered where the GPU has FP8 Tensor Cores, the
backend makes FP8 matmuls of Keras' float8 layers (JAX, TensorFlow with XLA) and the model's
Dense and EinsumDense layers carry its work; measured like any setup, and carried by the trial
record, the table, the export and ``mptune run``, read back from the model's layers.

The real search is told to try float8 anywhere (``--float8 on``, the user's switch) and runs it
on this CPU, where Keras' float8 trains correctly but is emulated: what is checked is that
float8 is offered, runs, and reaches every face, not that it pays (where it is offered by
itself, on a card with FP8 Tensor Cores, the scripted searches above check)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from test_search_knobs import rows
from test_search_strategy import FakeGpu, FakeProfile, Machine, run
from tests_support import make_config, run_python

from tuner.export.config import ConfigError
from tuner.export.render import render
from tuner.knobs import FLOAT8_SHARE, KNOB_BY_NAME, Searching
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import tune
from tuner.setup import Setup
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

#: The transformer bench/bench_float8.py measures on a GPU, at a CPU's size here (one block of
#: width 64, sequence 16): Dense and EinsumDense carry all of its multiply-adds.
BLOCK = Path(__file__).resolve().parents[2] / "bench" / "models" / "transformer_float8.py"


@pytest.fixture(autouse=True)
def small_transformer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its size, for this process, its trial workers and the Python it starts."""
    monkeypatch.setenv("MPTUNE_TRANSFORMER", "1x64x16")


FLOAT8 = KNOB_BY_NAME["float8"]
H100, A100 = (9, 0), (8, 0)


def test_float8_on_tensorflow_brings_xla_and_every_face_words_it() -> None:
    tf = Setup("mixed_bfloat16", 32, float8=True)
    assert tf.xla  # its FP8 matmuls are XLA's
    assert tf.label == "mixed_bfloat16 b32 none xla fp8"
    assert "float8 matmuls" in tf.in_words()
    jax = Setup("mixed_bfloat16", 32, float8=True, backend="jax")
    assert not jax.xla
    assert jax.label == "mixed_bfloat16 b32 none fp8 jax"
    for setup in (tf, jax):
        assert Setup.from_dict(setup.to_dict()) == setup
    assert Setup.from_dict({"policy": "float32", "batch_size": 8}).float8 is False  # stored before
    # Keras 2 (tf_keras) has no float8 training: refused on one line.
    config = dataclasses.replace(make_config(), setup=tf)
    with pytest.raises(ConfigError, match="float8"):
        render(config, "snippet", keras="2")
    for fmt in ("snippet", "script"):
        assert 'quantize("float8"' in render(config, fmt)
        assert "quantize(" not in render(
            dataclasses.replace(config, setup=Setup("mixed_bfloat16", 32)), fmt
        )


@pytest.mark.parametrize(
    ("searching", "why"),
    [
        (Searching("jax", True, "auto", H100, 0.9), None),
        (Searching("tensorflow", True, "auto", H100, 0.9), None),
        (Searching("jax", True, "auto", H100, None), None),  # before a trial read the model
        (Searching("torch", True, "auto", H100, 0.9), "PyTorch as emulation"),
        (Searching("jax", False, "auto", None, 0.9), "the trials ran on the CPU"),
        (Searching("jax", True, "auto", A100, 0.9), "the GPU is of compute capability 8.0"),
        (Searching("jax", True, "auto", None, 0.9), "of unknown compute capability"),
        (Searching("jax", True, "auto", H100, 0.025), "carry 2% of the model's multiply-adds"),
        (Searching("jax", False, "on", None, 0.02), None),  # on: wherever Keras runs it
        (Searching("jax", True, "off", H100, 0.9), "[[float8 off]]"),
    ],
    ids=[
        "h100-jax",
        "h100-tf",
        "unread",
        "torch",
        "cpu",
        "a100",
        "unknown-card",
        "convolutions",
        "on",
        "off",
    ],
)
def test_float8_is_offered_by_the_card_the_backend_and_the_layers(
    searching: Searching, why: str | None
) -> None:
    skipped = FLOAT8.skipped(searching) if FLOAT8.skipped else None
    if why is None:
        assert skipped is None
    else:
        assert skipped is not None
        assert why in skipped


def test_the_share_of_multiply_adds_and_the_layers_left_out() -> None:
    """Read from the built layers: a transformer block's work is in its Dense and EinsumDense
    layers, a convnet's in its convolutions; a subclass of Dense and a LoRA layer are named."""
    import importlib.util

    import keras

    from tuner.worker.as_trained import quantizable_work

    spec = importlib.util.spec_from_file_location("block", BLOCK)
    assert spec is not None
    assert spec.loader is not None
    block = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(block)
    share, left = quantizable_work(block.build_model())
    assert share is not None
    assert share > 0.99
    assert left == ()

    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(32, 3)(inputs)
    x = keras.layers.Conv2D(64, 3)(x)
    outputs = keras.layers.Dense(10)(keras.layers.Flatten()(x))
    share, _ = quantizable_work(keras.Model(inputs, outputs))
    # Convolutions: 26x26 places x 288 and 24x24 x 18,432; the Dense layer 36,864 x 10.
    convolutions = 26 * 26 * 288 + 24 * 24 * 18432
    assert share == pytest.approx(368640 / (368640 + convolutions))
    assert share < FLOAT8_SHARE

    class MyDense(keras.layers.Dense):
        pass

    inputs = keras.Input((8,))
    lora = keras.layers.Dense(16, name="adapted")
    x = lora(MyDense(16, name="mine")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(x))
    lora.enable_lora(2)
    share, left = quantizable_work(model)
    assert share == pytest.approx(16 / (128 + 256 + 16))
    assert left == ("mine (a MyDense: a subclass of Dense)", "adapted (LoRA enabled)")

    # Quantized as a trial, apply_config and run do it (once: a second call changes nothing),
    # the two are left in float32 and the trial's warning names them.
    from tuner import keras_setup
    from tuner.worker.pipeline import _not_quantized

    setup = Setup("float32", 8, float8=True)
    keras_setup.after_build(model, setup)
    keras_setup.after_build(model, setup)
    policies = {layer.name: layer.dtype_policy.name for layer in model.layers[1:]}
    assert policies == {"mine": "float32", "adapted": "float32", "out": "float8_from_float32"}
    warning = _not_quantized(model, "float32")
    assert warning is not None
    assert warning.startswith("float8 leaves 2 of the model's Dense")
    assert "mine (a MyDense" in warning
    assert "adapted (LoRA enabled)" in warning


@pytest.mark.parametrize(
    ("backend", "cc", "share", "why"),
    [
        ("jax", A100, 0.9, "compute capability 8.0"),
        ("torch", H100, 0.9, "PyTorch as emulation"),
        ("jax", H100, 0.02, "carry 2% of the model's multiply-adds"),
    ],
    ids=["a100", "torch", "convolutions"],
)
def test_a_search_does_not_try_float8_and_its_evidence_says_why(
    tmp_path: Path, backend: str, cc: tuple[int, int], share: float, why: str
) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 1700},
        float8_factor=1.5,
        quantizable_share=share,
    )
    settings = SearchSettings(device="gpu:0", backend=backend, max_trials=30)
    rec = run(machine, tmp_path, settings=settings, profile=FakeProfile(gpus=(FakeGpu(cc),)))
    rec = rec.recommendation
    assert not any(s.setup.float8 for s in machine.calls)
    assert rows(rec)["Float8"].startswith("off: not tried (")
    assert why in rows(rec)["Float8"]
    assert why in {item["what"]: item["why"] for item in rec.not_tried}["Float8"]


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_search_on_an_h100_tries_float8_on_each_pick_and_adopts_it_where_it_pays(
    tmp_path: Path, backend: str
) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 1700},
        float8_factor=1.4,
        quantizable_share=0.93,
    )
    settings = SearchSettings(device="gpu:0", backend=backend, max_trials=40)
    space = SearchSpace(policies=("float32", "mixed_bfloat16"))
    result = run(
        machine,
        tmp_path,
        settings=settings,
        space=space,
        profile=FakeProfile(gpus=(FakeGpu(H100),)),
    )
    rec = result.recommendation
    tried = [s.setup for s in machine.calls if s.setup.float8]
    assert tried
    assert all(s.xla is (backend == "tensorflow") for s in tried)
    assert rec.setup.float8
    assert rec.setup.policy.name == "mixed_bfloat16"
    assert rows(rec)["Float8"].startswith("on: float8 matmuls at batch size")
    assert "adopted" in rows(rec)["Float8"]
    stages = {t.stage for t in TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()}
    assert "float8" in stages


def _real_search(tmp_path: Path, backend: str):
    settings = SearchSettings(
        measure_seconds=0.3,
        warmup_steps=1,
        min_steps=8,
        guard_steps=8,
        device="cpu",
        timeout_s=120,
        backend=backend,
        max_trials=6,
    )
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16"),
        batch_sizes=(32,),
        switches={"xla": "off", "float8": "on"},
    )
    storage = f"sqlite:///{tmp_path / 's.db'}"
    request = TuneRequest(str(BLOCK), space=space, settings=settings, storage=storage, study="f8")
    result = tune(request)
    return result, TuningSession.load("f8", storage).trials()


@pytest.mark.slow
def test_a_search_told_float8_on_measures_it_on_the_cpu(tmp_path: Path) -> None:
    """The knob runs for real: its trial quantizes the model (read back from its layers), and
    the guard compares its losses with float32's. The search's stage is the same on every
    backend (JAX here); what TensorFlow adds, XLA brought along, is the trial below."""
    backend = "jax"
    result, trials = _real_search(tmp_path, backend)
    rec = result.recommendation
    # float8 on the recommended precision's pick (each precision's knob stage tries it; one
    # far behind on this CPU has none)
    tried = [
        t
        for t in trials
        if t.stage == "float8" and t.result and t.result.spec.setup.precision == rec.setup.precision
    ]
    assert len({t.result.spec.setup for t in tried if t.result}) == 1
    # One trial, or two where the first figure did not hold and was measured again at once
    # (issue 70: a loaded CPU can make it so); the search stands on the one that held.
    assert len(tried) == 1 or (len(tried) == 2 and not tried[0].result.holds), tried
    trial = next((t for t in tried if t.result and t.result.holds), tried[0])
    assert trial.result is not None
    assert trial.result.ok, trial.result.error
    setup = trial.result.spec.setup
    assert setup.float8
    assert setup.xla is (backend == "tensorflow")
    trained = trial.result.trained
    assert trained is not None
    assert trained.quantized == "float8"
    assert trained.policy == str(setup.policy)
    assert trained.quantizable_share == 1.0
    assert setup.knobs == (("xla", "fp8") if backend == "tensorflow" else ("fp8", "jax"))
    row = rows(rec)["Float8"]
    assert f"#{trial.number}" in row  # measured against its pick, on the evidence
    assert trial.result.losses  # the guard's losses, compared with float32's


@pytest.mark.slow
def test_a_float8_trial_on_tensorflow_brings_xla_and_trains_float8_layers() -> None:
    """TensorFlow's FP8 matmuls are XLA's: a float8 setup brings ``xla``, and its trial
    compiles the quantized model with it (read back from the model)."""
    setup = Setup("mixed_bfloat16", 32, float8=True)
    assert setup.backend == "tensorflow"
    assert setup.xla
    assert setup.knobs == ("xla", "fp8")
    spec = TrialSpec(
        model=str(BLOCK), setup=setup, steps=3, warmup_steps=1, device="cpu", probe=False
    )
    result = run_trial(spec)
    assert result.ok, result.error
    trained = result.trained
    assert trained is not None
    assert trained.quantized == "float8"
    assert trained.policy == "mixed_bfloat16"
    assert trained.quantizable_share == 1.0
    assert trained.jit_compile, "the quantized model was compiled without XLA"


def _python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Python run with ``args`` on TensorFlow on the CPU, which must end well (forked from an
    interpreter that imported TensorFlow once: :func:`tests_support.run_python`)."""
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    proc = run_python(list(args), cwd, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


#: A model file of Dense layers for the export's three programs: what they do to a built model
#: (quantize it, compile it with XLA) is the same whatever its layers, and the transformer's
#: quantized step took 7.8 s to trace and compile where this one takes 1.9 (its EinsumDense
#: layers' float8 is the trials' above, on ``BLOCK``).
DENSE_FILE = """
import keras

FEATURES, CLASSES = 16, 8


def build_model():
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(64, activation="gelu")(inputs)
    outputs = keras.layers.Dense(CLASSES, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss="categorical_crossentropy")
    return model
"""


@pytest.mark.slow
def test_the_exported_script_and_mptune_run_train_float8_layers(tmp_path: Path) -> None:
    """TensorFlow: the script, ``run`` and ``apply_config``'s ``prepare`` quantize the built
    model and compile it with XLA; the layers read ``float8_from_mixed_bfloat16`` (the float32
    output layer ``float8_from_float32``)."""
    model_file = tmp_path / "dense.py"
    model_file.write_text(DENSE_FILE, encoding="utf-8")
    setup = Setup("mixed_bfloat16", 32, float8=True)
    config = dataclasses.replace(make_config(), setup=setup, model=str(model_file))
    script = tmp_path / "train_tuned.py"
    script.write_text(render(config, "script"), encoding="utf-8")
    checked = textwrap.dedent(f"""
        import runpy, sys
        import keras
        fit = keras.Model.fit
        def reading_fit(self, *args, **kwargs):
            policies = {{l.dtype_policy.name for l in self._flatten_layers()}}
            print("layers", sorted(p for p in policies if "float8" in p), self.jit_compile)
            return fit(self, *args, **kwargs)
        keras.Model.fit = reading_fit
        sys.argv = [{str(script)!r}, "--max-steps", "3"]
        runpy.run_path({str(script)!r}, run_name="__main__")
    """)
    proc = _python(tmp_path, "-c", checked)
    assert "layers ['float8_from_float32', 'float8_from_mixed_bfloat16'] True" in proc.stdout

    # mptune run: a training script as a user writes it, which reads its own layers after fit.
    config_path = tmp_path / "tuned.json"
    config.save(config_path)
    train = tmp_path / "train.py"
    train.write_text(
        textwrap.dedent(f"""
        import importlib.util
        import keras
        import numpy as np

        spec = importlib.util.spec_from_file_location("dense", {str(model_file)!r})
        dense = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(dense)
        model = dense.build_model()
        x = np.random.default_rng(0).standard_normal((128, dense.FEATURES)).astype("float32")
        y = keras.utils.to_categorical(np.arange(128) % dense.CLASSES, dense.CLASSES)
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        policies = {{l.dtype_policy.name for l in model._flatten_layers()}}
        print("trained", sorted(p for p in policies if "float8" in p))
        """),
        encoding="utf-8",
    )
    proc = _python(tmp_path, "-m", "tuner", "run", "--config", str(config_path), str(train))
    assert "trained ['float8_from_float32', 'float8_from_mixed_bfloat16']" in proc.stdout
    assert "float8 layers (float8_from_mixed_bfloat16)" in proc.stderr
    assert ", XLA," in proc.stderr

    # apply_config in the user's own script: prepare() quantizes the built model.
    applied = textwrap.dedent(f"""
        import importlib.util
        from tuner import apply_config

        tuned = apply_config({str(config_path)!r}, warn_on_mismatch=False)
        spec = importlib.util.spec_from_file_location("dense", {str(model_file)!r})
        dense = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(dense)
        model = tuned.prepare(dense.build_model())
        policies = {{l.dtype_policy.name for l in model._flatten_layers()}}
        print("prepared", sorted(p for p in policies if "float8" in p), tuned.compile_kwargs())
    """)
    proc = _python(tmp_path, "-c", applied)
    assert "prepared ['float8_from_float32', 'float8_from_mixed_bfloat16']" in proc.stdout
    assert "'jit_compile': True" in proc.stdout


def test_a_search_that_ends_before_the_knobs_says_why_they_were_never_to_run(
    tmp_path: Path,
) -> None:
    """Three trials, on the CPU: the knob stages are never reached, but float8 (no FP8 card) and
    XLA (JAX compiles every step) would not have run anyway, and their evidence says that."""
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 800})
    settings = SearchSettings(backend="jax", max_trials=3)
    rec = run(machine, tmp_path, settings=settings).recommendation
    assert "the trials ran on the CPU" in rows(rec)["Float8"]
    assert "JAX compiles every training step" in rows(rec)["XLA"]
    assert (
        "the search ended before its steps per execution stage" in rows(rec)["Steps per execution"]
    )


@pytest.mark.slow
def test_lora_layers_stay_out_of_float8_and_train() -> None:
    """Keras' float8 call refuses LoRA: mptune's float8 path (``after_build``, as a trial,
    apply_config and ``mptune run`` take it) quantizes the Dense layers without LoRA and leaves
    the LoRA-enabled one in the policy, and the model then trains: the LoRA weights move, the
    frozen kernel under them does not."""
    import keras
    import numpy as np

    from tuner import keras_setup

    inputs = keras.Input((16,))
    adapted = keras.layers.Dense(16, name="adapted")
    outputs = keras.layers.Dense(2, name="out")(adapted(keras.layers.Dense(16)(inputs)))
    model = keras.Model(inputs, outputs)
    adapted.enable_lora(2)
    setup = Setup("float32", 8, float8=True, backend=keras.backend.backend())
    keras_setup.compile_model(model, setup, keras.optimizers.SGD(0.1), "mse")
    policies = {layer.name: layer.dtype_policy.name for layer in model.layers[1:]}
    assert policies["adapted"] == "float32"
    assert policies["out"] == "float8_from_float32"
    assert adapted.lora_enabled
    lora = {"a": adapted.lora_kernel_a, "b": adapted.lora_kernel_b, "kernel": adapted._kernel}
    before = {k: keras.ops.convert_to_numpy(v).copy() for k, v in lora.items()}
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 16)), rng.standard_normal((64, 2))
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    moved = {
        k: float(np.abs(keras.ops.convert_to_numpy(v) - before[k]).max()) for k, v in lora.items()
    }
    assert moved["b"] > 0, moved  # lora_b starts at zero: its first gradient is not
    assert moved["kernel"] == 0, moved  # frozen under LoRA
