"""Keras 3 on each backend, for real on the CPU: a trial, loss scaling that skips and halves, an
out-of-memory error and a crash classified, a short tune, and a model file's ``tf.data``
dataset fed to JAX and PyTorch."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tuner.api import SearchEvent, event_from_dict
from tuner.errors import MptuneError
from tuner.policies import POLICIES
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import tune
from tuner.setup import Setup
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

pytestmark = pytest.mark.slow

TINY = "builtin:mlp:features=16,width=32,depth=1"


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


BACKENDS = [
    "tensorflow",
    pytest.param(
        "jax", marks=pytest.mark.skipif(not _installed("jax"), reason="pip install '.[jax]'")
    ),
    pytest.param(
        "torch",
        marks=pytest.mark.skipif(not _installed("torch"), reason="pip install '.[torch]'"),
    ),
]
#: The framework whose version each backend's trial reports.
FRAMEWORK = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def trial(model: str, backend: str, policy: str = "float32", **kwargs: object):
    setup_kwargs = {k: kwargs.pop(k) for k in ("loss_scale",) if k in kwargs}
    spec = TrialSpec(
        model=model,
        setup=Setup(policy, 16, setup_kwargs.get("loss_scale"), backend=backend),  # type: ignore[arg-type]
        device="cpu",
        **{"measure_seconds": 0.3, "warmup_steps": 1, "min_steps": 8, **kwargs},  # type: ignore[arg-type]
    )
    return run_trial(spec)


def trained_on(result: Any, backend: str) -> None:
    """What a trial that ran on ``backend`` reports: the backend, its framework's version, a
    rate, 8 losses or more that fell (a pruned trial stops sooner: a loss a step it ran), and
    its memory as the CPU's."""
    assert result.status is TrialStatus.OK, result.error
    assert result.spec.setup.backend == backend
    assert FRAMEWORK[backend] in result.versions
    assert result.samples_per_second
    assert result.samples_per_second > 0
    if result.pruned:
        assert result.losses
        assert len(result.losses) == result.steps_completed
    else:
        assert len(result.losses) >= 8
        assert result.losses[-1] < result.losses[0]
    assert result.memory_kind == "cpu_rss"
    assert result.memory_method


#: TensorFlow alone: a JAX and a PyTorch trial are asserted alike in their short tune below.
@pytest.mark.parametrize("backend", BACKENDS[:1])
def test_a_trial_runs_on_the_backend(backend: str) -> None:
    trained_on(trial(TINY, backend, "mixed_bfloat16"), backend)


OVERFLOW_MODEL = """
import keras

def build_model():
    inputs = keras.Input((8,))
    x = keras.layers.Dense(8)(inputs)
    outputs = keras.layers.Dense(1, dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.product_launcher  # a trial on each backend, started as a user's is
def test_loss_scale_skips_and_halves(backend: str, tmp_path: Path) -> None:
    # A first scale of 2**60 overflows float16's gradients (max 65504): Keras' LossScaleOptimizer
    # skips each such step and halves the scale, on every backend, until the gradients fit.
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(OVERFLOW_MODEL))
    result = trial(
        str(path),
        backend,
        "mixed_float16",
        loss_scale="dynamic:1152921504606846976",
        steps=60,
        warmup_steps=0,
    )
    assert result.status is TrialStatus.OK, result.error
    scales = [s for s in result.loss_scales if s is not None]
    assert result.skipped_steps >= 10
    # The scale each step reports halves after each skipped one: 2**59 after the first.
    assert scales[0] == 2.0**59
    halvings = sum(1 for a, b in itertools.pairwise(scales) if b == a / 2)
    assert halvings >= result.skipped_steps - 1
    assert scales[-1] <= 2.0**60 / 2**result.skipped_steps
    assert result.losses[-1] == result.losses[-1]  # finite: trained once the scale fit


@pytest.mark.parametrize("backend", BACKENDS)
def test_injected_oom_is_oom(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPTUNE_TEST_FAULT", "oom@3")
    result = trial(TINY, backend)
    assert result.status is TrialStatus.OOM, result.error
    expected = {
        "tensorflow": "ResourceExhaustedError",
        "jax": "JaxRuntimeError",
        "torch": "OutOfMemoryError",
    }[backend]
    assert result.error is not None
    assert result.error.exception == expected
    if backend == "tensorflow":
        assert "OOM when allocating" in result.error.message


@pytest.mark.product_launcher  # a child's exit by signal, as a user's worker dies
def test_killed_worker_is_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker killed by SIGKILL mid-trial: the runner's reading of a dead process, the same
    # whatever the worker imported, so on JAX only (it starts fastest).
    monkeypatch.setenv("MPTUNE_TEST_FAULT", "crash@3")
    result = trial(TINY, backend="jax")
    assert result.status is TrialStatus.CRASHED
    assert result.error is not None
    assert "SIGKILL" in result.error.message


TF_DATA_MODEL = """
import keras
import numpy as np
import tensorflow as tf

