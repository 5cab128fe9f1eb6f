"""A search whose trials cost a minute: the default GPU budget, the leader's checks reserved,
the memory model's leap and bisection, and losing trials pruned (issue 26).

Searches here run on measured tables (:class:`tuner.trials.lookup.Lookup`) on a simulated
clock: bench/data/h100-resnet50-jax.json is an H100's ResNet-50 trials, so a ten-minute GPU
search replays in a second. The worker's own pruning runs a real TensorFlow trial.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
from test_search_strategy import FakeGpu, FakeProfile

from tuner.search.evaluator import GPU_BUDGET_MAX_S
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import TuneResult, tune
from tuner.trials.lookup import Lookup, MachineTable, Measurement, SimClock
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import PRUNE_AFTER, TrialSpec

H100 = Path(__file__).resolve().parents[2] / "bench" / "data" / "h100-resnet50-jax.json"
H100_PROFILE = FakeProfile(gpus=(FakeGpu(compute_capability=(9, 0), memory_total_mb=81559),))


def search(
    table: MachineTable, tmp_path: Path, profile: Any = H100_PROFILE, **settings: Any
) -> tuple[TuneResult, Lookup]:
    clock = SimClock()
    runner = Lookup(table, clock)
    result = tune(
        TuneRequest(
            "builtin:cnn",
            settings=SearchSettings(**{"backend": "jax", "device": "gpu:0", **settings}),
            storage=f"sqlite:///{tmp_path / 's.db'}",
            study="s",
            profile=profile,
        ),
        runner=runner,
        clock=clock,
    )
    return result, runner


def grid_best(table: MachineTable) -> tuple[float, int]:
    """The best throughput of the grid the search runs in, and the grid's size."""
    space = SearchSpace(policies=H100_PROFILE.policies)
    precisions = [*space.policies, "float32+tf32"]
    best, size = 0.0, 0
    for precision in precisions:
        for b in space.batch_sizes:
            size += len(space.loss_scales) if precision == "mixed_float16" else 1
            m = table.predict(precision, b)
            if m.status is TrialStatus.OK:
                best = max(best, float(m.samples_per_second or 0))
    return best, size


def test_the_default_gpu_search_finds_the_h100_answer_within_its_budget(tmp_path: Path) -> None:
    table = MachineTable.load(H100)
    result, runner = search(table, tmp_path)
    best, size = grid_best(table)
    setup = result.recommendation.setup
    picked = table.predict(setup.precision, setup.batch_size).samples_per_second or 0.0
    assert picked >= 0.95 * best, f"picked {setup.label}"
    # A search, not the grid: at most half of it, within the default budget's cap (forty
    # trials at about a minute each, as these trials of fresh workers cost, pass the cap).
    assert len(runner.calls) <= size / 2
    assert runner.clock.now <= GPU_BUDGET_MAX_S


@pytest.mark.parametrize("minutes", [6, 7, 8, 9, 11, 13, 16, 20])
def test_a_budget_that_ends_leaves_the_leader_recommendable(minutes: int, tmp_path: Path) -> None:
    """Whatever minute the budget ends at, no faster measured setup is left unrecommended for
    want of its check: either the check ran, or the setup is named with what it lacks and
    the command that finishes it."""
    table = MachineTable.load(H100)
    result, runner = search(table, tmp_path, budget_minutes=minutes)
    rec = result.recommendation
    # A trial is priced at the median cost so far: none starts that its price says would pass
    # the budget; the last one may take longer than its price (a timeout took 150 s, not 60).
    ends = [*runner.started[1:], runner.clock.now]
    probe_s = table.phases.get("probe_s", 0.0)
    probes = [probe_s if s.probe and s.setup.policy.is_mixed else 0.0 for s in runner.calls]
    costs = [b - a - p for a, b, p in zip(runner.started, ends, probes, strict=True)]
    price = statistics.median(costs[:-1]) + probes[-1]
    assert runner.started[-1] + price <= minutes * 60 + 10
    measured = [
        (t.result.samples_per_second or 0.0, t.result.spec.setup)
        for runs in result.outcome.measured.values()
        for t in runs
        if t.result.ok and t.result.spec.policy != "float32"
    ]
    fastest, setup = max(measured, key=lambda pair: pair[0])
    if rec.samples_per_second < fastest * (1 - SearchSettings().noise_floor):
        lacking = [a for a in rec.alternatives if a.setup == setup]
        assert lacking, rec.alternatives
        assert "[[resume s]]" in (lacking[0].rejected or ""), rec.alternatives


