"""The search's knob stages on scripted trial outcomes: XLA, steps per execution, TF32, the
batch sizes between the powers of two, the global batch and the user's batch size."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from test_search_strategy import FakeGpu, FakeProfile, Machine, run

from tuner.search.measures import Paired, decide, settled, within
from tuner.search.recommend import Recommendation, evidence_rows
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import DeviceTraits, SearchSettings, SearchSpace
from tuner.search.stages.context import SPE_STEP_MS
from tuner.search.tune import tune
from tuner.setup import SPE_LADDER, Setup
from tuner.trials.models import parse_model_spec
from tuner.trials.result import TrialStatus

CPU = FakeProfile()


def gpu(cc: tuple[int, int] = (8, 0)) -> FakeProfile:
    return FakeProfile(gpus=(FakeGpu(cc),))


def float32_only(**kwargs: Any) -> Machine:
    """Both mixed policies are dropped at the start: only float32 (and its TF32 variant)."""
    speed = kwargs.pop("speed", {"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    return Machine(speed=speed, **kwargs)


def fast(**kwargs: Any) -> Machine:
    """float32 only, with steps of a few milliseconds: host overhead shows."""
    return float32_only(
        speed={"float32": 20000, "mixed_bfloat16": 7000, "mixed_float16": 3000}, **kwargs
    )


def xla_trials(machine: Machine) -> list[Setup]:
    return [s.setup for s in machine.calls if s.setup.xla]


def rows(rec: Recommendation) -> dict[str, str]:
    return dict(evidence_rows(rec))


def round_trips(rec: Recommendation) -> bool:
    return Recommendation.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


# -- XLA --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "profile", "tried"),
    [
        ("auto", CPU, False),
        ("auto", gpu((7, 0)), True),
        ("auto", gpu((8, 0)), True),
        ("off", gpu((8, 0)), False),
        ("on", CPU, True),
    ],
    ids=["auto-cpu", "auto-gpu70", "auto-gpu80", "off-gpu", "on-cpu"],
)
def test_the_xla_stage_runs_only_where_it_should(
    tmp_path: Path, mode: str, profile: FakeProfile, tried: bool
) -> None:
    machine = float32_only(xla_factor=1.2)
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16", "mixed_float16"), switches={"xla": mode}
    )
    result = run(machine, tmp_path, space=space, profile=profile)
    rec = result.recommendation
    assert bool(xla_trials(machine)) is tried
    assert rec.setup.xla is tried  # 20% faster: adopted wherever it was tried
    row = rows(rec)["XLA"]
    if tried:
        assert row.startswith("on: XLA at batch size")
        assert "1.20x" in row
        assert "adopted" in row
        assert {"xla"} <= {t.stage for t in TuningSession.load("t", _url(tmp_path)).trials()}
        assert "xla" in rec.reason.lower()  # "float32 at batch size 256 with XLA", or a tie
    else:
        assert row.startswith("off: not tried")
        why = {item["what"]: item["why"] for item in rec.not_tried}["XLA"]
        assert why == (
            "[[xla off]]"
            if mode == "off"
            else "[[xla auto]] tries XLA on a GPU only, and the trials ran on the CPU"
        )
    assert round_trips(rec)


def test_xla_is_adopted_only_beyond_the_noise_floor(tmp_path: Path) -> None:
    """2% faster is inside the 3% noise floor: not adopted, and the XLA trial (the fastest
    raw figure of the session) never becomes the pick."""
    machine = float32_only(xla_factor=1.02)
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16", "mixed_float16"), switches={"xla": "on"}
    )
    rec = run(machine, tmp_path, space=space).recommendation
    (tried,) = xla_trials(machine)
    assert tried == Setup("float32", 256, xla=True)
    assert rec.setup == Setup("float32", 256)
    assert not any(a.setup.xla for a in rec.alternatives)
    assert "1.02x" in rows(rec)["XLA"]
    assert "within the noise floor, not adopted" in rows(rec)["XLA"]
    assert next(k for k in rec.knobs if k.knob == "xla").gain == pytest.approx(1.02)


def test_an_unsupported_xla_trial_is_noted_and_the_search_goes_on_without_xla(
    tmp_path: Path,
) -> None:
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000},
        xla_status=TrialStatus.UNSUPPORTED,
    )
    result = run(machine, tmp_path, profile=gpu((8, 0)))
    rec = result.recommendation
    # One XLA trial, for the first precision whose pick was tried; never again.
    assert len(xla_trials(machine)) == 1
    assert not rec.setup.xla
    note = next(n for n in rec.notes if n.startswith("XLA: "))
    assert "is unsupported (XLA cannot compile this model: scripted)" in note
    assert "the search goes on without XLA" in note
    assert "does not compile under XLA" in {i["what"]: i["why"] for i in rec.not_tried}["XLA"]
    # The search went on: loss scales, the guard and re-measuring ran after it.
    stages = [t.stage for t in TuningSession.load("t", _url(tmp_path)).trials()]
    assert stages.index("xla") < stages.index("remeasure")
    assert rec.setup.policy.is_mixed
    assert rec.loss_gap is not None
    assert round_trips(rec)


def test_a_failed_xla_trial_ends_xla_for_its_precision_only(tmp_path: Path) -> None:
    """An XLA trial that runs out of memory says nothing about the other precisions."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 300},
        xla_factor=1.3,
        knee=4096,
        oom_at={"float32": 512, "mixed_bfloat16": 1 << 20},
    )
    # float32's pick (b256) OOMs under XLA: scripted through a smaller limit for XLA setups.
    real = machine.__call__

    def runner(spec: Any, *args: Any, **kwargs: Any) -> Any:
        if spec.setup.xla and spec.policy == "float32":
            machine.calls.append(spec)
            from tuner.trials.result import TrialError, TrialResult

            return TrialResult(spec, TrialStatus.OOM, error=TrialError("OOM under XLA"))
        return real(spec, *args, **kwargs)

    space = SearchSpace(policies=("float32", "mixed_bfloat16"), switches={"xla": "on"})
    rec = run(runner, tmp_path, space=space).recommendation  # type: ignore[arg-type]
    session = TuningSession.load("t", _url(tmp_path))
    stage = [t.result.spec.setup for t in session.trials() if t.stage == "xla"]
    assert [s.precision for s in stage] == ["float32", "mixed_bfloat16"]
    assert any("float32 goes on without XLA" in n and "oom" in n for n in rec.notes)
    assert rec.setup.xla
    assert rec.setup.policy == "mixed_bfloat16"


