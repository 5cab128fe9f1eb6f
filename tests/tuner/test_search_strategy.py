"""The search strategy on scripted trial outcomes: fast, no worker, no TensorFlow."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import MptuneError
from tuner.search.events import StageStarted
from tuner.search.recommend import NoViableSetup, Recommendation, evidence_rows
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession, list_sessions
from tuner.search.space import SearchSettings, SearchSpace, parse_batch_sizes
from tuner.search.tune import tune
from tuner.setup import Setup
from tuner.trials.hazards import Hazard
from tuner.trials.result import AsTrained, TrialError, TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

STEPS = 40


@dataclass(frozen=True)
class FakeGpu:
    """Just what the search reads of a GPU: its index, compute capability and memory."""

    compute_capability: tuple[int, int] = (8, 0)
    index: int = 0
    memory_total_mb: float = 80000.0
    name: str = "Test GPU"


@dataclass
class FakeProfile:
    """Just what tune() reads of a hardware profile."""

    policies: tuple[str, ...] = ("float32", "mixed_bfloat16", "mixed_float16")
    ram_total_mb: float = 16000.0
    gpus: tuple = ()
    cpu_model: str = "Test CPU"

    @property
    def advice(self) -> list[Any]:
        return [type("A", (), {"policy": p})() for p in self.policies]

    @property
    def cpu(self) -> Any:
        return type("C", (), {"ram_total_mb": self.ram_total_mb})()

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [], "cpu": {"model": self.cpu_model, "flags": ["avx2"]}}


@dataclass
class Machine:
    """A scripted machine: throughput per policy and batch, OOM limits, loss curves."""

    speed: dict[str, float]  # samples/s per sample-batch unit at batch 64
    growth: float = 0.3  # throughput grows this much per doubling, up to the knee
    knee: int = 256  # no more growth past this batch size
    oom_at: dict[str, int] = field(default_factory=dict)
    loss_offset: dict[str, float] = field(default_factory=dict)
    status: dict[tuple[str, str], TrialStatus] = field(default_factory=dict)
    # The n-th run of (policy, batch size) at its default loss scale: a figure (samples/s) or
    # a failure; runs past the end of the list follow the model above.
    script: dict[tuple[str, int], list[float | TrialStatus]] = field(default_factory=dict)
    background_load: float | None = None
    #: policies the model is unsafe under: their trials end unsafe, with figures and this hazard
    unsafe: dict[str, Hazard] = field(default_factory=dict)
    #: what the numerics probe reports for a policy, in the trial that asks for it
    numerics: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[TrialSpec] = field(default_factory=list)
    interrupt_at: int | None = None
    #: the knobs: throughput factors for XLA and per steps-per-execution value, and how an XLA
    #: trial ends instead (e.g. unsupported); float32+tf32 runs at float32's speed times
    #: tf32_factor (or speed["float32+tf32"])
    xla_factor: float = 1.0
    xla_status: TrialStatus | None = None
    spe_factor: dict[int, float] = field(default_factory=dict)
    tf32_factor: float = 1.0
    #: a factor per (XLA, steps per execution) that replaces xla_factor x spe_factor, for
    #: knobs that pay only together
    knob_factor: dict[tuple[bool, int], float] = field(default_factory=dict)
    #: measured steps a policy's dynamic loss scale skips in each of its trials
    skipped: dict[str, int] = field(default_factory=dict)
    #: float8's throughput factor, and the model's share of multiply-adds in the layers it
    #: quantizes as each trial reads it back (None: not read)
    float8_factor: float = 1.0
    quantizable_share: float | None = None

    def runs_of(self, policy: str, batch_size: int) -> int:
        return sum(1 for s in self.calls if s.setup == Setup(policy, batch_size))

    def __call__(self, spec: TrialSpec, on_event=None, *, cancel=None, source=None) -> TrialResult:
        nth = sum(1 for s in self.calls if s.setup == spec.setup)
        self.calls.append(spec)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        forced = self.status.get((spec.policy, str(spec.loss_scale)))
        if forced is not None:
            return TrialResult(spec, forced, error=TrialError(f"scripted {forced.value}"))
        scripted = self.script.get((str(spec.policy), spec.batch_size), [])
        # (a per-step batch under gradient accumulation runs as fast as without it)
        default_scale = spec.setup.replace(gradient_accumulation_steps=1) == Setup(
            spec.policy, spec.batch_size
        )
        planned = scripted[nth] if default_scale and nth < len(scripted) else None
        if isinstance(planned, TrialStatus):
            return TrialResult(spec, planned, error=TrialError(f"scripted {planned.value}"))
        if spec.batch_size >= self.oom_at.get(spec.policy, 1 << 30):
            return TrialResult(spec, TrialStatus.OOM, error=TrialError("OOM when allocating"))
        setup = spec.setup
        if setup.xla and self.xla_status is not None:
            return TrialResult(
                spec,
                self.xla_status,
                error=TrialError("XLA cannot compile this model: scripted"),
            )
        doublings = math.log2(min(spec.batch_size, self.knee) / 64)
        speed = self.speed.get(setup.precision)
        if speed is None:
            speed = self.speed[str(spec.policy)] * (self.tf32_factor if setup.tf32 else 1.0)
        sps = speed * (1 + self.growth) ** doublings
        if planned is not None:
            sps = planned
        combined = self.knob_factor.get((setup.xla, setup.steps_per_execution))
        if combined is not None:
            sps *= combined
        else:
            if setup.xla:
                sps *= self.xla_factor
            sps *= self.spe_factor.get(setup.steps_per_execution, 1.0)
        if setup.float8:
            sps *= self.float8_factor
        offset = self.loss_offset.get(setup.precision, 0.0)
        # As a worker reports them: warm-up in whole executions, then one loss per execution
        # (the mean of its steps'), repeated for each of its steps.
        spe = setup.steps_per_execution
        start = -(-spec.warmup_steps // spe) * spe
        per_step = [2.0 - 0.01 * (start + i) + offset for i in range(STEPS)]
        losses = tuple(
            sum(per_step[i - i % spe : i - i % spe + spe])
            / len(per_step[i - i % spe : i - i % spe + spe])
            for i in range(STEPS)
        )
        hazard = self.unsafe.get(str(spec.policy))
        probed = spec.probe and spec.policy.is_half
        return TrialResult(
            spec,
            TrialStatus.UNSAFE if hazard else TrialStatus.OK,
            error=TrialError(f"{spec.policy} is unsafe for this model") if hazard else None,
            hazards=(hazard,) if hazard and probed else (),
            numerics=self.numerics.get(str(spec.policy), {"probe_s": 0.5}) if probed else {},
            samples_per_second=sps,
            step_time_ms={"p50": 1000.0 * spec.batch_size / sps},
            peak_memory_mb=100 + spec.batch_size * (0.5 if spec.policy.is_half else 1.0),
            losses=losses,
            steps_completed=STEPS,
            skipped_steps=self.skipped.get(str(spec.policy), 0)
            if spec.setup.loss_scale.kind == "dynamic"
            else 0,
            device="cpu",
            background_load=self.background_load,
            trained=AsTrained(
                policy=str(spec.policy),
                quantized="float8" if setup.float8 else None,
                quantizable_share=self.quantizable_share,
            )
            if self.quantizable_share is not None
            else None,
        )


def tune_with(**kwargs: Any) -> Any:
    """``tune`` given its request's fields and its own keywords as one set of keywords, as the
    scripted searches' helpers pass them."""
    fields = {f.name for f in dataclasses.fields(TuneRequest)}
    request = TuneRequest(**{k: v for k, v in kwargs.items() if k in fields})
    return tune(request, **{k: v for k, v in kwargs.items() if k not in fields})


