"""Trials cheap enough to search with (issues 25 and 34): a fresh worker reads what earlier
workers compiled from a persistent cache instead of compiling it again (JAX's XLA cache,
TensorFlow's XLA cache, PyTorch Inductor's for torch.compile), in the user's cache folder or
MPTUNE_COMPILE_CACHE's, and ``off`` turns it off."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tuner.setup import Setup
from tuner.trials.environment import compile_cache_directory, worker_environment
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec


def _spec(backend: str, device: str = "cpu", xla: bool = False) -> TrialSpec:
    return TrialSpec(
        model="builtin:mlp:features=16,width=32,depth=1",
        setup=Setup("float32", 16, backend=backend, xla=xla),
        device=device,
        measure_seconds=0.3,
        warmup_steps=1,
        min_steps=8,
    )


def test_each_backend_gets_its_cache_where_one_is_offered(tmp_path: Path) -> None:
    base = {"MPTUNE_COMPILE_CACHE": str(tmp_path)}
    jax = worker_environment(_spec("jax"), base=base)
    assert jax["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax")
    assert jax["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    torch = worker_environment(_spec("torch"), base=base)
    assert torch["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "torch")
    assert "JAX_COMPILATION_CACHE_DIR" not in torch
    tf = worker_environment(_spec("tensorflow"), base=base)
    assert tf["TF_XLA_FLAGS"] == f"--tf_xla_persistent_cache_directory={tmp_path / 'tensorflow'}"
    # The user's own TensorFlow flags are kept, the cache's added to them; their own cache
    # folder stands.
    flags = worker_environment(_spec("tensorflow"), base={**base, "TF_XLA_FLAGS": "--x=1"})
    assert flags["TF_XLA_FLAGS"].split() == [
        "--x=1",
        f"--tf_xla_persistent_cache_directory={tmp_path / 'tensorflow'}",
    ]
    mine = "--tf_xla_persistent_cache_directory=/mine"
    assert (
        worker_environment(_spec("tensorflow"), base={**base, "TF_XLA_FLAGS": mine})["TF_XLA_FLAGS"]
        == mine
    )
    # The user's own choice of folder stands; "off" sets none.
    own = worker_environment(_spec("jax"), base={**base, "JAX_COMPILATION_CACHE_DIR": "/mine"})
    assert own["JAX_COMPILATION_CACHE_DIR"] == "/mine"
    off = worker_environment(_spec("jax"), base={"MPTUNE_COMPILE_CACHE": "off"})
    assert "JAX_COMPILATION_CACHE_DIR" not in off
    assert compile_cache_directory("jax", {"MPTUNE_COMPILE_CACHE": "OFF"}) is None
    # By default: the user's cache folder, per backend.
    default = compile_cache_directory("jax", {})
    assert default is not None
    assert default.parts[-3:] == ("mptune", "compile", "jax")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="pip install '.[jax]'")
def test_a_fresh_jax_worker_compiles_nothing_an_earlier_one_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPTUNE_COMPILE_CACHE", str(tmp_path))
    first = run_trial(_spec("jax"))
    assert first.status is TrialStatus.OK, first.error
    cached = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "jax").iterdir()}
    assert any("train" in name or "one_step" in name or "jit" in name for name in cached), cached
    # A fresh worker whose cache was emptied writes every program again: it uses the folder...
    for entry in (tmp_path / "jax").iterdir():
        entry.unlink()
    assert run_trial(_spec("jax")).ok
    cached = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "jax").iterdir()}
    assert cached
    # ... and one after it, with the cache full, reads them.
    second = run_trial(_spec("jax"))
    assert second.status is TrialStatus.OK, second.error
    # Every program the second worker ran was read from the cache: none was written anew (a
    # compile would have written its entry again, with a new time).
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "jax").iterdir()} == cached


@pytest.mark.slow
def test_a_fresh_tensorflow_worker_reads_the_xla_steps_an_earlier_one_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPTUNE_COMPILE_CACHE", str(tmp_path))
    first = run_trial(_spec("tensorflow", xla=True))
    assert first.status is TrialStatus.OK, first.error
    folder = tmp_path / "tensorflow"
    cached = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert any("XLA_CPU_JIT" in name for name in cached), cached
    second = run_trial(_spec("tensorflow", xla=True))
    assert second.status is TrialStatus.OK, second.error
    # Nothing written anew (the time a read saves is in docs/trials.md, not judged here).
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == cached