# -- steps per execution ----------------------------------------------------------------------


def test_steps_per_execution_is_tried_where_the_step_is_short(tmp_path: Path) -> None:
    machine = fast(spe_factor={4: 1.3, 16: 1.31})
    rec = run(machine, tmp_path).recommendation
    tried = sorted({s.setup.steps_per_execution for s in machine.calls})
    assert tried == [1, *SPE_LADDER]
    # 4 paid (30%); 16 gained under 1% more: not adopted, and never the pick.
    assert rec.setup.steps_per_execution == 4
    row = rows(rec)["Steps per execution"]
    assert row.startswith("4: 4 steps per execution at batch size 256: 1.30x")
    assert "16 steps per execution" in row
    assert "not adopted" in row
    assert next(k for k in rec.knobs if k.knob == "steps_per_execution").gain == pytest.approx(1.3)
    assert "4 steps per execution" in rows(rec)["Setup"]
    assert round_trips(rec)


def test_steps_per_execution_stops_at_the_first_rung_that_does_not_pay(tmp_path: Path) -> None:
    machine = fast(spe_factor={4: 1.01, 16: 2.0})
    rec = run(machine, tmp_path).recommendation
    trials = TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()
    ladder = [t.result.spec.setup.steps_per_execution for t in trials
              if t.stage == "steps-per-execution"]  # fmt: skip
    assert ladder == [4]  # 4 did not pay: the stage stops there
    # The pick's neighbourhood, which tries every knob combination at its batch size, still
    # finds a rung that pays where the one below it did not.
    assert rec.setup.steps_per_execution == 16
    assert any("beat" in n and "spe16" in n for n in rec.notes)


@pytest.mark.parametrize(
    ("factors", "switches"),
    [
        ({"spe_factor": {4: 1.3, 16: 1.6}}, {}),
        (
            {"knob_factor": {(True, 1): 0.9, (False, 4): 1.02, (False, 16): 1.02,
                             (True, 4): 1.1, (True, 16): 1.4}},
            {"xla": "on"},
        ),
    ],
    ids=["steps-per-execution-ladder", "neighbourhood"],
)  # fmt: skip
def test_a_search_that_ends_before_the_runoff_recommends_what_it_took(
    tmp_path: Path, factors: dict[str, Any], switches: dict[str, str]
) -> None:
    """A search cut short by its trial limit after every trial up to the runoff: what its
    evidence says was taken (a knob adopted on the pick, a neighbour that beat it) is what it
    recommends, never the pick without it."""
    space = SearchSpace(switches=switches)
    run(fast(**factors), tmp_path, space=space, study="whole")
    stages = [
        t.stage for t in TuningSession.load("whole", f"sqlite:///{tmp_path / 's.db'}").trials()
    ]
    first_knob = next(
        i for i, s in enumerate(stages) if s not in ("baseline", "policies", "batch", "refine")
    )
    cuts = range(first_knob + 1, stages.index("runoff") + 1)
    took_any = 0
    for limit in cuts:
        settings = SearchSettings(max_trials=limit)
        cut = run(fast(**factors), tmp_path, space=space, settings=settings, study=f"cut{limit}")
        took = [k for k in cut.outcome.knobs if k.adopted and k.precision == "float32"]
        if took:
            took_any += 1
            assert cut.recommendation.setup == took[-1].tried, limit
    assert took_any >= 2  # cuts inside and after the stage that took it


def test_steps_per_execution_is_not_tried_on_long_steps(tmp_path: Path) -> None:
    machine = float32_only(spe_factor={4: 2.0})  # b256: ~150 ms a step
    rec = run(machine, tmp_path).recommendation
    assert {s.setup.steps_per_execution for s in machine.calls} == {1}
    row = rows(rec)["Steps per execution"]
    assert row.startswith("1: not tried (the median step takes")
    assert f"not under {SPE_STEP_MS:g} ms" in row