def run(machine: Machine, tmp_path: Path, **kwargs: Any):
    settings = kwargs.pop("settings", SearchSettings())
    space = kwargs.pop("space", None)
    profile = kwargs.pop("profile", FakeProfile())
    return tune_with(
        model="builtin:cnn",
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
    assert rec.setup.policy == "float32"
    assert rec.setup.batch_size == 256
    assert "mixed_float16" in result.outcome.abandoned
    assert all(not (s.policy == "mixed_float16" and s.batch_size != 64) for s in machine.calls)
    # A third of a grid at most, the runoff's turns among the batch sizes past the knee (the
    # throughput is flat there, so they tie: two turns each settle it) included.
    assert len(machine.calls) <= grid_size(SearchSpace()) / 3
    assert rec.speedup_vs_float32 == pytest.approx(1.0)


class PruningMachine(Machine):
    """Its mixed_float16 trials stop measuring after 3 steps, pruned, as a worker does for a
    setup under a third of the leader's speed."""

    def __call__(self, spec: TrialSpec, on_event=None, *, cancel=None, source=None) -> TrialResult:
        result = super().__call__(spec, on_event, cancel=cancel, source=source)
        if spec.policy != "mixed_float16" or not result.ok:
            return result
        return dataclasses.replace(result, losses=result.losses[:3], steps_completed=3, pruned=True)


def test_a_pruned_alternative_says_why_it_has_no_loss_gap(tmp_path: Path) -> None:
    machine = PruningMachine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 2})
    rec = run(machine, tmp_path).recommendation
    (f16,) = [a for a in rec.alternatives if a.setup.policy == "mixed_float16"]
    assert f16.rejected == (
        "too few measured steps to compare its loss with float32 (it stopped measuring early: "
        "pruned)"
    )
    rows = evidence_rows(rec)
    (row,) = [t for label, t in rows if label == "Alternative" and "mixed_float16" in t]
    assert "(measured under 0.01x float32 b" in row  # not 0.00x
    (behind,) = [t for label, t in rows if label == "Not tried" and "mixed_float16" in t]
    assert "under 0.01x the fastest policy's throughput" in behind