def build_model():
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    return model

def make_dataset(batch_size):
    x = np.random.default_rng(0).standard_normal((batch_size * 4, 4)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(batch_size)
"""


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_tf_data_dataset_feeds_jax_and_torch(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(TF_DATA_MODEL))
    result = trial(str(path), backend)
    assert result.status is TrialStatus.OK, result.error


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_short_tune_on_the_backend(backend: str, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    settings = SearchSettings(
        measure_seconds=0.3,
        warmup_steps=1,
        min_steps=8,
        guard_steps=8,
        device="cpu",
        timeout_s=120,
        backend=backend,
        max_trials=8,
    )
    # float16 in a warm worker: its loss scale is read from the state JAX trains (the optimizer
    # is built again when a worker stays warm).
    space = SearchSpace(policies=POLICIES, batch_sizes=(8, 16), start_batch=8)
    events: list[SearchEvent] = []
    request = TuneRequest(TINY, space=space, settings=settings, storage=storage, study="b")
    result = tune(request, on_event=events.append)
    assert result.recommendation.setup.backend == backend
    assert result.recommendation.samples_per_second > 0
    assert result.recommendation.trials
    kinds = {e.type for e in events}
    assert {
        "session",
        "plan",
        "stage",
        "trial_started",
        "worker",
        "trial_finished",
        "recommendation",
    } <= kinds
    # Every event survives its JSON form (a recorded search is replayed in the GUI tests).
    for event in events:
        assert event_from_dict(json.loads(json.dumps(event.to_dict()))) == event
    trials = TuningSession.load("b", storage).trials()
    assert trials
    assert all(t.result and t.result.spec.setup.backend == backend for t in trials)
    assert {t.number for t in trials} >= set(result.recommendation.trials)
    assert all(t.result and t.result.ok for t in trials), [
        (t.result.status, t.result.error) for t in trials if t.result and not t.result.ok
    ]
    assert {t.result.spec.setup.policy.name for t in trials if t.result} >= {"mixed_float16"}
    # Each trial as a single trial on the backend reports (test_a_trial_runs_on_the_backend).
    for t in trials:
        trained_on(t.result, backend)
    # mixed_bfloat16 ran steps on the backend; pruned or not is this machine's answer (on a
    # loaded 2-core CPU PyTorch's bfloat16 fell below a third of the leader and was pruned
    # after its first steps, which trained all the same)
    assert any(
        t.result.spec.setup.policy.name == "mixed_bfloat16" and t.result.losses
        for t in trials
        if t.result
    ), "no mixed_bfloat16 trial ran its steps"
    # The session was measured on this backend: continuing it on another one is refused.
    other = dataclasses.replace(settings, backend="tensorflow")
    with pytest.raises(MptuneError, match="backend"):
        tune(TuneRequest(TINY, space=space, settings=other, storage=storage, study="b"))


def test_a_jax_worker_holds_the_memory_limit_as_a_fraction_of_its_card(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """JAX takes a memory limit only as a fraction of the card, before its GPU client starts
    (issue 25: a JAX worker ignored --memory-limit): the worker's arena is preallocated at the
    limit, the card's size read through NVML (here the fake A100 of 40,960 MiB)."""
    from tuner.trials.environment import worker_environment

    monkeypatch.setenv("MPTUNE_FAKE_NVML", "ampere_8.0")
    spec = TrialSpec(
        model=TINY, setup=Setup("float32", 16, backend="jax"), device="gpu:0", memory_limit_mb=10240
    )
    env = worker_environment(spec, base={})
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert env["XLA_CLIENT_MEM_FRACTION"] == env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2500"
    unlimited = worker_environment(dataclasses.replace(spec, memory_limit_mb=None), base={})
    assert unlimited["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_CLIENT_MEM_FRACTION" not in unlimited
    monkeypatch.setenv("MPTUNE_FAKE_NVML", "no_driver")  # the card's size unknown: nothing set
    assert "XLA_CLIENT_MEM_FRACTION" not in worker_environment(spec, base={})
    cpu = worker_environment(dataclasses.replace(spec, device="cpu"), base={})
    assert cpu["JAX_PLATFORMS"] == "cpu"
    assert "XLA_CLIENT_MEM_FRACTION" not in cpu