# -- TF32 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "tried"),
    [(gpu((8, 0)), True), (gpu((8, 6)), True), (gpu((7, 0)), False), (CPU, False)],
    ids=["cc80", "cc86", "cc70", "cpu"],
)
def test_tf32_is_tried_only_on_compute_capability_8_and_up(
    tmp_path: Path, profile: FakeProfile, tried: bool
) -> None:
    machine = float32_only(tf32_factor=1.5)
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16", "mixed_float16"), switches={"xla": "off"}
    )
    rec = run(machine, tmp_path, space=space, profile=profile).recommendation
    tf32 = [s.setup for s in machine.calls if s.setup.tf32]
    assert bool(tf32) is tried
    # Never with a mixed policy (a Setup refuses that), and only as its own precision.
    assert all(s.policy == "float32" and s.precision == "float32+tf32" for s in tf32)
    if tried:
        # At the float32 baseline's batch first, then its own ladder.
        assert tf32[0].batch_size == 64
        assert max(s.batch_size for s in tf32) > 64
        assert rec.setup.tf32
        assert rec.setup.precision == "float32+tf32"
        # Guarded like a mixed policy: against IEEE float32 at the same batch size.
        assert rec.loss_gap == pytest.approx(0.0)
        assert rec.speedup_vs_float32 == pytest.approx(1.5)
        assert "float32+tf32 at batch size" in rec.reason
        assert "faster than float32" in rec.reason
        assert rows(rec)["TF32"].startswith("on: float32 storage with TensorFloat-32")
        (f32,) = [a for a in rec.alternatives if a.setup.precision == "float32"]
        assert not f32.setup.tf32
    else:
        assert not rec.setup.tf32
        assert rows(rec)["TF32"].startswith("off: IEEE float32 matmuls (TF32 needs")


def test_tf32_is_rejected_when_its_loss_drifts_from_ieee_float32(tmp_path: Path) -> None:
    machine = float32_only(tf32_factor=1.5, loss_offset={"float32+tf32": 0.5})
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16", "mixed_float16"), switches={"xla": "off"}
    )
    rec = run(machine, tmp_path, space=space, profile=gpu()).recommendation
    assert rec.setup == Setup("float32", 256)
    (tf32,) = [a for a in rec.alternatives if a.setup.tf32]
    assert tf32.rejected
    assert "loss gap to float32" in tf32.rejected
    assert rows(rec)["TF32"].startswith("off: IEEE float32 matmuls; float32+tf32 was tried")


def test_device_traits_from_a_profile() -> None:
    assert DeviceTraits.from_profile(gpu((8, 0)), "auto").tf32
    assert not DeviceTraits.from_profile(gpu((8, 0)), "cpu").gpu
    assert not DeviceTraits.from_profile(gpu((7, 5)), "gpu:0").tf32
    assert not DeviceTraits.from_profile(CPU, "auto").gpu


# -- batch sizes between the powers of two ----------------------------------------------------


def test_the_knee_is_refined_with_a_multiple_of_8(tmp_path: Path) -> None:
    """Growth stops past 256 (512 gains nothing): 384, midway to the faster neighbour, is
    tried; it does not beat 256 beyond the noise, so that is all."""
    machine = float32_only()
    run(machine, tmp_path)
    session = TuningSession.load("t", _url(tmp_path))
    refined = [t.result.spec.batch_size for t in session.trials() if t.stage == "refine"]
    assert refined == [384]


def test_a_refined_batch_that_pays_gets_one_more_step(tmp_path: Path) -> None:
    machine = float32_only(script={("float32", 384): [1800.0], ("float32", 448): [1700.0]})
    rec = run(machine, tmp_path).recommendation
    session = TuningSession.load("t", _url(tmp_path))
    refined = [t.result.spec.batch_size for t in session.trials() if t.stage == "refine"]
    assert refined == [384, 448]  # midway, then one step on towards 512; no more
    assert all(b % 8 == 0 for b in refined)
    assert rec.setup == Setup("float32", 384)


def test_no_refinement_without_refine(tmp_path: Path) -> None:
    machine = float32_only()
    run(machine, tmp_path, space=SearchSpace(batch_sizes=(64, 128, 256, 512, 1024), refine=False))
    assert all(s.batch_size in (64, 128, 256, 512, 1024) for s in machine.calls)


# -- the global batch -------------------------------------------------------------------------


