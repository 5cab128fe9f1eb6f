"""Every export format executed for a few steps, with TensorFlow and on the other Keras
backends (JAX, PyTorch), and apply_config in use."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests_support import HAZARDS, make_config, run_python

from tuner.export import HardwareFingerprint, Hazard, Setup, TunedConfig, render
from tuner.policies import POLICIES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: Hazard text that a careless template would turn into broken or hostile code.
AWKWARD = (
    "quotes ' \" \"\"\" ''' and back\\slash\\ \n"
    "import os; os.system('exit 3')\r\n# coding: latin-1 \u2028 tab\t end\\"
)
#: For every policy, an unsafe hazard and a warning: whichever is chosen, every snippet and
#: script carries hazard comments.
AWKWARD_HAZARDS = tuple(
    Hazard(kind, policy, f"'odd \"{policy}\"\\' (Dense)", AWKWARD, AWKWARD, severity=severity)
    for policy in POLICIES
    for kind, severity in (("integer_cast", "unsafe"), ("overflow", "warning"))
)


def tuned(**kwargs: Any) -> TunedConfig:
    """make_config with the awkward hazards."""
    return make_config(**kwargs, hazards=AWKWARD_HAZARDS)


def python(
    code: str,
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    backend: str | None = "tensorflow",
) -> subprocess.CompletedProcess[str]:
    """``python -c code *args``: forked from an interpreter that imported ``backend`` once
    (:func:`tests_support.run_python`), or a fresh interpreter where ``backend`` is None (a
    test of which backend a program's first import of Keras picks, or of tf_keras)."""
    if backend is not None:
        return run_python(["-c", code, *args], cwd, env, backend)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_keras3_snippets_train(tmp_path: Path) -> None:
    """Each loss-scale kind, pasted before a tiny model, trains two steps as tuned."""
    checks = []
    for policy, scale, expected in (
        ("mixed_bfloat16", "none", "Adam"),
        ("mixed_float16", "dynamic:1024:500", "LossScaleOptimizer"),
        ("mixed_float16", "fixed:128", "Adam"),
    ):
        snippet = render(tuned(policy=policy, loss_scale=scale, batch_size=8), "snippet")
        assert "os.system('exit 3')" in snippet  # in a comment
        checks.append(
            snippet
            + textwrap.dedent(f"""
            import numpy as np
            inputs = keras.Input((4,))
            x = keras.layers.Dense(8)(inputs)
            outputs = keras.layers.Activation("linear", dtype="float32")(keras.layers.Dense(1)(x))
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=make_optimizer(), loss="mse", **COMPILE_KWARGS)
            history = model.fit(np.ones((16, 4), "float32"), np.ones((16, 1), "float32"),
                                batch_size=BATCH_SIZE, epochs=1, verbose=0)
            assert type(model.optimizer).__name__ == {expected!r}, type(model.optimizer)
            assert model.dtype_policy.name == {policy!r}
            if {scale!r}.startswith("fixed"):
                assert model.optimizer.loss_scale_factor == 128
            if {scale!r}.startswith("dynamic"):
                assert float(model.optimizer.dynamic_scale.numpy()) == 1024.0
            assert np.isfinite(history.history["loss"][-1])
            print("ok", {policy!r}, {scale!r})
        """)
        )
    # One process, one snippet after another: each sets its own policy before building.
    proc = python("\n".join(f"exec({c!r})" for c in checks), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == 3


def test_keras2_snippets_train_with_tf_keras(tmp_path: Path) -> None:
    """Fixed and dynamic scaling the tf_keras way, in one process (TF starts once); the second
    with XLA and 4 steps per execution."""
    if importlib.util.find_spec("tf_keras") is None:
        # Not a dependency of mptune: without it the snippets are only compiled (test_export).
        pytest.skip("tf_keras is not installed")
    checks = []
    for scale, dynamic, value, xla, steps in (
        ("fixed:64", False, 64.0, False, 1),
        ("dynamic:1024:500", True, 1024.0, True, 4),
    ):
        config = tuned(policy="mixed_float16", loss_scale=scale, batch_size=8)
        setup = Setup("mixed_float16", 8, scale, xla=xla, steps_per_execution=steps)
        snippet = render(dataclasses.replace(config, setup=setup), "snippet", "2")
        assert "os.system('exit 3')" in snippet  # in a comment
        checks.append(
            snippet
            + textwrap.dedent(f"""
            import numpy as np
            assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
            inputs = tf.keras.Input((4,))
            x = tf.keras.layers.Dense(8)(inputs)
            outputs = tf.keras.layers.Activation("linear", dtype="float32")(
                tf.keras.layers.Dense(1)(x))
            model = tf.keras.Model(inputs, outputs)
            model.compile(optimizer=make_optimizer(), loss="mse", **COMPILE_KWARGS)
            history = model.fit(np.ones((32, 4), "float32"), np.ones((32, 1), "float32"),
                                batch_size=BATCH_SIZE, epochs=1, verbose=0)
            assert COMPILE_KWARGS == {{"jit_compile": {xla!r}, "steps_per_execution": {steps!r}}}
            assert bool(model.jit_compile) is {xla!r}, model.jit_compile
            assert int(model._steps_per_execution.numpy()) == {steps!r}
            opt = model.optimizer
            assert int(opt.iterations.numpy()) == 4, int(opt.iterations.numpy())
            assert "LossScaleOptimizer" in type(opt).__name__, type(opt)
            assert opt.dynamic is {dynamic!r}
            assert float(opt.loss_scale) == {value!r}
            assert np.isfinite(history.history["loss"][-1])
            print("ok", {scale!r})
        """)
        )
    code = "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\n" + "\n".join(
        f"exec({c!r})" for c in checks
    )
    proc = python(code, tmp_path, backend=None)  # tf_keras: chosen before TensorFlow loads
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == 2


def script_run(config, tmp_path: Path, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """Write the script for ``config`` and run it for three steps; it must end well. Forked
    from an interpreter that imported TensorFlow once, or as a user runs it where ``fresh``."""
    script = tmp_path / "train_tuned.py"
    script.write_text(render(config, "script"), encoding="utf-8")
    args = [str(script), "--max-steps", "3"]
    if fresh:
        proc = subprocess.run(
            [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
    else:
        proc = run_python(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_script(config, tmp_path: Path, fresh: bool = False) -> str:
    """Run the script for ``config``, with the awkward hazards, for three steps."""
    config = dataclasses.replace(config, hazards=AWKWARD_HAZARDS)
    proc = script_run(config, tmp_path, fresh)
    assert "os.system('exit 3')" in (tmp_path / "train_tuned.py").read_text(encoding="utf-8")
    found = re.search(r"^final loss (\S+) after 3 steps", proc.stdout, re.MULTILINE)
    assert found, proc.stdout[-2000:]
    assert math.isfinite(float(found.group(1)))
    return proc.stdout


def test_script_for_a_builtin_model(tmp_path: Path) -> None:
    # As a user runs it: `python train_tuned.py` in an interpreter of its own.
    out = run_script(
        make_config(policy="mixed_float16", loss_scale="dynamic"), tmp_path, fresh=True
    )
    assert "after 3 steps (mixed_float16, batch 16, loss scale dynamic)" in out


#: make_dataset as a tf.data dataset, as a keras.utils.PyDataset (two batches, fewer than the
#: script's steps: its epoch is its batches), or none at all.
DATASETS = {
    "tf_data": """
        def make_dataset(batch_size):
            x = np.ones((64, 6), np.float32)
            y = np.zeros((64,), np.int32)
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    """,
    "py_dataset": """
        class Batches(keras.utils.PyDataset):
            def __init__(self, batch_size):
                super().__init__()
                self.batch_size = batch_size

            def __len__(self):
                return 2

            def __getitem__(self, index):
                n = self.batch_size
                return np.ones((n, 6), np.float32), np.zeros((n,), np.int32)

        def make_dataset(batch_size):
            return Batches(batch_size)
    """,
    "none": "",
}


@pytest.mark.parametrize("dataset", DATASETS)
def test_script_for_a_model_file(tmp_path: Path, dataset: str) -> None:
    model = tmp_path / "my model's file.py"  # a path that needs escaping
    model.write_text(
        textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        import keras

        def build_model():
            inputs = keras.Input((6,))
            outputs = keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(8)(inputs))
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=keras.optimizers.SGD(0.1),
                          loss="sparse_categorical_crossentropy")
            return model
    """)
        + textwrap.dedent(DATASETS[dataset])
    )
    config = make_config(
        model=str(model), policy="mixed_float16", loss_scale="fixed:128", batch_size=8
    )
    if dataset != "py_dataset":
        run_script(config, tmp_path)
        return
    # Three steps asked, two batches in the PyDataset's epoch: the script trains its epoch.
    proc = script_run(config, tmp_path)
    assert re.search(r"^final loss \S+ after 2 steps", proc.stdout, re.MULTILINE), proc.stdout


@pytest.mark.parametrize(
    "inputs", ['{"image": image, "table": table}', "[image, table]"], ids=["dict", "list"]
)
def test_script_for_a_model_with_two_inputs(tmp_path: Path, inputs: str) -> None:
    """Two inputs of different shapes and no make_dataset: the script makes its data in the
    structure the model was built with, as fit expects (a tuple trains too, but Keras warns that
    the structure does not match, and other backends may refuse it). A list of them once failed
    in tf.data ("Can't convert non-rectangular Python sequence to Tensor")."""
    model = tmp_path / "two_inputs.py"
    model.write_text(
        textwrap.dedent(f"""
        import keras

        def build_model():
            image = keras.Input((8, 8, 3), name="image")
            table = keras.Input((5,), name="table")
            a = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(image))
            x = keras.layers.Concatenate()([a, keras.layers.Dense(4)(table)])
            model = keras.Model({inputs}, keras.layers.Dense(2)(x))
            model.compile("adam", "mse")
            return model
    """)
    )
    config = dataclasses.replace(make_config(model=str(model), batch_size=8), hazards=())
    proc = script_run(config, tmp_path)
    assert "after 3 steps" in proc.stdout
    assert "doesn't match the expected structure" not in proc.stderr


#: Keras' two-input models as a tutorial writes them: token ids in a float32 Input beside a
#: numeric feature, one-hot labels, make_dataset returning arrays with x a dict of named inputs.
DICT_ARRAYS_MODEL = """
import keras
import numpy as np

def build_model():
    ids = keras.Input((12,), name="ids")
    num = keras.Input((3,), name="num")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4)(ids))
    x = keras.layers.Concatenate()([x, keras.layers.Dense(4)(num)])
    model = keras.Model([ids, num], keras.layers.Dense(3, activation="softmax")(x))
    model.compile("adam", "categorical_crossentropy")
    return model

def make_dataset(batch_size):
    rng = np.random.default_rng(0)
    n = SAMPLES
    x = {"ids": rng.integers(0, 50, (n, 12)).astype("float32"),
         "num": rng.normal(size=(n, 3)).astype("float32")}
    return x, keras.utils.to_categorical(rng.integers(0, 3, n), 3)
"""


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_script_for_make_dataset_arrays_of_named_inputs(tmp_path: Path, backend: str) -> None:
    """make_dataset's arrays with x a dict of named inputs: the script batches them key by key
    (on JAX and PyTorch its own batches: it once read the dict's two keys as two samples and
    looped for ever without a batch), and arrays of fewer samples than a batch are refused on
    one line, not trained on for ever."""
    if backend != "tensorflow":
        pytest.importorskip(backend)
    model = tmp_path / "two_inputs.py"
    config = dataclasses.replace(
        make_config(model=str(model), batch_size=8),
        setup=Setup("float32", 8, "none", backend=backend),
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    script = tmp_path / "train_tuned.py"
    script.write_text(render(config, "script"), encoding="utf-8")
    for samples, ends in ((64, 0), (5, 1)):
        model.write_text(DICT_ARRAYS_MODEL.replace("SAMPLES", str(samples)), encoding="utf-8")
        proc = run_python([str(script), "--max-steps", "3"], tmp_path, env, backend, timeout=120)
        assert proc.returncode == ends, proc.stderr[-3000:]
    assert "final loss" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "train_tuned.py: the data holds 5 samples, fewer than one batch of 8: give make_dataset "
        "more, or tune a smaller batch size"
    )


def test_script_for_a_saved_keras_model(tmp_path: Path) -> None:
    saved = tmp_path / "tiny.keras"
    proc = python(
        textwrap.dedent(f"""
        import keras
        inputs = keras.Input((5,))
        model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(8)(inputs)))
        model.compile(optimizer="adam", loss="mse")
        model.save({str(saved)!r})
    """),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_script(make_config(model=str(saved), policy="mixed_bfloat16", batch_size=4), tmp_path)


#: A classifier compiled with metrics: one by name, an object with settings of its own, and (in
#: the model file only) a function of the file's own.
METRICS_MODEL = """
import keras