def test_gpu_like_machine_picks_float16_at_the_largest_fitting_batch(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000},
        knee=4096,
        oom_at={"float32": 512, "mixed_float16": 1024, "mixed_bfloat16": 1024},
    )
    result = run(machine, tmp_path)
    rec = result.recommendation
    assert rec.setup.policy == "mixed_float16"
    assert rec.setup.batch_size >= 512
    assert str(rec.setup.loss_scale) == "dynamic"
    # An OOM at a batch size skips every larger batch of that policy.
    f32 = [s.batch_size for s in machine.calls if s.policy == "float32"]
    assert max(f32) == 512
    assert f32.count(512) == 1
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
    assert rejected
    assert "loss gap" in rejected[0].rejected


def test_no_winner_inside_the_noise(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1015, "mixed_float16": 300})
    rec = run(machine, tmp_path).recommendation
    assert rec.setup.policy == "float32"
    assert any("inside the measurement noise" in n for n in rec.notes)


def test_trial_budget_is_never_overrun(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1200, "mixed_float16": 300})
    result = run(machine, tmp_path, settings=SearchSettings(max_trials=4))
    assert len(machine.calls) == 4
    assert result.outcome.stopped_early
    assert "4 trials" in result.outcome.stopped_early
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
    # When storage opened and closed each trial: the order they ran in, and how long the
    # stopped one ran (the window's memory plot places them so, as it did live; issue 33).
    stored = session.trials()
    assert all(t.started is not None and t.closed is not None for t in stored)
    assert all(t.started <= t.closed for t in stored)
    assert all(a.closed <= b.started for a, b in itertools.pairwise(stored))  # one at a time


def test_orphaned_running_trial_is_marked_failed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    session = TuningSession.create("orphans", url, {"model": "builtin:cnn"})
    trial = session.start_trial(TrialSpec.create("builtin:cnn", "float32", 8), "baseline")
    trial.set_user_attr("pid", 2**22 + 12345)  # no such process
    again = TuningSession.create("orphans", url, {})
    assert again.fail_orphans() == 1
    (stored,) = again.trials()
    assert stored.state == "FAIL"
    assert "died" in stored.note


def test_sessions_are_listed_with_their_recommendation(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    run(machine, tmp_path, study="listed")
    (summary,) = list_sessions(f"sqlite:///{tmp_path / 's.db'}")
    assert summary.name == "listed"
    assert summary.model == "builtin:cnn"
    assert summary.recommendation.startswith("float32 b")
    assert summary.trials == len(machine.calls)


def test_unreachable_storage_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MptuneError, match="cannot open session storage"):
        TuningSession.create("x", "postgresql://user:secret@127.0.0.1:1/db", {})
    with pytest.raises(MptuneError) as info:
        TuningSession.create("x", "postgresql://user:secret@127.0.0.1:1/db", {})
    assert "secret" not in str(info.value)