def test_the_global_batch_is_fixed_over_every_trial(tmp_path: Path) -> None:
    """--global-batch 960 on a GPU with TF32: the baseline, the policies, the ladders (down
    from 960), the refinement, the loss scales, XLA, steps per execution, the guard (float32
    does not fit float16's batch) and the re-measurements all keep 960 samples per update."""
    machine = Machine(
        speed={"float32": 20000, "mixed_bfloat16": 30000, "mixed_float16": 32000},
        knee=4096,
        oom_at={"float32": 400, "mixed_float16": 1 << 20, "mixed_bfloat16": 1 << 20},
        xla_factor=1.1,
        spe_factor={4: 1.2},
    )
    space = SearchSpace(global_batch=960)
    result = run(machine, tmp_path, space=space, profile=gpu())
    rec = result.recommendation
    assert all(s.batch_size * s.setup.gradient_accumulation_steps == 960 for s in machine.calls)
    stages = {t.stage for t in TuningSession.load("t", _url(tmp_path)).trials()}
    assert {
        "baseline",
        "policies",
        "refine",
        "loss-scale",
        "xla",
        "steps-per-execution",
        "guard",
        "remeasure",
    } <= stages
    # The ladder starts at the global batch, without accumulation.
    assert machine.calls[0].setup == Setup("float32", 960)
    # float32 does not fit 960 or 480: it runs at 240 x 4, and 320 x 3 between.
    f32 = {s.setup.batch_size for s in machine.calls if s.setup.precision == "float32"}
    assert {960, 480, 320, 240} <= f32
    assert rec.setup.global_batch == 960
    assert rec.global_batch == 960
    assert any(n.startswith("the global batch 960 is kept") for n in rec.notes)
    assert rows(rec)["Global batch"].startswith("960, kept ([[global_batch]])")
    assert round_trips(rec)


def test_a_smaller_step_is_taken_only_when_it_is_faster(tmp_path: Path) -> None:
    """Below the largest per-step batch that fits, one rung is tried; it is kept (and the next
    tried) only when faster beyond the noise."""
    machine = float32_only(
        growth=0.0, script={("float32", 128): [1200.0], ("float32", 64): [1000.0]}
    )
    space = SearchSpace(global_batch=256)
    rec = run(machine, tmp_path, space=space).recommendation
    assert rec.setup == Setup("float32", 128, gradient_accumulation_steps=2)
    ladder = [s.batch_size for s in machine.calls if s.policy == "float32"]
    assert ladder[:1] == [256]
    assert 128 in ladder
    assert 64 in ladder
    assert 32 not in ladder


# -- knobs that pay only together -------------------------------------------------------------


def test_the_neighbourhood_finds_knobs_that_pay_only_together(tmp_path: Path) -> None:
    """XLA alone loses and 16 steps per execution alone barely pays, so the knob stages keep
    neither; together they are 40% faster. The neighbourhood of the pick (one step along each
    axis, then one more from the better point) finds them."""
    machine = fast(
        knob_factor={(True, 1): 0.9, (False, 4): 1.02, (False, 16): 1.02, (True, 4): 1.1,
                     (True, 16): 1.4},
    )  # fmt: skip
    space = SearchSpace(switches={"xla": "on"})
    rec = run(machine, tmp_path, space=space).recommendation
    assert rec.setup.xla
    assert rec.setup.steps_per_execution == 16
    stages = [s.stage for s in TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()]
    assert "neighbourhood" in stages
    # Bounded: a handful of trials more than the stages alone.
    assert len(machine.calls) <= 30
    # The evidence says where each knob came from, not only that its own stage rejected it.
    evidence = rows(rec)
    assert evidence["XLA"].startswith("on: found around the pick, with the other knobs")
    # Its stage's finding alone is told as outweighed, never as "not adopted": XLA is on.
    assert "its stage's first measurement, taken alone: XLA at batch size" in evidence["XLA"]
    assert "slower" in evidence["XLA"]
    assert "adopted" not in evidence["XLA"]
    assert evidence["Steps per execution"].startswith("16: found around the pick")
    assert round_trips(rec)


def test_the_neighbourhood_does_not_climb_past_a_batch_that_did_not_fit(tmp_path: Path) -> None:
    machine = fast(oom_at={"float32": 512}, knob_factor={(True, 16): 1.5})
    rec = run(machine, tmp_path, space=SearchSpace(switches={"xla": "on"})).recommendation
    trials = TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()
    around = [t.result.spec.setup for t in trials if t.stage == "neighbourhood"]
    assert around, "the neighbourhood ran"
    assert all(s.batch_size < 512 for s in around)
    assert rec.setup.batch_size < 512
    assert rec.setup.xla
    assert rec.setup.steps_per_execution == 16


# -- the user's batch size --------------------------------------------------------------------


def test_a_batch_size_unlike_the_users_says_what_it_means_for_the_learning_rate(
    tmp_path: Path,
) -> None:
    machine = float32_only()
    rec = run(machine, tmp_path, space=SearchSpace(user_batch=32)).recommendation
    assert rec.setup.batch_size == 256
    assert rec.user_batch == 32
    (note,) = [n for n in rec.notes if "differs from yours" in n]
    assert "the recommended batch size 256 differs from yours (32)" in note
    assert "256/32 = 8" in note
    assert "Goyal et al. 2017" in note
    assert "[[global_batch 32]]" in note
    assert "yours is 32" in rows(rec)["Global batch"]
    assert round_trips(rec)


def test_no_learning_rate_note_when_the_batch_size_is_the_users(tmp_path: Path) -> None:
    rec = run(float32_only(), tmp_path, space=SearchSpace(user_batch=256)).recommendation
    assert not any("differs from yours" in n for n in rec.notes)
    rec = run(float32_only(), tmp_path, study="u", space=SearchSpace()).recommendation
    assert not any("differs from yours" in n for n in rec.notes)