def mean_top_probability(y_true, y_pred):
    return keras.ops.mean(keras.ops.max(y_pred, axis=-1))

def build_model(own_metric=True):
    inputs = keras.Input((6,))
    outputs = keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(8)(inputs))
    model = keras.Model(inputs, outputs)
    metrics = ["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")]
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=metrics + ([mean_top_probability] if own_metric else []))
    return model
"""


@pytest.mark.parametrize("kind", ["python", "keras"])
def test_the_script_keeps_the_models_metrics(tmp_path: Path, kind: str) -> None:
    """The script compiles the model with the metrics it came with (it once dropped them: the
    user's training reported its loss only)."""
    model = tmp_path / "classifier.py"
    model.write_text(METRICS_MODEL)
    metrics = ["accuracy", "top2"]
    if kind == "keras":
        saved = tmp_path / "classifier.keras"
        proc = python(
            f"import classifier; classifier.build_model(own_metric=False).save({str(saved)!r})",
            tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        model.unlink()
        model = saved
    else:
        metrics.append("mean_top_probability")
    out = run_script(
        make_config(model=str(model), policy="mixed_float16", loss_scale="dynamic", batch_size=8),
        tmp_path,
    )
    (epoch,) = [line for line in out.splitlines() if "loss:" in line]
    for name in metrics:
        assert f" {name}: " in epoch, epoch


def test_apply_config_in_a_training_script(tmp_path: Path) -> None:
    fixed = tmp_path / "fixed.json"
    make_config(policy="mixed_float16", loss_scale="fixed:256", batch_size=32).save(fixed)
    dynamic = tmp_path / "dynamic.json"
    make_config(policy="mixed_float16", loss_scale="dynamic:1024:500").save(dynamic)
    none = tmp_path / "none.json"
    make_config(policy="mixed_bfloat16", loss_scale="none", hazards=HAZARDS).save(none)
    # A config edited to use mixed_float16, which the search found unsafe for this model.
    unsafe = tmp_path / "unsafe.json"
    make_config(policy="mixed_float16", loss_scale="dynamic", hazards=HAZARDS).save(unsafe)
    # Tuned on an H100; this process's NVML is scripted to be an A100 (MPTUNE_FAKE_NVML).
    h100 = tmp_path / "h100.json"
    dataclasses.replace(
        make_config(policy="mixed_bfloat16"),
        hardware=HardwareFingerprint(
            device="gpu",
            gpu_name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            cpu_model="Test CPU",
        ),
    ).save(h100)
    proc = python(
        textwrap.dedent(f"""
        import dataclasses, logging, warnings
        import keras
        from tuner import apply_config
        from tuner.export import HardwareFingerprint, TunedConfig
        from tuner.export.apply import HardwareMismatchWarning
        from tuner.hardware import detect

        logged = []

        class Keep(logging.Handler):
            def emit(self, record):
                logged.append(record.getMessage())

        logging.getLogger("tuner.export.apply").addHandler(Keep())

        def applied(config, **kwargs):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tuned = apply_config(config, **kwargs)
            return tuned, [str(w.message) for w in caught
                           if issubclass(w.category, HardwareMismatchWarning)]

        # fixed: a copy of the optimizer with loss_scale_factor, and no wrapping by compile().
        tuned, warned = applied({str(fixed)!r})
        assert keras.mixed_precision.global_policy().name == "mixed_float16"
        assert tuned.batch_size == 32 and tuned.loss_scale == "fixed:256"
        opt = tuned.wrap_optimizer(keras.optimizers.Adam())
        assert type(opt).__name__ == "Adam" and opt.loss_scale_factor == 256
        assert opt.gradient_accumulation_steps is None
        assert tuned.compile_kwargs() == {{
            "auto_scale_loss": False, "jit_compile": False, "steps_per_execution": 1
        }}
        # A CPU config: the scripted GPU does not matter, the CPU model does.
        assert len(warned) == 1 and "CPU Test CPU vs" in warned[0], warned

        # dynamic: a LossScaleOptimizer with the tuned initial scale and growth steps.
        tuned, warned = applied({str(dynamic)!r}, warn_on_mismatch=False)
        assert warned == []
        opt = tuned.wrap_optimizer("sgd")
        assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
        assert type(opt.inner_optimizer).__name__ == "SGD"
        assert opt.dynamic_growth_steps == 500 and float(opt.initial_scale) == 1024.0
        assert tuned.compile_kwargs() == {{"jit_compile": False, "steps_per_execution": 1}}

        # none: the optimizer as given.
        tuned, _ = applied({str(none)!r}, warn_on_mismatch=False)
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        base = keras.optimizers.Adam()
        assert tuned.wrap_optimizer(base) is base
        assert tuned.compile_kwargs() == {{
            "auto_scale_loss": False, "jit_compile": False, "steps_per_execution": 1
        }}
        # Its hazard is a warning: kept with the config, not logged.
        assert [h.kind for h in tuned.hazards] == ["divergence"] and logged == [], logged

        # A policy the config lists as unsafe: applied, and each unsafe hazard logged.
        tuned, _ = applied({str(unsafe)!r}, warn_on_mismatch=False)
        assert keras.mixed_precision.global_policy().name == "mixed_float16"
        assert [h.kind for h in tuned.hazards] == ["integer_cast", "underflow"]
        assert len(logged) == 1, logged
        assert logged[0].startswith(
            "mptune numerics: unsafe: mixed_float16, 'embedding' (Embedding): its float32"
        ), logged
        assert "Fix: declare the model input" in logged[0], logged
        logged.clear()

        # Another GPU than the tuned one is named; the same GPU is not a mismatch.
        _, warned = applied({str(h100)!r})
        assert len(warned) == 1, warned
        assert "GPU NVIDIA H100 80GB HBM3 vs NVIDIA A100-SXM4-40GB" in warned[0], warned
        assert "compute capability 9.0 vs 8.0" in warned[0], warned
        here = HardwareFingerprint.from_profile(detect(), "gpu:0 (A100)")
        same = dataclasses.replace(TunedConfig.load({str(h100)!r}), hardware=here)
        _, warned = applied(same)
        assert warned == [], warned
        print("applied")
    """),
        tmp_path,
        env={**os.environ, "MPTUNE_FAKE_NVML": "ampere_8.0"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "applied" in proc.stdout


# -- execution knobs (XLA, steps per execution, TF32, gradient accumulation) ----------------
#: The knobs the executed exports carry: 8 steps of batch 4 run as 2 calls of 4 steps each and
#: make 4 optimizer updates of a global batch of 8.
KNOBS = {"xla": True, "steps_per_execution": 4, "gradient_accumulation_steps": 2}


def knob_config(
    policy: str, loss_scale: str, batch_size: int = 4, awkward: bool = True, **knobs: Any
) -> TunedConfig:
    """tuned() (make_config() unless ``awkward``: a file's text holds no line breaks) with a
    setup that carries ``knobs``."""
    config = (tuned if awkward else make_config)(
        policy=policy, loss_scale=loss_scale, batch_size=batch_size
    )
    return dataclasses.replace(config, setup=Setup(policy, batch_size, loss_scale, **knobs))


#: Code for the checks below: the setup's Keras objects as tuner.keras_setup makes them, and a
#: comparison of optimizer configs that ignores the names Keras numbers (adam_3, adam_4).
MIRROR = textwrap.dedent("""
    import json
    import tensorflow as tf
    from tuner import keras_setup
    from tuner.setup import Setup

    def unnamed(value):
        if isinstance(value, dict):
            return {k: unnamed(v) for k, v in value.items() if k != "name"}
        return value

    def same_optimizer(a, b):
        return json.dumps(unnamed(a.get_config()), sort_keys=True, default=str) == json.dumps(
            unnamed(b.get_config()), sort_keys=True, default=str)
""")


def test_keras3_snippets_apply_the_knobs(tmp_path: Path) -> None:
    """Each snippet, pasted before a tiny model, compiles and trains as keras_setup would:
    the same COMPILE_KWARGS, the same optimizer, TF32 as tuned, and the knobs in effect."""
    checks = []
    for policy, scale, knobs, tf32_after in (
        ("mixed_float16", "dynamic:1024:500", KNOBS, None),
        ("float32", "none", {**KNOBS, "tf32": True}, True),
        ("float32", "none", {}, False),
        ("mixed_float16", "fixed:128", {"gradient_accumulation_steps": 2}, False),  # left alone
        ("mixed_bfloat16", "none", {"xla": True, "steps_per_execution": 4}, False),
    ):
        config = knob_config(policy, scale, **knobs)
        setup = config.setup
        snippet = render(config, "snippet")
        checks.append(
            snippet
            + MIRROR
            + textwrap.dedent(f"""
            import numpy as np
            setup = Setup.from_dict({setup.to_dict()!r})
            assert COMPILE_KWARGS == keras_setup.compile_kwargs(setup), COMPILE_KWARGS
            assert same_optimizer(
                make_optimizer(), keras_setup.wrap_optimizer(keras.optimizers.Adam(), setup))
            if {tf32_after!r} is not None:
                assert tf.config.experimental.tensor_float_32_execution_enabled() is {tf32_after!r}
            inputs = keras.Input((4,))
            x = keras.layers.Dense(8)(inputs)
            outputs = keras.layers.Activation("linear", dtype="float32")(keras.layers.Dense(1)(x))
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=make_optimizer(), loss="mse", **COMPILE_KWARGS)
            history = model.fit(np.ones((32, 4), "float32"), np.ones((32, 1), "float32"),
                                batch_size=BATCH_SIZE, epochs=1, verbose=0)
            assert model.jit_compile is {setup.xla!r}, model.jit_compile
            assert model.steps_per_execution == {setup.steps_per_execution!r}
            opt = model.optimizer
            inner = getattr(opt, "inner_optimizer", opt)
            accumulation = {setup.gradient_accumulation_steps!r}
            assert inner.gradient_accumulation_steps == (accumulation if accumulation > 1 else None)
            # 8 steps of 4 samples; with accumulation, one update per that many steps.
            assert int(inner._iterations.numpy()) == 8, int(inner._iterations.numpy())
            assert int(opt.iterations.numpy()) == 8 // accumulation, int(opt.iterations.numpy())
            if {scale!r}.startswith("dynamic"):
                assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
            if {scale!r}.startswith("fixed"):
                assert opt.loss_scale_factor == 128
            assert np.isfinite(history.history["loss"][-1])
            print("ok", {setup.label!r})
        """)
        )
    proc = python("\n".join(f"exec({c!r})" for c in checks), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == len(checks), proc.stdout


def test_scripts_train_with_the_knobs(tmp_path: Path) -> None:
    """The script compiles with the same knobs: XLA, 4 steps a call, accumulation on the inner
    optimizer, TF32 as tuned; --max-steps is rounded up to whole calls."""
    scripts = {
        "dynamic": knob_config("mixed_float16", "dynamic:1024:500", **KNOBS),
        "tf32": knob_config("float32", "none", **KNOBS, tf32=True),
    }
    for name, config in scripts.items():
        (tmp_path / f"train_{name}.py").write_text(render(config, "script"), encoding="utf-8")
    proc = python(
        MIRROR
        + textwrap.dedent("""
        import importlib.util, io, contextlib, sys

        def train(name):
            spec = importlib.util.spec_from_file_location(f"train_{name}", f"train_{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            models = []
            unchanged = module.float32_outputs
            module.float32_outputs = lambda m: models.append(unchanged(m)) or models[-1]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert module.main(["--max-steps", "6"]) == 0
            assert "after 8 steps" in out.getvalue(), out.getvalue()
            assert "6 steps an epoch asked: 8, whole calls of 4 steps" in out.getvalue()
            return models[-1]

        for name in ("dynamic", "tf32"):
            model = train(name)
            assert model.jit_compile is True and model.steps_per_execution == 4
            opt = model.optimizer
            inner = getattr(opt, "inner_optimizer", opt)
            assert inner.gradient_accumulation_steps == 2
            assert int(inner._iterations.numpy()) == 8 and int(opt.iterations.numpy()) == 4
            if name == "dynamic":
                assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
            else:
                assert type(opt).__name__ == "Adam", type(opt)
                assert tf.config.experimental.tensor_float_32_execution_enabled() is True
            print("trained", name)
    """),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained ") == 2, proc.stdout


def test_apply_config_applies_the_knobs(tmp_path: Path) -> None:
    paths = {}
    for name, config in (
        ("dynamic", knob_config("mixed_float16", "dynamic:1024:500", 32, False, **KNOBS)),
        ("tf32", knob_config("float32", "none", awkward=False, tf32=True)),
        ("float32", knob_config("float32", "none", awkward=False)),
        ("bfloat16", knob_config("mixed_bfloat16", "none", awkward=False, xla=True)),
    ):
        paths[name] = str(tmp_path / f"{name}.json")
        config.save(paths[name])
    proc = python(
        MIRROR
        + textwrap.dedent(f"""
        import keras
        import numpy as np
        from tuner import apply_config

        paths = {paths!r}
        enabled = tf.config.experimental.tensor_float_32_execution_enabled

        # Accumulation on the inner optimizer (a copy), loss scaling around it.
        tuned = apply_config(paths["dynamic"], warn_on_mismatch=False)
        assert (tuned.xla, tuned.steps_per_execution, tuned.tf32) == (True, 4, False)
        assert tuned.gradient_accumulation_steps == 2 and tuned.global_batch == 64
        base = keras.optimizers.SGD()
        opt = tuned.wrap_optimizer(base)
        assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
        assert type(opt.inner_optimizer).__name__ == "SGD"
        assert opt.inner_optimizer.gradient_accumulation_steps == 2
        assert base.gradient_accumulation_steps is None  # the user's optimizer is left alone
        assert opt.dynamic_growth_steps == 500 and float(opt.initial_scale) == 1024.0
        assert tuned.compile_kwargs() == {{"jit_compile": True, "steps_per_execution": 4}}
        by_name = tuned.wrap_optimizer("adam")
        assert by_name.inner_optimizer.gradient_accumulation_steps == 2
        # ... and they compile and train.
        inputs = keras.Input((4,))
        outputs = keras.layers.Activation("linear", dtype="float32")(
            keras.layers.Dense(1)(keras.layers.Dense(8)(inputs)))
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=opt, loss="mse", **tuned.compile_kwargs())
        model.fit(np.ones((256, 4), "float32"), np.ones((256, 1), "float32"),
                  batch_size=tuned.batch_size, epochs=1, verbose=0)
        assert model.jit_compile is True and model.steps_per_execution == 4
        assert int(opt.iterations.numpy()) == 4  # 8 steps, 2 accumulated per update

        # TF32: on for a tf32 setup, off for plain float32; a mixed policy leaves it alone.
        tuned = apply_config(paths["tf32"], warn_on_mismatch=False)
        assert tuned.tf32 and enabled() is True
        assert keras.mixed_precision.global_policy().name == "float32"
        assert tuned.compile_kwargs() == {{
            "auto_scale_loss": False, "jit_compile": False, "steps_per_execution": 1
        }}
        apply_config(paths["bfloat16"], warn_on_mismatch=False)
        assert enabled() is True
        tuned = apply_config(paths["float32"], warn_on_mismatch=False)
        assert not tuned.tf32 and enabled() is False
        tuned = apply_config(paths["bfloat16"], warn_on_mismatch=False)
        assert enabled() is False
        assert tuned.compile_kwargs()["jit_compile"] is True
        print("knobs applied")
    """),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "knobs applied" in proc.stdout


# -- the other Keras backends (JAX, PyTorch) --------------------------------------------------
#: The check code of the backend tests: keras_setup's own answers to compare with, read without
#: TensorFlow (MIRROR imports it), and a variable's value on any backend.
MIRROR_ANY_BACKEND = textwrap.dedent("""
    import json
    import keras
    from tuner import keras_setup
    from tuner.setup import Setup

    def value(variable):
        return keras.ops.convert_to_numpy(variable)

    def unnamed(config):
        if isinstance(config, dict):
            return {k: unnamed(v) for k, v in config.items() if k != "name"}
        return config

    def same_optimizer(a, b):
        return json.dumps(unnamed(a.get_config()), sort_keys=True, default=str) == json.dumps(
            unnamed(b.get_config()), sort_keys=True, default=str)
""")

#: What a backend's TF32 switch reads after a float32 snippet set it.
TF32_STATE = {
    "jax": "jax.config.jax_default_matmul_precision",
    "torch": "(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)",
}
TF32_EXPECTED = {
    "jax": {True: "tensorfloat32", False: "highest"},
    "torch": {True: (True, True), False: (False, False)},
}


def cpu_only(backend: str) -> dict[str, str]:
    """This environment on the CPU, with KERAS_BACKEND naming another backend than ``backend``
    (TensorFlow): the export's own choice must win."""
    assert backend != "tensorflow"
    return {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
    }


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras3_snippets_train_on_other_backends(tmp_path: Path, backend: str) -> None:
    """Each snippet, pasted at the top of a script whose shell says KERAS_BACKEND=tensorflow,
    runs Keras on the tuned backend and trains a tiny model 8 steps as keras_setup would set it
    up: the same COMPILE_KWARGS and optimizer, TF32 on the backend's switch, the knobs in
    effect. (No torch.compile here: it takes 40 s to compile on a CPU; test_export checks that
    --xla on torch renders jit_compile=True.)"""
    pytest.importorskip(backend)
    checks = []
    for policy, scale, knobs in (
        ("float32", "none", {"tf32": True}),
        ("float32", "none", {"gradient_accumulation_steps": 2}),
        ("mixed_float16", "dynamic:1024:500", {}),
        ("mixed_bfloat16", "none", {"gradient_accumulation_steps": 2}),
        ("float32", "none", {"remat": True}),
    ):
        config = knob_config(policy, scale, backend=backend, **knobs)
        setup = config.setup
        snippet = render(config, "snippet")
        assert "os.system('exit 3')" in snippet  # in a comment
        tf32 = ""
        if policy == "float32":
            tf32 = f"assert {TF32_STATE[backend]} == {TF32_EXPECTED[backend][setup.tf32]!r}"
        checks.append(
            snippet
            + MIRROR_ANY_BACKEND
            + textwrap.dedent(f"""
            import numpy as np
            assert keras.backend.backend() == {backend!r}, keras.backend.backend()
            setup = Setup.from_dict({setup.to_dict()!r})
            assert COMPILE_KWARGS == keras_setup.compile_kwargs(setup), COMPILE_KWARGS
            assert same_optimizer(
                make_optimizer(), keras_setup.wrap_optimizer(keras.optimizers.Adam(), setup))
            {tf32}
            inputs = keras.Input((4,))
            x = keras.layers.Dense(8)(inputs)
            outputs = keras.layers.Activation("linear", dtype="float32")(keras.layers.Dense(1)(x))
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=make_optimizer(), loss="mse", **COMPILE_KWARGS)
            history = model.fit(np.ones((32, 4), "float32"), np.ones((32, 1), "float32"),
                                batch_size=BATCH_SIZE, epochs=1, verbose=0)
            assert model.dtype_policy.name == {policy!r}
            assert (model.layers[1]._remat_mode is not None) is {setup.remat!r}
            assert bool(model.jit_compile) is {backend == "jax"!r}, model.jit_compile
            opt = model.optimizer
            inner = getattr(opt, "inner_optimizer", opt)
            accumulation = {setup.gradient_accumulation_steps!r}
            assert inner.gradient_accumulation_steps == (accumulation if accumulation > 1 else None)
            # 8 steps of 4 samples; with accumulation, one update per that many steps.
            assert int(value(opt.iterations)) == 8 // accumulation, int(value(opt.iterations))
            if {scale!r}.startswith("dynamic"):
                assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
                assert float(value(opt.dynamic_scale)) == 1024.0
            assert np.isfinite(history.history["loss"][-1])
            print("ok", {setup.label!r})
        """)
        )
    # The snippet's own KERAS_BACKEND wins over the shell's: seen in a fresh interpreter on JAX
    # (the same lines on every backend; JAX's interpreter starts fastest), served on PyTorch
    # from one that imported it already (its import alone is 3 s of CPU).
    fresh = backend == "jax"
    proc = python(
        "\n".join(f"exec({c!r})" for c in checks),
        tmp_path,
        env=cpu_only(backend),
        backend=None if fresh else backend,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == len(checks), proc.stdout


def test_a_snippet_refuses_keras_imported_on_another_backend(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    snippet = render(knob_config("mixed_bfloat16", "none", backend="jax"), "snippet")
    proc = python("import keras\n" + snippet, tmp_path, env=cpu_only("jax"), backend=None)
    assert proc.returncode == 1
    assert (
        "RuntimeError: this setup was tuned on the jax backend, but Keras was already imported "
        "on tensorflow: run these lines before anything imports Keras"
    ) in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    "backend, policy, scale",
    [("jax", "mixed_bfloat16", "none"), ("torch", "mixed_float16", "dynamic")],
)
def test_scripts_train_on_other_backends(
    tmp_path: Path, backend: str, policy: str, scale: str
) -> None:
    """The script for a built-in model and for a model file (its make_dataset's tf.data on JAX,
    synthetic arrays on PyTorch) trains on the tuned backend, whatever the shell's
    KERAS_BACKEND says."""
    pytest.importorskip(backend)
    config = dataclasses.replace(
        make_config(policy=policy, loss_scale=scale, batch_size=8), hazards=AWKWARD_HAZARDS
    )
    model = tmp_path / "net.py"
    model.write_text(
        textwrap.dedent("""
        import numpy as np
        import keras

        def build_model():
            inputs = keras.Input((6,))
            x = keras.layers.Dense(8)(inputs)
            outputs = keras.layers.Dense(3, activation="softmax", dtype="float32")(x)
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=keras.optimizers.SGD(0.1),
                          loss="sparse_categorical_crossentropy")
            return model
    """)
        + (
            textwrap.dedent("""
        def make_dataset(batch_size):
            import tensorflow as tf
            x = np.ones((64, 6), np.float32)
            y = np.zeros((64,), np.int32)
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    """)
            if backend == "jax"
            else ""
        )
    )
    for name, tuned in (
        ("builtin", config),
        ("file", dataclasses.replace(config, model=str(model))),
    ):
        setup = Setup(policy, 8, scale, backend=backend)
        script = tmp_path / f"train_{name}.py"
        script.write_text(
            render(dataclasses.replace(tuned, setup=setup), "script"), encoding="utf-8"
        )
        checked = textwrap.dedent(f"""
            import runpy, sys
            sys.argv = [{str(script)!r}, "--max-steps", "3"]
            try:
                runpy.run_path({str(script)!r}, run_name="__main__")
            finally:
                import keras
                print("backend", keras.backend.backend())
        """)
        # The script's own KERAS_BACKEND wins over the shell's: seen in a fresh interpreter for
        # the built-in model's script on JAX (the same lines on every backend; JAX starts
        # fastest); the rest, which differ in what they feed (the model file's make_dataset's
        # tf.data on JAX, synthetic arrays on PyTorch), are served from one that imported the
        # tuned backend already.
        fresh = name == "builtin" and backend == "jax"
        proc = python(checked, tmp_path, env=cpu_only(backend), backend=None if fresh else backend)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = re.search(r"^final loss (\S+) after 3 steps", proc.stdout, re.MULTILINE)
        assert found, proc.stdout[-2000:]
        assert math.isfinite(float(found.group(1)))
        assert f"({policy}, batch 8, loss scale {scale})" in proc.stdout
        assert f"backend {backend}" in proc.stdout


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_apply_config_checks_the_backend(tmp_path: Path, backend: str) -> None:
    """apply_config on the tuned backend applies it (and it trains); a config of another
    backend is refused on one line, before anything is applied."""
    pytest.importorskip(backend)
    paths = {}
    for name, config in (
        ("tuned", knob_config("mixed_float16", "dynamic:1024:500", 4, False, backend=backend)),
        ("tf32", knob_config("float32", "none", awkward=False, backend=backend, tf32=True)),
        ("tensorflow", knob_config("mixed_bfloat16", "none", awkward=False)),
    ):
        paths[name] = str(tmp_path / f"{name}.json")
        config.save(paths[name])
    proc = python(
        MIRROR_ANY_BACKEND
        + textwrap.dedent(f"""
        import numpy as np
        from tuner import apply_config
        from tuner.export import BackendMismatchError
        from tuner.errors import MptuneError

        import {backend}

        paths = {paths!r}
        assert keras.backend.backend() == {backend!r}
        try:
            apply_config(paths["tensorflow"], warn_on_mismatch=False)
        except BackendMismatchError as exc:
            assert isinstance(exc, MptuneError)
            assert str(exc) == (
                "this config was tuned on the TensorFlow backend (tensorflow), but Keras runs "
                "on {backend} in this process: set KERAS_BACKEND=tensorflow before Keras is "
                "first imported (or tune it again with the {backend} backend)"
            ), str(exc)
        else:
            raise AssertionError("a TensorFlow config was applied on {backend}")
        assert keras.mixed_precision.global_policy().name == "float32"  # nothing applied

        tuned = apply_config(paths["tf32"], warn_on_mismatch=False)
        assert tuned.backend == {backend!r} and tuned.tf32
        assert {TF32_STATE[backend]} == {TF32_EXPECTED[backend][True]!r}

        tuned = apply_config(paths["tuned"], warn_on_mismatch=False)
        assert tuned.backend == {backend!r}
        assert keras.mixed_precision.global_policy().name == "mixed_float16"
        assert tuned.compile_kwargs() == {{
            "jit_compile": {backend == "jax"!r}, "steps_per_execution": 1
        }}
        opt = tuned.wrap_optimizer(keras.optimizers.SGD())
        assert type(opt).__name__ == "LossScaleOptimizer", type(opt)
        inputs = keras.Input((4,))
        outputs = keras.layers.Activation("linear", dtype="float32")(
            keras.layers.Dense(1)(keras.layers.Dense(8)(inputs)))
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=opt, loss="mse", **tuned.compile_kwargs())
        history = model.fit(np.ones((16, 4), "float32"), np.ones((16, 1), "float32"),
                            batch_size=tuned.batch_size, epochs=1, verbose=0)
        assert int(value(opt.iterations)) == 4 and np.isfinite(history.history["loss"][-1])
        print("applied on", keras.backend.backend())
    """),
        tmp_path,
        env={**cpu_only(backend), "KERAS_BACKEND": backend},
        backend=backend,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"applied on {backend}" in proc.stdout