def test_a_storage_of_another_optuna_schema_is_refused_and_a_good_one_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optuna's schema check runs on a URL's first open in a process (it loads Optuna's
    migration scripts: five times the rest of an open); a storage left at an older schema is
    refused in one line that says how to upgrade it."""
    import sqlalchemy
    from optuna.storages._rdb.storage import _VersionManager

    from tuner.search import storage as storage_module

    checks: list[str] = []
    check = _VersionManager.check_table_schema_compatibility

    def counted(self: _VersionManager) -> None:
        checks.append(self.url)
        check(self)

    monkeypatch.setattr(_VersionManager, "check_table_schema_compatibility", counted)
    good = f"sqlite:///{tmp_path / 'good.db'}"
    for _ in range(3):
        storage_module.open_storage(good)
    assert checks == [good]

    old = f"sqlite:///{tmp_path / 'old.db'}"
    storage = storage_module.open_storage(old)
    (first,) = [v for v in storage.get_all_versions() if v != storage.get_head_version()][-1:]
    storage.engine.dispose()
    with sqlalchemy.create_engine(old).begin() as connection:
        stamp = sqlalchemy.text("UPDATE alembic_version SET version_num = :v")
        connection.execute(stamp, {"v": first})
    monkeypatch.setattr(storage_module, "_SCHEMA_CHECKED", set())  # another process
    with pytest.raises(MptuneError, match="optuna storage upgrade") as info:
        storage_module.open_storage(old)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"cannot open session storage {old}: ")


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
        TuneRequest(
            "net.py",
            settings=SearchSettings(max_trials=2),
            storage=f"sqlite:///{tmp_path / 's.db'}",
            study="rel",
            profile=FakeProfile(),
        ),
        runner=machine,
    )
    assert all(spec.model == str(tmp_path / "net.py") for spec in machine.calls)
    session = TuningSession.load(result.session, f"sqlite:///{tmp_path / 's.db'}")
    assert session.attrs["model"] == str(tmp_path / "net.py")


# -- the float32 figure, retries, ties, a busy machine ----------------------------------------


def test_speedup_is_stated_against_a_faster_later_float32_trial(tmp_path: Path) -> None:
    # float32's own ladder stops at batch 128 (1% growth); the guard's float32 reference at
    # mixed_bfloat16's batch 256 then measures faster than that.
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 2000, "mixed_float16": 300},
        script={("float32", 64): [1000.0], ("float32", 128): [1010.0], ("float32", 256): [1500.0]},
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup == Setup("mixed_bfloat16", 256)
    # The guard ran float32 at 256 after float32's ladder had stopped (at 128, refining the
    # knee below it: a multiple of 8 between 64 and 128).
    f32 = [s.batch_size for s in machine.calls if s.policy == "float32"]
    assert f32[:3] == [64, 128, 96]
    assert max(f32[: f32.index(256)]) == 128
    assert rec.float32_samples_per_second == pytest.approx(1500.0)
    assert rec.speedup_vs_float32 == pytest.approx(rec.samples_per_second / 1500.0)
    assert f"{rec.samples_per_second / 1500.0:.2f}x faster" in rec.reason
    (f32,) = [a for a in rec.alternatives if a.setup.policy == "float32"]
    assert f32.setup.batch_size == 256
    assert f32.speedup_vs_float32 == pytest.approx(1.0)


def float32_only(**kwargs: Any) -> Machine:
    """Both mixed policies are dropped at the start: only float32's ladder runs."""
    return Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}, **kwargs)


@pytest.mark.parametrize(
    ("status", "said"), [(TrialStatus.CRASHED, "crashed"), (TrialStatus.TIMEOUT, "timed out")]
)
def test_a_crash_or_timeout_is_retried_and_the_ladder_goes_on(
    tmp_path: Path, status: TrialStatus, said: str
) -> None:
    machine = float32_only(script={("float32", 128): [status]})
    rec = run(machine, tmp_path).recommendation
    assert machine.runs_of("float32", 128) == 2
    assert machine.runs_of("float32", 256) >= 1  # the ladder went on past the retried rung
    assert f"float32: batch size 128 {said}, ran again: ok" in rec.notes