def test_tune_takes_the_users_batch_size_from_the_model_file(tmp_path: Path) -> None:
    # Every face gets the note, not only the command line: tune() reads BATCH_SIZE itself.
    model = tmp_path / "net.py"
    model.write_text("BATCH_SIZE = 32\ndef build_model():\n    raise SystemExit('never run')\n")
    rec = tune(
        TuneRequest(
            str(model), storage=f"sqlite:///{tmp_path / 's.db'}", study="m", profile=FakeProfile()
        ),
        runner=float32_only(),
    ).recommendation
    assert rec.user_batch == 32
    assert any("differs from yours (32)" in n for n in rec.notes)


@pytest.mark.parametrize(
    ("source", "batch"),
    [
        ("BATCH_SIZE = 48\n", 48),
        ("BATCH_SIZE: int = 96\n", 96),
        ("BATCH_SIZE = 16\nBATCH_SIZE = 24\n", 24),
        ("BATCH_SIZE = 8 * 4\n", None),
        ("BATCH_SIZE = '32'\n", None),
        ("BATCH_SIZE = True\n", None),
        ("def f():\n    BATCH_SIZE = 32\n", None),
        ("batch_size = 32\n", None),
    ],
)
def test_the_model_files_batch_size_is_read_without_running_it(
    tmp_path: Path, source: str, batch: int | None
) -> None:
    model = tmp_path / "net.py"
    model.write_text(source + "def build_model():\n    raise SystemExit('never run')\n")
    assert parse_model_spec(str(model)).user_batch == batch


# -- resuming ---------------------------------------------------------------------------------


def test_a_resumed_knob_search_recalls_every_trial(tmp_path: Path) -> None:
    def machine(**kwargs: Any) -> Machine:
        return fast(xla_factor=1.2, spe_factor={4: 1.3, 16: 1.31}, tf32_factor=1.4, **kwargs)

    first = machine(interrupt_at=9)
    with pytest.raises(KeyboardInterrupt):
        run(first, tmp_path, study="knobs", profile=gpu())
    finished = [s.setup for s in first.calls[:8]]
    second = machine()
    result = run(second, tmp_path, study="knobs", resume=True, profile=gpu())
    assert not set(finished) & {s.setup for s in second.calls}
    rec = result.recommendation
    assert rec.setup.tf32
    assert rec.setup.xla
    assert rec.setup.steps_per_execution == 4
    # Once finished, a resumed search runs nothing and recommends the same.
    third = machine()
    again = run(third, tmp_path, study="knobs", resume=True, profile=gpu())
    assert third.calls == []
    assert again.recommendation == rec


# -- the runoff -------------------------------------------------------------------------------


def _first_run_low(machine: Machine, setup: Setup, factor: float) -> Any:
    """``machine`` with the first trial of ``setup`` measured ``factor`` times its truth (a slow
    moment of the machine)."""

    def runner(spec: Any, *args: Any, **kwargs: Any) -> Any:
        first = not any(s.setup == spec.setup for s in machine.calls)
        result = machine(spec, *args, **kwargs)
        if first and spec.setup == setup:
            low = result.samples_per_second * factor
            return dataclasses.replace(result, samples_per_second=low)
        return result

    return runner


def test_a_runoff_finds_the_faster_of_two_setups_one_trial_each_could_not_tell(
    tmp_path: Path,
) -> None:
    """16 steps per execution is 3% faster than 4 in truth, but its first trial fell 2%: one
    trial each puts them inside the 3% noise floor, where the simpler setup would stay. The
    runoff measures them back to back in turns, and their per-turn ratios separate them."""
    machine = fast(spe_factor={4: 1.30, 16: 1.34})
    spe16 = Setup("float32", 256, steps_per_execution=16)
    rec = run(_first_run_low(machine, spe16, 0.98), tmp_path).recommendation
    assert rec.setup == spe16
    assert rec.samples_per_second == pytest.approx(machine.speed["float32"] * 1.3**2 * 1.34)
    trials = TuningSession.load("t", _url(tmp_path)).trials()
    runoff = [t for t in trials if t.stage == "runoff"]
    # Each turn runs every finalist once, back to back, in the reverse order of the turn
    # before; two turns that agree settle it. The pick stands on its runs in the runoff.
    (paired,) = rec.paired
    assert paired.stage == "runoff"
    assert spe16 in paired.setups
    assert len(paired.speeds) == 2
    assert [t.number for t in runoff] == list(paired.numbers())
    first, second = paired.trials
    assert [trials[n].result.spec.setup for n in first] == list(paired.setups)
    assert sorted(first) == list(first)
    assert sorted(second, reverse=True) == list(second)
    # Its figure is the median of all its runs (docs/search.md, "One rule for every figure"),
    # the runoff's turns and the one before them.
    assert set(paired.numbers(spe16)) < set(rec.setup_trials) <= set(rec.trials)
    assert rec.setup_trials == tuple(
        t.number for t in trials if t.result.spec.setup == spe16 and t.result.ok
    )
    assert paired.ratio(paired.setups[0], spe16) == pytest.approx(1.34 / 1.30)
    assert any("beat" in n and "in a runoff" in n for n in rec.notes)
    assert "in a runoff" in rows(rec)["Steps per execution"]
    assert round_trips(rec)


