"""The predicted peak's arithmetic (``training.predict_peak``), without a worker: what the
process holds plus what one step adds, XLA's temporary bytes counted with the CPU kernels'
scratch on a CPU and once on a GPU, and the limit it is held against."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.worker import backends, training

MB = 2**20


class Steps:
    """A compiled step's ``memory_analysis()``, as ``JaxSteps.step_memory`` gives it."""

    def __init__(self, **memory: int) -> None:
        self.memory = {"argument": 0, "output": 0, "alias": 0, "temp": 0, "code": 0, **memory}

    def step_memory(self) -> dict[str, int] | None:
        return self.memory


class Gpu:
    """A backend whose allocator holds ``live`` MB and can give ``limit`` MB."""

    def __init__(self, live: float, limit: float | None) -> None:
        self.live, self.limit = live, limit

    def gpu_in_use_mb(self) -> float | None:
        return self.live

    def gpu_limit_mb(self) -> float | None:
        return self.limit


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Gpu:
    device = Gpu(live=1000.0, limit=8000.0)
    monkeypatch.setattr(backends, "current", lambda: device)
    return device


def predict(steps: Any, on_cpu: bool, limit: float | None = None) -> dict[str, Any]:
    found = training.predict_peak(steps, on_cpu, limit)
    assert found is not None
    return found


def test_on_a_gpu_the_step_is_xlas_own_figures_against_the_allocators_limit(gpu: Gpu) -> None:
    steps = Steps(temp=600 * MB, output=300 * MB, alias=200 * MB, code=10 * MB)
    found = predict(steps, on_cpu=False)
    # temp + outputs not written over the donated state + code, counted once.
    assert found["step_mb"] == pytest.approx(600 + 100 + 10)
    assert found["peak_mb"] == pytest.approx(1000 + 710)
    assert (found["limit_mb"], found["limit_source"]) == (8000.0, "the allocator's limit")
    assert "scratch" not in found["method"]
    # --memory-limit wins over the allocator's.
    assert predict(steps, on_cpu=False, limit=1500.0)["limit_source"] == "[[memory_limit]]"


def test_on_a_cpu_the_temporary_bytes_carry_the_kernels_scratch(
    monkeypatch: pytest.MonkeyPatch, gpu: Gpu
) -> None:
    monkeypatch.setattr(training, "current_rss_mb", lambda: 400.0)
    monkeypatch.setattr(training, "peak_rss_mb", lambda: 450.0)
    steps = Steps(temp=600 * MB, output=300 * MB, alias=300 * MB)
    found = predict(steps, on_cpu=True, limit=900.0)
    assert training.CPU_SCRATCH > 1
    assert found["step_mb"] == pytest.approx(600 * training.CPU_SCRATCH)
    assert found["peak_mb"] == pytest.approx(400 + 600 * training.CPU_SCRATCH)
    assert f"x{training.CPU_SCRATCH:g}" in found["method"]
    assert found["parts_mb"]["temp"] == pytest.approx(600)  # XLA's own figure is kept
    # A CPU trial's peak so far is a floor: a small step cannot predict less than it.
    small = predict(Steps(temp=10 * MB), on_cpu=True)
    assert small["peak_mb"] == pytest.approx(450.0)
    assert small["limit_mb"] is None  # no --memory-limit: a CPU trial has none


def test_a_backend_that_cannot_say_predicts_nothing(gpu: Gpu) -> None:
    class Silent:
        def step_memory(self) -> None:
            return None

    assert training.predict_peak(Silent(), False, None) is None