def test_a_rung_that_crashes_twice_ends_the_ladder(tmp_path: Path) -> None:
    machine = float32_only(script={("float32", 128): [TrialStatus.CRASHED, TrialStatus.CRASHED]})
    rec = run(machine, tmp_path).recommendation
    assert machine.runs_of("float32", 128) == 2
    assert machine.runs_of("float32", 256) == 0
    assert "float32: batch size 128 crashed twice; larger batches skipped" in rec.notes
    assert rec.setup == Setup("float32", 64)


def test_an_oom_is_not_retried(tmp_path: Path) -> None:
    machine = float32_only(script={("float32", 128): [TrialStatus.OOM]})
    rec = run(machine, tmp_path).recommendation
    assert machine.runs_of("float32", 128) == 1
    assert machine.runs_of("float32", 256) == 0
    assert "float32: batch size 128 oom; larger batches skipped" in rec.notes


def test_a_resumed_search_recalls_the_retry_and_the_remeasurement(tmp_path: Path) -> None:
    # No growth past 128: float32 b128 (crashed, then ok) ties with b192 and b256, and the
    # runoff measures the three back to back in turns, after the runs they had.
    script: dict[tuple[str, int], list[float | TrialStatus]] = {
        ("float32", 128): [TrialStatus.CRASHED, 1300.0, 1280.0, 1290.0, 1310.0]
    }
    machine = float32_only(script=script, knee=128)
    first = run(machine, tmp_path, study="again")
    rec = first.recommendation
    assert rec.setup == Setup("float32", 128)
    # the crash, its retry, the confirming run, then two turns of the runoff (the three tie
    # in both, which settles it)
    assert machine.runs_of("float32", 128) == 5
    # It stands on all four of its ok runs (docs/search.md, "One rule for every figure"): the
    # retry, the confirming run and the runoff's two turns.
    assert set(rec.setup_trials) <= set(rec.trials)
    assert len(rec.setup_trials) == 4
    assert rec.samples_per_second_spread == (1280.0, 1310.0)
    assert rec.samples_per_second == 1295.0
    second = float32_only(script=script, knee=128)
    again = run(second, tmp_path, study="again", resume=True)
    assert second.calls == []
    assert again.recalled == len(machine.calls)
    assert again.recommendation == rec