def test_a_runoff_keeps_the_simpler_setup_within_its_margin(tmp_path: Path) -> None:
    """16 steps per execution measures 0.8% faster than 4 every time: inside the runoff's 1%
    margin, so the simpler 4 stays, standing on its three runs; nothing is measured again
    after the runoff."""
    machine = fast(spe_factor={4: 1.30, 16: 1.31})
    rec = run(machine, tmp_path).recommendation
    assert rec.setup == Setup("float32", 256, steps_per_execution=4)
    trials = TuningSession.load("t", _url(tmp_path)).trials()
    assert {t.result.spec.setup.steps_per_execution for t in trials if t.stage == "runoff"} >= {
        4,
        16,
    }
    assert set(rec.paired[0].numbers(rec.setup)) <= set(rec.setup_trials)
    assert not [t for t in trials if t.stage == "remeasure" and t.number > max(rec.trials)]


def test_the_setup_a_narrow_move_left_joins_the_runoff(tmp_path: Path) -> None:
    """The neighbourhood moves from b256 to b384 (both with 4 steps per execution, the same in
    truth) on b384's first trial, a lucky 3.2% ahead: just past the noise floor, and so just
    outside the runoff's window around b384. The setup the move left joins the runoff all
    the same, and the two measured back to back tie: the simpler b256 is the pick."""
    machine = fast(spe_factor={4: 1.30, 16: 1.30})
    b384 = Setup("float32", 384, steps_per_execution=4)
    rec = run(_first_run_low(machine, b384, 1.032), tmp_path).recommendation
    assert any("float32 b384 none spe4 beat float32 b256 none spe4" in n for n in rec.notes)
    assert rec.setup == Setup("float32", 256, steps_per_execution=4)
    (paired,) = rec.paired
    assert set(paired.setups) >= {b384, rec.setup}
    assert paired.ratio(b384, rec.setup) == pytest.approx(1.0)


def test_the_runoff_decides_on_turns_back_to_back_on_a_drifting_machine(tmp_path: Path) -> None:
    """The machine slows by 2% with every trial, a drift as large as the gap between the
    finalists: figures taken at different moments mislead, the ratio of runs back to back in
    turns (each turn reversing the order) does not. 16 steps per execution is 3% faster in
    truth and wins."""
    machine = fast(spe_factor={4: 1.30, 16: 1.34})
    spe16 = Setup("float32", 256, steps_per_execution=16)

    def drifting(spec: Any, *args: Any, **kwargs: Any) -> Any:
        result = machine(spec, *args, **kwargs)
        slow = 0.98 ** len(machine.calls)
        return dataclasses.replace(result, samples_per_second=result.samples_per_second * slow)

    rec = run(drifting, tmp_path).recommendation
    assert rec.setup == spe16
    (paired,) = rec.paired
    spe4 = spe16.replace(steps_per_execution=4)
    # Within a turn the later run is slower by the drift; the reversed order of the next
    # turn evens it out.
    assert paired.ratio(spe4, spe16) == pytest.approx(1.34 / 1.30, rel=0.01)


def test_the_final_decides_between_precisions_on_runs_back_to_back(tmp_path: Path) -> None:
    """bench run 8: bfloat16's pick measured 1,980 then 1,556 (the machine slowed), float32's
    once at 1,480. On their figures the ranges overlap (a 24% spread), a tie, and the simpler
    float32 would win. Measured back to back, bfloat16 runs 1.3x float32 in every turn."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1300, "mixed_float16": 300},
        knee=64,
        script={("mixed_bfloat16", 64): [1980.0, 1556.0], ("float32", 64): [1480.0]},
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup == Setup("mixed_bfloat16", 64)
    assert rec.speedup_vs_float32 == pytest.approx(1.3)
    assert not rec.ties
    assert "1.30x faster than float32" in rec.reason
    assert "measured back to back" in rec.reason
    (final,) = rec.paired
    assert final.stage == "final"
    assert len(final.speeds) == 2  # two turns that agree settle it
    assert set(final.numbers(rec.setup)) <= set(rec.trials)
    assert rows(rec)["Final"].startswith(
        "mixed_bfloat16 b64 and float32 b64 measured back to back in 2 turns: mixed_bfloat16 "
        "b64 ran 1.30x float32 b64 (1.30, 1.30)"
    )
    assert round_trips(rec)
    with pytest.raises(ValueError, match="malformed paired"):
        Recommendation.from_dict(rec.to_dict() | {"paired": [{"stage": "final"}]})


def test_the_speedup_is_stated_against_the_float32_measured_back_to_back(tmp_path: Path) -> None:
    """float32 b128 measured a lucky 1,400 once, float32's pick (b64) and bfloat16's ran
    1,000 and 1,300 in the final, side by side. The speed-up is bfloat16's against the float32
    it ran beside (1.30x), not 0.93x a figure taken minutes earlier on a drifting machine."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1300, "mixed_float16": 300},
        knee=64,
        script={
            ("mixed_bfloat16", 64): [1980.0, 1556.0],
            ("float32", 64): [1480.0],
            ("float32", 128): [1400.0],
        },
    )
    rec = run(machine, tmp_path).recommendation
    assert rec.setup == Setup("mixed_bfloat16", 64)
    (final,) = rec.paired
    assert Setup("float32", 64) in final.setups
    assert rec.speedup_vs_float32 == pytest.approx(1.3)
    assert rec.float32_samples_per_second == pytest.approx(1000.0)
    assert "1.30x faster than float32" in rec.reason