def test_the_check_it_lacks_is_named_with_the_command(tmp_path: Path) -> None:
    """The leader's trial takes five times what trials took so far, and the budget ends
    inside it, before its reference can run: the recommendation names the setup and the
    one check it lacks, with the command that finishes it."""
    table = MachineTable(
        [
            Measurement("float32", 64, 1000, 9000),
            Measurement("float32+tf32", 64, 1100, 9000),
            Measurement("mixed_bfloat16", 64, 2000, 8000),
            Measurement("mixed_float16", 64, 2100, 8000),
            Measurement("mixed_bfloat16", 512, 3000, 64000),
            Measurement("mixed_float16", 512, 4000, 64000, seconds=300),
        ],
        memory_mb=70000,
        phases={"startup_s": 5, "build_s": 20, "warmup_s": 30, "measure_s": 5, "probe_s": 30},
    )
    result, _ = search(table, tmp_path, budget_minutes=8)
    texts = [(a.setup.label, a.rejected or "") for a in result.recommendation.alternatives]
    lacking = [t for label, t in texts if label.startswith("mixed_float16 b512")]
    assert lacking, texts
    assert "not compared with float32 at batch size 512" in lacking[0], texts
    assert "[[resume s]] runs that check" in lacking[0]  # the CLI: mptune tune --resume s


def test_under_a_time_budget_every_stage_after_the_ladders_runs(tmp_path: Path) -> None:
    """Issue 50: the H100's trials of fresh workers cost about a minute and each new batch
    size compiles, so the ladders alone would take twenty minutes. Each ladder makes its first
    step (its leap), then ends where the stages after it would lose their first trials: those
    stages each run, in order, within the budget, and the notes say what was cut short."""
    table = MachineTable.load(H100)
    result, runner = search(table, tmp_path, budget_minutes=20)
    runs = [m for ms in result.outcome.measured.values() for m in ms]
    stages = [str(m.stage) for m in runs]
    for stage in ("loss-scale", "remeasure", "neighbourhood", "runoff", "guard", "final"):
        assert stage in stages, (stage, stages)
    # Every precision left after the policies stage made its ladder's first step.
    kept = {m.result.spec.setup.precision for m in runs if m.stage == "policies"}
    kept -= set(result.outcome.abandoned)
    assert {m.result.spec.setup.precision for m in runs if m.stage == "batch"} >= kept
    assert any(
        "batch-size ladder for" in note
        and "cut short: the rest of the time budget of 20 min is kept for the stages after it"
        in note
        for note in result.outcome.notes
    ), result.outcome.notes
    assert runner.clock.now <= 20 * 60
    # The pick: the grid's best as the search without the cuts found it.
    best, _ = grid_best(table)
    setup = result.recommendation.setup
    assert (table.predict(setup.precision, setup.batch_size).samples_per_second or 0) >= (
        0.95 * best
    )


def test_the_stages_after_the_ladders_keep_their_first_trials_in_order() -> None:
    """What each stage leaves for those after it: every later stage's first trials from the
    ladders, the final's from the runoff, nothing from the final or the guard."""
    from tuner.search.stage import FIRST_TRIALS, Stage, first_trials_after

    assert first_trials_after(Stage.BATCH) == first_trials_after(Stage.REFINE) == FIRST_TRIALS
    assert [name for name, _ in first_trials_after(Stage.RUNOFF)] == [Stage.FINAL]
    assert next(name for name, _ in first_trials_after("xla")) == Stage.REMEASURE
    assert first_trials_after(Stage.FINAL) == first_trials_after(Stage.GUARD) == ()
    assert first_trials_after(Stage.POLICIES) == ()


