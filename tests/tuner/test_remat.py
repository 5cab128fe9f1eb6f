"""Rematerialisation (``keras.RematScope``), the knob added through the recipe of
docs/architecture.md ("Adding a knob"): a real trial builds its layers under the scope on every
backend and trains as the plain one does, the exported code enters it, and the search tries it
where it can pay (a batch size up to the user's that ran out of memory, or an objective that
weighs memory) and says why not elsewhere."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_backends import BACKENDS
from test_search_knobs import float32_only, rows
from test_search_strategy import Machine, run
from tests_support import make_config, run_python

from tuner.export.render import render
from tuner.keras_setup import remat_mode
from tuner.search.space import SearchSettings, SearchSpace
from tuner.setup import Setup
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

#: A model file that fails unless its layers are built under a rematerialisation scope: a
#: trial of it passes only where the worker entered one before building.
CHECKED = textwrap.dedent(
    """
    import keras
    from keras.src.backend.common.remat import get_current_remat_mode


    def build_model():
        mode = get_current_remat_mode()
        expected = "activations" if keras.backend.backend() == "tensorflow" else "full"
        if mode is None or mode.mode != expected:
            raise RuntimeError(f"built without rematerialisation ({mode})")
        inputs = keras.Input((16,))
        hidden = keras.layers.Dense(32, activation="relu")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1)(hidden))
    """
)


def _trial(model: str, backend: str, remat: bool) -> TrialResult:
    spec = TrialSpec(
        model=model,
        setup=Setup("float32", 16, backend=backend, remat=remat),
        device="cpu",
        steps=6,
        warmup_steps=1,
        probe=False,
    )
    return run_trial(spec)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rematerialised_trial_builds_under_the_scope_and_trains_alike(
    backend: str, tmp_path: Path
) -> None:
    """On every backend the model is built under the scope of that backend's mode (TensorFlow's
    differs). The rest is mptune's one code path, checked once per mode: that a model built
    without the scope is caught (JAX), and that recomputing changes the memory, not the
    arithmetic (TensorFlow's "activations", JAX's "full"; PyTorch's "full" is JAX's). Each
    backend ran all four trials before: 12 workers where 8 cover the same."""
    checked = tmp_path / "checked.py"
    checked.write_text(CHECKED)
    on = _trial(str(checked), backend, remat=True)
    assert on.status is TrialStatus.OK, on.error
    assert on.spec.setup.remat
    assert "remat" in on.spec.setup.label
    if backend == "jax":
        off = _trial(str(checked), backend, remat=False)
        assert off.status is not TrialStatus.OK
        assert "without rematerialisation" in str(off.error)
    if backend in ("tensorflow", "jax"):
        tiny = "builtin:mlp:features=16,width=32,depth=1"
        plain, remat = _trial(tiny, backend, remat=False), _trial(tiny, backend, remat=True)
        assert plain.ok, plain.error
        assert remat.ok, remat.error
        assert remat.losses == pytest.approx(plain.losses, rel=1e-4)


@dataclasses.dataclass
class RematMachine(Machine):
    """A scripted machine on which rematerialisation fits batches ``room`` times larger, runs
    at ``pace`` of the plain speed and needs ``memory`` of the plain peak."""

    room: int = 4
    pace: float = 0.9
    memory: float = 0.5

    def __call__(self, spec: TrialSpec, on_event: Any = None, **kwargs: Any) -> TrialResult:
        if not spec.setup.remat:
            return super().__call__(spec, on_event, **kwargs)
        limits = self.oom_at
        self.oom_at = {policy: size * self.room for policy, size in limits.items()}
        try:
            plain = dataclasses.replace(spec, setup=spec.setup.replace(remat=False))
            result = super().__call__(plain, on_event, **kwargs)
        finally:
            self.oom_at = limits
        self.calls[-1] = spec
        if not result.ok:
            return dataclasses.replace(result, spec=spec)
        return dataclasses.replace(
            result,
            spec=spec,
            samples_per_second=(result.samples_per_second or 0) * self.pace,
            peak_memory_mb=(result.peak_memory_mb or 0) * self.memory,
        )


def remat_trials(machine: Machine) -> list[Setup]:
    return [s.setup for s in machine.calls if s.setup.remat]


def test_remat_is_tried_where_the_users_batch_ran_out_of_memory(tmp_path: Path) -> None:
    # float32 stops growing at 256 (the knee) and runs out of memory from 128: the user's 256
    # fits rematerialised, and pays (larger batches run faster up to the knee).
    machine = RematMachine(
        speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300},
        oom_at={"float32": 128},
        growth=0.5,
        pace=0.95,
    )
    rec = run(machine, tmp_path, space=SearchSpace(user_batch=256)).recommendation
    tried = remat_trials(machine)
    assert tried
    assert tried[0].batch_size == 128
    assert tried[0].policy == "float32"
    assert rec.setup.remat
    assert rec.setup.batch_size >= 128
    row = rows(rec)["Rematerialisation"]
    assert row.startswith("on: rematerialisation at batch size 128")
    assert "adopted" in row


def test_remat_is_not_tried_where_nothing_ran_out_of_memory(tmp_path: Path) -> None:
    machine = RematMachine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    rec = run(machine, tmp_path, space=SearchSpace(user_batch=64)).recommendation
    assert not remat_trials(machine)
    assert not rec.setup.remat
    row = rows(rec)["Rematerialisation"]
    assert row.startswith("off: not tried (it trades speed for memory")
    assert "(64)" in row


def test_remat_is_weighed_by_the_memory_objective(tmp_path: Path) -> None:
    # Half the memory at 90% of the speed: within the memory objective's throughput floor.
    machine = RematMachine(
        speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}, pace=0.9
    )
    result = run(machine, tmp_path, settings=SearchSettings(objective="memory"))
    rec = result.recommendation
    assert remat_trials(machine)
    assert rec.setup.remat
    assert "adopted by the memory objective: " in rows(rec)["Rematerialisation"]
    # Too slow for it: tried, not adopted.
    slow = RematMachine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    slow.pace = 0.3
    rec = run(
        slow, tmp_path, settings=SearchSettings(objective="memory"), study="slow"
    ).recommendation
    assert remat_trials(slow)
    assert not rec.setup.remat
    row = rows(rec)["Rematerialisation"]
    assert "not adopted by the memory objective: " in row
    assert "under 80% of its speed" in row


def test_a_plain_search_never_runs_remat(tmp_path: Path) -> None:
    machine = float32_only()
    rec = run(machine, tmp_path).recommendation
    assert not any(s.setup.remat for s in machine.calls)
    assert not rec.setup.remat


@pytest.mark.slow
def test_the_exported_tensorflow_snippet_rematerialises_the_activations(tmp_path: Path) -> None:
    """The Keras 3 snippet of a TensorFlow setup with rematerialisation, run as a script:
    layers built after it carry the scope in the mode keras_setup uses there, and train."""
    config = dataclasses.replace(make_config(), setup=Setup("float32", 8, remat=True))
    script = tmp_path / "train.py"
    script.write_text(
        render(config, "snippet")
        + textwrap.dedent(
            """
            import numpy as np
            inputs = keras.Input((4,))
            hidden = keras.layers.Dense(8, activation="relu")(inputs)
            model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
            model.compile(optimizer="adam", loss="mse", **COMPILE_KWARGS)
            model.fit(np.ones((32, 4), "float32"), np.ones((32, 1), "float32"),
                      batch_size=BATCH_SIZE, epochs=1, verbose=0)
            print("remat", model.layers[1]._remat_mode.mode)
            """
        )
    )
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    proc = run_python([str(script)], script.parent, env)  # forked: TensorFlow imported once
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"remat {remat_mode('tensorflow')}" in proc.stdout