def test_decide_and_settled() -> None:
    a, b, c = (Setup("float32", 256, steps_per_execution=n) for n in (1, 4, 16))
    # The simplest within the margin of the fastest, the same whichever way round.
    assert decide({a: 1.0, b: 1.02, c: 1.005}, 0.03) == a
    assert decide({a: 1.0, b: 1.05, c: 1.04}, 0.03) == b
    assert decide({a: 1.0, b: 0.9, c: 1.04}, 0.03) == c
    assert within(1.03, 0.03)
    assert within(1 / 1.03, 0.03)
    assert not within(1.04, 0.03)
    # Settled: whatever the last turn measures, b stays ahead of a beyond the margin.
    assert settled({a: (1.0, 1.0), b: (1.06, 1.10)}, 0.03)
    # Not settled: the median may still land inside the margin, or outside it.
    assert not settled({a: (1.0, 1.0), b: (1.01, 1.10)}, 0.03)
    # Settled as a tie: both bounds inside the margin, the simpler a wins either way.
    assert settled({a: (1.0, 1.0), b: (0.99, 1.02)}, 0.03)
    # A simpler setup that may still come within the margin unsettles a pick.
    assert not settled({a: (1.0, 1.0), b: (1.2, 1.3), c: (1.25, 1.26)}, 0.03)


def test_a_paired_comparison_round_trips_and_refuses_a_malformed_one() -> None:
    a, b = Setup("float32", 64), Setup("mixed_bfloat16", 64)
    p = Paired(
        "final", (a, b), ((100.0, 130.0), (90.0, 120.0), (95.0, 0.0)), ((1, 2), (4, 3), (5, 6))
    )
    assert Paired.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert p.ratios(a, b) == pytest.approx([1.3, 120 / 90])  # the failed run is left out
    assert p.ratio(a, b) == pytest.approx((1.3 + 120 / 90) / 2)
    assert p.numbers(b) == (2, 3, 6)
    broken = p.to_dict() | {"trials": [[1], [4, 3], [5, 6]]}
    with pytest.raises(ValueError, match="turns do not match"):
        Paired.from_dict(broken)


def test_no_runoff_for_the_memory_objective(tmp_path: Path) -> None:
    machine = fast(spe_factor={4: 1.30, 16: 1.31})
    run(machine, tmp_path, settings=SearchSettings(objective="memory"))
    trials = TuningSession.load("t", _url(tmp_path)).trials()
    assert not [t for t in trials if t.stage == "runoff"]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 's.db'}"


def test_the_search_knobs_doc_names_the_rule() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "search.md").read_text()
    assert f"{SPE_STEP_MS:g} ms" in doc
    assert "--global-batch" in doc
    assert "float32+tf32" in doc


def test_a_recommendation_stored_before_the_knobs_shows_its_settings() -> None:
    old = {
        "setup": {"policy": "float32", "batch_size": 64, "loss_scale": "none"},
        "samples_per_second": 1000.0,
        "samples_per_second_spread": [990.0, 1010.0],
        "baseline_samples_per_second": 1000.0,
        "float32_samples_per_second": 1000.0,
        "speedup_vs_float32": 1.0,
        "speedup_vs_baseline": 1.0,
        "memory_saving": None,
        "peak_memory_mb": 100.0,
        "memory_kind": "cpu_rss",
        "loss_gap": 0.0,
        "skipped_steps": 0,
        "reason": "float32 at batch size 64 is the best setup here.",
        "trials": [1],
        "objective": "speed",
    }
    rec = Recommendation.from_dict(old)
    assert rec.knobs == ()
    assert rec.global_batch is None
    assert rec.user_batch is None
    shown = rows(rec)
    assert (shown["XLA"], shown["Steps per execution"], shown["TF32"]) == ("off", "1", "off")
    assert shown["Global batch"] == "64"
    assert round_trips(rec)


def test_the_guard_compares_losses_at_the_candidates_steps_per_execution(tmp_path: Path) -> None:
    """A trial of 16 steps per execution reports each execution's mean loss and warms up in
    whole executions: float32 at one step per execution is not comparable step for step (the
    scripted losses here, as a worker's, would differ by 7% though the policy costs nothing)."""
    machine = Machine(
        speed={"float32": 20000, "mixed_bfloat16": 30000, "mixed_float16": 3000},
        spe_factor={4: 1.3, 16: 1.6},
    )
    result = run(machine, tmp_path, space=SearchSpace(policies=("float32", "mixed_bfloat16")))
    rec = result.recommendation
    assert rec.setup.policy == "mixed_bfloat16"
    assert rec.setup.steps_per_execution == 16
    assert rec.loss_gap == pytest.approx(0.0)
    guards = [s.setup for s in machine.calls if s.setup.policy == "float32"]
    assert Setup("float32", rec.setup.batch_size, steps_per_execution=16) in guards