def test_the_ladder_leaps_to_the_predicted_batch_and_bisects_after_an_oom(
    tmp_path: Path,
) -> None:
    """Memory grows 20 MB a sample: from batch size 64 the line predicts 1024 within the
    card, which runs out of memory (the card holds less than its line says); the ladder
    bisects down to 512 instead of doubling up from 64, and the other precision's ladder,
    taught by the OOM, never asks for 1024."""
    table = MachineTable(
        [
            Measurement("float32", 64, 1000, 1280, seconds=60),
            Measurement("float32+tf32", 64, 1500, 1280, seconds=60),
            Measurement("mixed_float16", 64, 2000, 1280, seconds=60),
            Measurement("mixed_float16", 1024, status=TrialStatus.OOM, seconds=60),
            Measurement("mixed_float16", 512, 4000, 10240, seconds=60),
            Measurement("mixed_bfloat16", 64, 1900, 1280, seconds=60),
            Measurement("mixed_bfloat16", 512, 3800, 10240, seconds=60),
        ],
        memory_mb=70000,
        phases={"probe_s": 30},
    )
    _, runner = search(table, tmp_path, budget_minutes=30)
    fp16 = [s.batch_size for s in runner.calls if s.setup.precision == "mixed_float16"]
    assert fp16[:4] == [64, 1024, 256, 512]  # the leap, then bisection between 64 and 1024
    bf16 = [s.batch_size for s in runner.calls if s.setup.precision == "mixed_bfloat16"]
    assert 1024 not in bf16
    assert 512 in bf16


def test_a_two_minute_cpu_search_tries_every_policy_of_the_prior(tmp_path: Path) -> None:
    """On a CPU with bf16 units mixed_float16 runs a hundred times slower than float32: its
    trial is pruned after its first steps, and mixed_bfloat16 still runs within the two
    minutes (without pruning mixed_float16's 40 measured steps alone take 75 s)."""
    table = MachineTable(
        [
            Measurement("float32", 64, 3482, 900),
            Measurement("mixed_float16", 64, 34, 900),
            Measurement("mixed_bfloat16", 64, 3000, 800),
        ],
        memory_mb=20000,
        phases={"startup_s": 4, "build_s": 2, "warmup_s": 1, "measure_s": 2, "probe_s": 8},
    )
    prior = ("float32", "mixed_float16", "mixed_bfloat16")
    result, runner = search(
        table,
        tmp_path,
        profile=FakeProfile(policies=prior),
        backend="tensorflow",
        device="cpu",
        budget_minutes=2,
    )
    tried = {s.setup.precision for s in runner.calls}
    assert tried >= set(prior)
    fp16 = [
        r
        for runs in result.outcome.measured.values()
        for r in runs
        if r.result.spec.policy == "mixed_float16"
    ]
    assert fp16[0].result.pruned
    assert fp16[0].result.samples_per_second == pytest.approx(34)


@pytest.mark.slow
def test_a_trial_under_its_pruning_rate_stops_after_its_first_steps(tmp_path: Path) -> None:
    """A real TensorFlow trial told to stop under an unreachable rate measures only
    PRUNE_AFTER steps, keeps their figure and skips timing its input."""
    spec = TrialSpec.create(
        "builtin:mlp",
        "float32",
        32,
        warmup_steps=1,
        measure_seconds=5.0,
        min_steps=50,
        device="cpu",
        prune_below=1e12,
    )
    result = run_trial(spec)
    assert result.ok, result.error
    assert result.pruned
    assert result.steps_completed == PRUNE_AFTER
    assert result.samples_per_second
    assert result.samples_per_second < 1e12
    assert result.input is None
    again = type(result).from_dict(result.to_dict())
    assert again.pruned
    assert again.pruned_words.startswith(f"pruned: stopped after {PRUNE_AFTER} steps under ")
