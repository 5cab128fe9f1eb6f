"""The search strategy on scripted trial outcomes: fast, no worker, no TensorFlow."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import MptuneError
from tuner.search.recommend import NoViableSetup
from tuner.search.session import TuningSession, list_sessions
from tuner.search.space import SearchSettings, SearchSpace, parse_batch_sizes
from tuner.search.tune import tune
from tuner.trials.result import TrialError, TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

STEPS = 40


@dataclass
class FakeProfile:
    """Just what tune() reads of a hardware profile."""

    policies: tuple[str, ...] = ("float32", "mixed_bfloat16", "mixed_float16")
    ram_total_mb: float = 16000.0
    gpus: tuple = ()

    @property
    def advice(self) -> list[Any]:
        return [type("A", (), {"policy": p})() for p in self.policies]

    @property
    def cpu(self) -> Any:
        return type("C", (), {"ram_total_mb": self.ram_total_mb})()

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [], "cpu": {"model": "Test CPU", "flags": ["avx2"]}}


@dataclass
class Machine:
    """A scripted machine: throughput per policy and batch, OOM limits, loss curves."""

    speed: dict[str, float]  # samples/s per sample-batch unit at batch 64
    growth: float = 0.3  # throughput grows this much per doubling, up to the knee
    knee: int = 256  # no more growth past this batch size
    oom_at: dict[str, int] = field(default_factory=dict)
    loss_offset: dict[str, float] = field(default_factory=dict)
    status: dict[tuple[str, str], TrialStatus] = field(default_factory=dict)
    calls: list[TrialSpec] = field(default_factory=list)
    interrupt_at: int | None = None

    def __call__(self, spec: TrialSpec, on_event=None, *, cancel=None, source=None) -> TrialResult:
        self.calls.append(spec)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        forced = self.status.get((spec.policy, str(spec.loss_scale)))
        if forced is not None:
            return TrialResult(spec, forced, error=TrialError(f"scripted {forced.value}"))
        if spec.batch_size >= self.oom_at.get(spec.policy, 1 << 30):
            return TrialResult(spec, TrialStatus.OOM, error=TrialError("OOM when allocating"))
        doublings = math.log2(min(spec.batch_size, self.knee) / 64)
        sps = self.speed[spec.policy] * (1 + self.growth) ** doublings
        offset = self.loss_offset.get(spec.policy, 0.0)
        losses = tuple(2.0 - 0.01 * i + offset for i in range(STEPS))
        return TrialResult(
            spec,
            TrialStatus.OK,
            samples_per_second=sps,
            peak_memory_mb=100 + spec.batch_size * (0.5 if spec.policy.is_mixed else 1.0),
            losses=losses,
            steps_completed=STEPS,
            device="cpu",
        )


def run(machine: Machine, tmp_path: Path, **kwargs: Any):
    settings = kwargs.pop("settings", SearchSettings())
    space = kwargs.pop("space", None)
    profile = kwargs.pop("profile", FakeProfile())
    return tune(
        "builtin:cnn",
        space=space,
        settings=settings,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        study=kwargs.pop("study", "t"),
        runner=machine,
        profile=profile,
        **kwargs,
    )


def grid_size(space: SearchSpace) -> int:
    per_batch = sum(len(space.loss_scales) if p == "mixed_float16" else 1 for p in space.policies)
    return per_batch * len(space.batch_sizes)


def test_cpu_like_machine_keeps_float32_and_drops_slow_mixed(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    result = run(machine, tmp_path)
    rec = result.recommendation
    assert rec.setup.policy == "float32" and rec.setup.batch_size == 256
    assert "mixed_float16" in result.outcome.abandoned
    assert all(not (s.policy == "mixed_float16" and s.batch_size != 64) for s in machine.calls)
    assert len(machine.calls) <= 0.3 * grid_size(SearchSpace())
    assert rec.speedup_vs_float32 == pytest.approx(1.0)


def test_gpu_like_machine_picks_float16_at_the_largest_fitting_batch(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000},
        knee=4096,
        oom_at={"float32": 512, "mixed_float16": 1024, "mixed_bfloat16": 1024},
    )
    result = run(machine, tmp_path)
    rec = result.recommendation
    assert rec.setup.policy == "mixed_float16" and rec.setup.batch_size >= 512
    assert str(rec.setup.loss_scale) == "dynamic"
    # An OOM at a batch size skips every larger batch of that policy.
    f32 = [s.batch_size for s in machine.calls if s.policy == "float32"]
    assert max(f32) == 512 and f32.count(512) == 1
    # The guard compared float16 with float32 at the same batch size (run for it).
    assert rec.loss_gap == pytest.approx(0.0)
    assert rec.speedup_vs_float32 > 1.5
    assert "faster than float32" in rec.reason


def test_numerical_guard_rejects_a_loss_gap(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 2000},
        loss_offset={"mixed_float16": 0.5},
    )
    rec = run(machine, tmp_path, settings=SearchSettings(loss_tolerance=0.05)).recommendation
    assert rec.setup.policy != "mixed_float16"
    rejected = [a for a in rec.alternatives if a.setup.policy == "mixed_float16"]
    assert rejected and "loss gap" in rejected[0].rejected


def test_no_winner_inside_the_noise(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1015, "mixed_float16": 300})
    rec = run(machine, tmp_path).recommendation
    assert rec.setup.policy == "float32"
    assert any("inside the measurement noise" in n for n in rec.notes)


def test_trial_budget_is_never_overrun(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1200, "mixed_float16": 300})
    result = run(machine, tmp_path, settings=SearchSettings(max_trials=4))
    assert len(machine.calls) == 4
    assert result.outcome.stopped_early and "4 trials" in result.outcome.stopped_early
    assert any(item["what"] == "the rest of the search" for item in result.recommendation.not_tried)


def test_user_error_in_the_first_trial_stops_at_once(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1, "mixed_float16": 1},
        status={("float32", "none"): TrialStatus.USER_ERROR},
    )
    with pytest.raises(MptuneError, match="fails in its own code"):
        run(machine, tmp_path)
    assert len(machine.calls) == 1


def test_every_trial_failing_is_no_viable_setup(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1, "mixed_bfloat16": 1, "mixed_float16": 1},
        oom_at={"float32": 1, "mixed_bfloat16": 1, "mixed_float16": 1},
    )
    with pytest.raises(NoViableSetup, match=r"no viable setup: .*oom"):
        run(machine, tmp_path)


def test_loss_scale_stage_notes_a_diverging_fixed_scale(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 2000},
        status={("mixed_float16", "fixed:1024"): TrialStatus.DIVERGED},
    )
    result = run(machine, tmp_path)
    scales = {str(s.loss_scale) for s in machine.calls if s.policy == "mixed_float16"}
    assert {"dynamic", "dynamic:1024:500", "fixed:1024", "fixed:128"} <= scales
    assert any("fixed:1024: diverged" in n for n in result.recommendation.notes)
    assert str(result.recommendation.setup.loss_scale) in (
        "dynamic",
        "dynamic:1024:500",
        "fixed:128",
    )


def test_resume_after_interrupt_reruns_nothing_finished(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}, interrupt_at=4
    )
    with pytest.raises(KeyboardInterrupt):
        run(machine, tmp_path, study="resumable")
    finished = [s.setup for s in machine.calls[:3]]
    second = Machine(speed=machine.speed)
    result = run(second, tmp_path, study="resumable", resume=True)
    rerun = [s.setup for s in second.calls]
    assert not set(finished) & set(rerun)
    assert result.recalled == 3
    session = TuningSession.load("resumable", f"sqlite:///{tmp_path / 's.db'}")
    notes = [t.note for t in session.trials() if t.state == "FAIL"]
    assert "stopped by the user" in notes
    assert result.recommendation.setup.policy == "float32"


def test_orphaned_running_trial_is_marked_failed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    session = TuningSession.create("orphans", url, {"model": "builtin:cnn"})
    trial = session.start_trial(TrialSpec.create("builtin:cnn", "float32", 8), "baseline")
    trial.set_user_attr("pid", 2**22 + 12345)  # no such process
    again = TuningSession.create("orphans", url, {})
    assert again.fail_orphans() == 1
    (stored,) = again.trials()
    assert stored.state == "FAIL" and "died" in stored.note


def test_sessions_are_listed_with_their_recommendation(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    run(machine, tmp_path, study="listed")
    (summary,) = list_sessions(f"sqlite:///{tmp_path / 's.db'}")
    assert summary.name == "listed" and summary.model == "builtin:cnn"
    assert summary.recommendation.startswith("float32 b")
    assert summary.trials == len(machine.calls)


def test_unreachable_storage_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MptuneError, match="cannot open session storage"):
        TuningSession.create("x", "postgresql://user:secret@127.0.0.1:1/db", {})
    with pytest.raises(MptuneError) as info:
        TuningSession.create("x", "postgresql://user:secret@127.0.0.1:1/db", {})
    assert "secret" not in str(info.value)


def test_batch_size_parsing() -> None:
    assert parse_batch_sizes("8-64") == ((8, 16, 32, 64), True)
    assert parse_batch_sizes("24,8,16") == ((8, 16, 24), False)
    with pytest.raises(ValueError, match="malformed batch sizes"):
        parse_batch_sizes("64-8")


def test_a_relative_model_path_is_stored_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "net.py").write_text("def build_model():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    result = tune(
        "net.py",
        settings=SearchSettings(max_trials=2),
        storage=f"sqlite:///{tmp_path / 's.db'}",
        study="rel",
        runner=machine,
        profile=FakeProfile(),
    )
    assert all(spec.model == str(tmp_path / "net.py") for spec in machine.calls)
    session = TuningSession.load(result.session, f"sqlite:///{tmp_path / 's.db'}")
    assert session.attrs["model"] == str(tmp_path / "net.py")