def test_a_lucky_leader_is_confirmed_before_the_picks_look_around(tmp_path: Path) -> None:
    """bfloat16's first trial at 256 is a lucky 2,200 samples/s (it runs 1,605): measured once
    more, its median lead is within reach of float32's pick, which then gets its
    neighbourhood too instead of being left out by one outlier."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 950, "mixed_float16": 300},
        script={("mixed_bfloat16", 256): [2200.0]},
    )
    run(machine, tmp_path, space=SearchSpace(policies=("float32", "mixed_bfloat16")))
    trials = TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}").trials()
    stages = [(t.stage, t.result.spec.setup) for t in trials]
    confirm = stages.index(("remeasure", Setup("mixed_bfloat16", 256)))
    around = [i for i, (stage, _) in enumerate(stages) if stage == "neighbourhood"]
    assert around
    assert confirm < around[0]
    assert any(stages[i][1].policy == "float32" for i in around)
    # The confirming run is the one the remeasure stage takes: it is not run again there.
    assert stages.count(("remeasure", Setup("mixed_bfloat16", 256))) == 1


def test_the_confirmed_leader_is_looked_around_from_its_median(tmp_path: Path) -> None:
    """float32's first trial at 256 is a lucky 2,400 (it runs 1,690; 512 runs 2,197): its
    neighbours must beat the median of its two runs, not the lucky figure, and the evidence
    says so."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300},
        script={("float32", 256): [2400.0]},
        knee=512,
    )
    space = SearchSpace(policies=("float32", "mixed_bfloat16"), refine=False)
    rec = run(machine, tmp_path, space=space).recommendation
    assert rec.setup == Setup("float32", 512)
    # 512 beat 256's median (2,045, trials #3 and #5), not its lucky 2,400; and 256 with its
    # lucky run did not win back.
    [moved] = [n for n in rec.notes if " beat " in n]
    assert moved.startswith("float32: float32 b512 none beat float32 b256 none by 7%")


@pytest.mark.parametrize(
    ("saving", "said"),
    [(0.12, "12% less than"), (-0.04, "4% more than"), (0.001, "the same as")],
)
def test_the_memory_row_says_more_or_less_than_float32(
    saving: float, said: str, tmp_path: Path
) -> None:
    """A mixed policy can peak higher than float32 (its float32 master weights beside the
    low-precision copies): "-4% less" was printed; now "4% more"."""
    rec = run(fast(), tmp_path).recommendation
    memory = rows(dataclasses.replace(rec, memory_saving=saving))["Memory"]
    assert f"{said} float32 at this batch size" in memory


def test_the_default_float32_of_each_backend_and_device() -> None:
    from tuner.hardware.advice import default_float32

    assert default_float32("tensorflow", True) == "float32+tf32"
    assert default_float32("jax", True) == "float32+tf32"
    assert default_float32("torch", True) == "float32"  # TF32 convolutions, IEEE matmuls
    assert all(default_float32(b, False) == "float32" for b in ("tensorflow", "jax", "torch"))


def test_speed_ups_are_stated_against_the_users_float32_as_it_runs_today(tmp_path: Path) -> None:
    """Issue 25: on an A100 TensorFlow's float32 runs TF32, so the speed-up a user sees is
    against float32+tf32 (here 1.4x IEEE float32), which is never dropped as a laggard; IEEE
    float32 stays a row of its own."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 2600, "mixed_float16": 2800},
        tf32_factor=1.4,
        knee=512,
    )
    gpu = FakeProfile(gpus=(FakeGpu(compute_capability=(8, 0)),))
    rec = run(machine, tmp_path, profile=gpu).recommendation
    assert rec.reference == "float32+tf32"
    tf32_runs = [s for s in machine.calls if s.setup.tf32]
    assert max(s.batch_size for s in tf32_runs) > 64  # its ladder climbed: not abandoned
    assert rec.speedup_vs_reference is not None
    assert rec.speedup_vs_float32 is not None
    assert rec.speedup_vs_reference == pytest.approx(rec.speedup_vs_float32 / 1.4, rel=0.05)
    assert "your float32 as it runs today" in rec.reason
    assert "TensorFlow runs float32 matmuls and convolutions in TF32" in rec.reason
    rows = dict(evidence_rows(rec))
    assert rows["Against your float32"].startswith(f"{rec.speedup_vs_reference:.2f}x float32+tf32")
    assert "Against float32" in rows  # IEEE float32, its own row


def test_on_pytorch_the_figures_say_they_are_against_ieee_float32(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 2600, "mixed_float16": 2800})
    gpu = FakeProfile(gpus=(FakeGpu(compute_capability=(9, 0)),))
    rec = run(
        machine, tmp_path, profile=gpu, settings=SearchSettings(backend="torch")
    ).recommendation
    assert rec.reference == "float32"
    assert any("PyTorch runs float32 convolutions in TF32" in n for n in rec.notes)
    assert "Against your float32" not in dict(evidence_rows(rec))


def test_on_a_cpu_the_reference_is_float32_and_nothing_more_is_said(tmp_path: Path) -> None:
    machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 1600, "mixed_float16": 300})
    rec = run(machine, tmp_path).recommendation
    assert rec.reference == "float32"
    assert rec.speedup_vs_reference == pytest.approx(rec.speedup_vs_float32)
    assert "today" not in rec.reason
    assert not any("TF32" in n for n in rec.notes)