@pytest.mark.parametrize("flipped", [False, True])
def test_overlapping_spreads_tie_and_the_simpler_setup_wins(tmp_path: Path, flipped: bool) -> None:
    # No growth past batch 64, so both policies stay at 64, and the final measures them back
    # to back: their per-turn ratios (1.05 and 0.98 against the leader) tie within 3%.
    f32, bf16 = [1000.0, 1100.0, 1040.0, 1060.0], [1090.0, 1030.0, 1050.0, 1060.0, 1070.0]
    if flipped:
        f32, bf16 = bf16, f32
    machine = Machine(
        speed={"float32": 900, "mixed_bfloat16": 900, "mixed_float16": 300},
        knee=64,
        script={("float32", 64): list(f32), ("mixed_bfloat16", 64): list(bf16)},
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup == Setup("float32", 64)
    assert [t.setup for t in rec.ties] == [Setup("mixed_bfloat16", 64)]
    trials = TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()
    bf16_runs = [t for t in trials if t.result.spec.setup == Setup("mixed_bfloat16", 64)]
    final = [t for t in bf16_runs if t.stage == "final"]
    # Two or three turns: a third runs only when the two could leave either setup ahead.
    assert [len(p.speeds) for p in rec.paired] == [len(final)]
    assert len(final) >= 2
    # The tie's figures are all its runs, the final's turns and those before them.
    speeds = [t.result.samples_per_second for t in bf16_runs if t.result.ok]
    assert rec.ties[0].spread == (min(speeds), max(speeds))
    assert "faster" not in rec.reason
    assert "tie within the measurement noise" in rec.reason
    (tie,) = [text for name, text in evidence_rows(rec) if name == "Tie"]
    assert tie.startswith("float32 b64 and mixed_bfloat16 b64 tie within the measurement noise")
    assert "re-run on an idle machine" in tie
    assert Recommendation.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


@pytest.mark.parametrize(("load", "busy"), [(0.5, True), (0.0, False), (None, False)])
def test_a_busy_machine_is_said(tmp_path: Path, load: float | None, busy: bool) -> None:
    machine = float32_only(background_load=load)
    rec = run(machine, tmp_path).recommendation
    rows = dict(evidence_rows(rec))
    if busy:
        assert rec.busy
        assert rec.busy.startswith("the machine was busy: other processes used")
        assert "50% of the CPU" in rec.busy
        assert "re-run on an idle machine" in rec.busy
        assert rec.busy in rec.notes
        assert "Busy machine" in rows
        assert Recommendation.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    else:
        assert rec.busy is None
        assert "Busy machine" not in rows
        assert not any("busy" in note for note in rec.notes)


def rounded_ids(policy: str) -> Hazard:
    return Hazard(
        "integer_cast",
        policy,
        "layer 'embed' (TokenAndPositionEmbedding)",
        "its float32 input holds whole numbers up to 19,999",
        'declare the model input as integers (keras.Input(..., dtype="int32"))',
        severity="unsafe",
    )


def test_an_unsafe_policy_is_never_recommended_but_its_gain_is_reported(tmp_path: Path) -> None:
    """mixed_bfloat16 measures 2x float32 (with the fix applied), but it corrupts this model's
    token ids: float32 is recommended, and the recommendation says what bfloat16 would gain
    and how to fix the model."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 2000, "mixed_float16": 400},
        unsafe={"mixed_bfloat16": rounded_ids("mixed_bfloat16")},
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup.policy == "float32"
    bf16 = [s for s in machine.calls if s.policy == "mixed_bfloat16"]
    assert len(bf16) == 1  # no ladder for an unsafe policy
    [alt] = [a for a in rec.alternatives if a.setup.policy == "mixed_bfloat16"]
    assert alt.rejected
    assert "unsafe for this model" in alt.rejected
    assert "2.00x float32's throughput at batch size 64" in alt.rejected
    assert alt.samples_per_second == 2000
    assert [h.kind for h in rec.hazards] == ["integer_cast"]
    assert rec.hazards[0].unsafe
    assert rec.hazards[0].policy == "mixed_bfloat16"
    rows = dict(evidence_rows(rec))
    assert 'dtype="int32"' in rows["Unsafe"]
    # Stored and read back whole.
    again = Recommendation.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again.hazards == rec.hazards


def test_the_numerics_probe_runs_once_per_low_precision_policy(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1500, "mixed_float16": 1400})
    run(machine, tmp_path)
    probed = [s for s in machine.calls if s.probe and s.policy.is_mixed]
    assert sorted(str(s.policy) for s in probed) == ["mixed_bfloat16", "mixed_float16"]
    assert all(s.batch_size == 64 for s in probed)  # the first trial of each, at the start


def test_when_every_low_precision_policy_is_unsafe_float32_is_the_answer(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 2000, "mixed_float16": 1800},
        unsafe={p: rounded_ids(p) for p in ("mixed_bfloat16", "mixed_float16")},
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup.policy == "float32"
    assert {h.policy for h in rec.hazards} == {"mixed_bfloat16", "mixed_float16"}
    assert "unsafe for this model" in rec.reason


def test_the_loss_scale_stage_starts_from_the_probes_evidence(tmp_path: Path) -> None:
    """The probe's largest float32 gradient times a fixed scale passes 65,504: that scale
    would overflow every step, so it is not run, and the note says why."""
    machine = Machine(
        speed={"float32": 1000, "mixed_float16": 2000},
        numerics={
            "mixed_float16": {
                "probe_s": 0.5,
                "grad_max": 100.0,
                "overflow_scale": 655.04,
                "flush_share": {"1": 0.2, "128": 0.01, "32768": 0.0},
            }
        },
    )
    space = SearchSpace(policies=("float32", "mixed_float16"))
    rec = run(machine, tmp_path, space=space).recommendation
    scales = {str(s.loss_scale) for s in machine.calls if s.policy == "mixed_float16"}
    assert "fixed:1024" not in scales
    assert "fixed:128" in scales
    notes = " ".join(rec.notes)
    assert "fixed:1024: not run" in notes
    assert "passes float16's 65,504" in notes
    assert "without loss scaling 20.00% of float32's gradient values" in notes


def test_a_search_cancelled_between_trials_opens_no_new_trial(tmp_path: Path) -> None:
    """A stop signal whose exception Python swallowed (in a finalizer) still set the cancel
    event: the search stops before the next trial instead of running on."""
    import threading

    from tuner.trials.runner import TrialCancelled

    machine = Machine(speed={"float32": 1000})
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(TrialCancelled):
        run(machine, tmp_path, cancel=cancel, space=SearchSpace(policies=("float32",)))
    assert machine.calls == []
    assert TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").view().trials == ()


@dataclass
class StartingMachine(Machine):
    """A machine whose runner, like the WorkerPool, is told the trials to start workers for."""

    ahead: list[list[Setup]] = field(default_factory=list)

    def start_ahead(self, specs: Any, cancel: Any = None) -> None:
        assert not self.calls, "asked before the first trial only"
        self.ahead.append([s.setup for s in specs])


def test_each_policys_first_worker_is_started_ahead_and_a_resume_starts_only_the_rest(
    tmp_path: Path,
) -> None:
    speed = {"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}
    first = StartingMachine(speed=speed, interrupt_at=2)
    events: list[Any] = []
    with pytest.raises(KeyboardInterrupt):
        run(first, tmp_path, study="ahead", on_event=events.append)
    said = [e.message for e in events if isinstance(e, StageStarted)]
    assert "starting 3 workers side by side (Python, TensorFlow), one per policy" in said
    # Before the first trial: a worker for each policy's first trial, the baseline's first.
    [ahead] = first.ahead
    assert ahead == [first.calls[0].setup, first.calls[1].setup, *ahead[2:]]
    assert {s.policy.name for s in ahead} == set(speed)
    assert len(ahead) == 3
    assert all(s.batch_size == first.calls[0].setup.batch_size for s in ahead)
    # Resumed after the baseline: only the two policies still to run.
    second = StartingMachine(speed=speed, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        run(second, tmp_path, study="ahead", resume=True)
    assert second.ahead == [ahead[1:]]
    # Resumed with one policy left: a single worker gains nothing from starting ahead.
    third = StartingMachine(speed=speed, interrupt_at=1)
    with pytest.raises(KeyboardInterrupt):
        run(third, tmp_path, study="ahead", resume=True)
    assert third.ahead == []


def test_a_recommendation_names_the_backend_after_the_knobs() -> None:
    from tuner.search.wording import _subject

    assert (
        _subject(Setup("float32", 512, backend="torch")) == "float32 at batch size 512 on PyTorch"
    )
    assert (
        _subject(Setup("float32", 64, xla=True, backend="torch"))
        == "float32 at batch size 64 with torch.compile on PyTorch"
    )
    assert _subject(Setup("float32", 8, xla=True)) == "float32 at batch size 8 with XLA"


def test_a_baseline_that_does_not_fit_the_start_batch_is_halved_until_it_does(
    tmp_path: Path,
) -> None:
    """The ResNet-50 search on PyTorch (issue 25): float32 ran out of memory at the starting
    batch size, so it never ran, nothing could be guarded against it, and the search ended
    with no viable setup. The baseline halves until it fits, every precision is compared
    there, and a guarded setup is recommended."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 1900},
        oom_at={"float32": 64, "mixed_bfloat16": 256, "mixed_float16": 256},
        knee=4096,
    )
    result = run(machine, tmp_path, profile=FakeProfile(gpus=(FakeGpu(),)))
    baseline = [s for s in machine.calls if s.policy == "float32" and not s.setup.tf32]
    assert [s.batch_size for s in baseline[:2]] == [64, 32]
    assert all(s.batch_size == 32 for s in machine.calls[2:4])  # the policies, where it fits
    rec = result.recommendation
    assert rec.setup.policy != "float32"
    assert rec.setup.batch_size >= 32
    assert rec.loss_gap is not None  # guarded against float32 where float32 runs
    assert any("the search starts at batch size 32" in n for n in rec.notes)


def test_no_baseline_fits_at_any_batch_size_says_so(tmp_path: Path) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 1900},
        oom_at={"float32": 1, "mixed_bfloat16": 1, "mixed_float16": 1},
    )
    with pytest.raises(NoViableSetup) as err:
        run(machine, tmp_path, space=SearchSpace(policies=("float32",)))
    assert [s.batch_size for s in machine.calls] == [64, 32, 16, 8]
    assert "oom" in str(err.value)
