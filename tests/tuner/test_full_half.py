"""Issue 71: full half-precision policies (``bfloat16``, ``float16``: weights and compute in
the half type) are names mptune parses, runs and exports like any other; a trial whose
trainable weights do not move is the ``not_training`` trap, explained by the optimizer's
hyperparameters as the weights' dtype holds them; and a trap in what the user runs today is
the recommendation's first line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from test_search_strategy import Machine, run

from tuner.policies import FULL_HALF, KNOWN_POLICIES, POLICIES
from tuner.search.session import optuna_params
from tuner.search.space import SearchSpace
from tuner.search.wording import evidence_rows
from tuner.setup import LossScale, Policy, Setup
from tuner.trials.hazards import (
    NOT_TRAINING,
    Hazard,
    not_training,
    round_to,
    rounds_away,
)
from tuner.trials.result import TrialError, TrialResult, TrialStatus

ADAMW = {"learning_rate": 1e-3, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}


@pytest.mark.parametrize("name", KNOWN_POLICIES)
def test_every_policy_name_round_trips(name: str) -> None:
    policy = Policy.parse(name)
    assert policy == name
    assert str(policy) == name
    assert Policy.from_config(json.loads(json.dumps(policy.get_config()))) == policy
    # One place knows a policy from the dtypes a layer reads back with.
    assert Policy.of_dtypes(policy.compute_dtype, policy.variable_dtype) == policy
    setup = Setup(name, 32)
    assert Setup.from_dict(json.loads(json.dumps(setup.to_dict()))) == setup


def test_the_full_half_policies_keep_their_weights_in_the_half_type() -> None:
    assert FULL_HALF == ("bfloat16", "float16")
    for name, half in (("bfloat16", "bfloat16"), ("float16", "float16")):
        policy = Policy(name)
        assert (policy.compute_dtype, policy.variable_dtype) == (half, half)
        assert policy.is_full_half
        assert policy.is_half
        assert not policy.is_mixed
        # Keras wraps the optimizer in a LossScaleOptimizer under mixed_float16 only.
        assert LossScale.default_for(policy) == LossScale("none")
    assert Policy.of_dtypes("bfloat16", "float32") == "mixed_bfloat16"
    assert Policy.of_dtypes("float16", "bfloat16") is None
    # Not a default candidate, and the least simple: a tie never goes to it.
    assert not set(FULL_HALF) & set(POLICIES)
    assert Setup("bfloat16", 64).simplicity() > Setup("mixed_bfloat16", 64).simplicity()
    with pytest.raises(ValueError, match="TF32 is a variant of float32"):
        Setup("bfloat16", 64, tf32=True)


def test_a_full_half_trial_is_stored_under_a_parameter_of_its_own() -> None:
    """Optuna refuses one parameter with different choices in one study: sessions stored
    before issue 71 know three policies."""
    params, distributions = optuna_params(Setup("bfloat16", 32))
    assert params == {"full_half_policy": "bfloat16", "batch_size": 32}
    assert set(distributions) == set(params)
    params, distributions = optuna_params(Setup("mixed_bfloat16", 32))
    assert params == {"policy": "mixed_bfloat16", "batch_size": 32}
    assert distributions["policy"].choices == POLICIES


@pytest.mark.parametrize(
    "value", [0.999, 0.9, 1e-7, 1e-3, 3e-5, 65504.0, 7e4, 1e-8, -2.5e-6, 0.0, 1.0]
)
def test_rounding_matches_the_formats(value: float) -> None:
    as_bf16 = float(np.float32(value).astype(ml_dtypes.bfloat16))
    assert round_to(value, "bfloat16") == as_bf16
    with np.errstate(over="ignore"):
        assert round_to(value, "float16") == float(np.float16(value))


def test_the_hyperparameter_that_rounds_away_is_named() -> None:
    # keras-team/keras-hub#2629: Adam's step is lr * sqrt(1 - beta_2**t) / (1 - beta_1**t).
    assert rounds_away(ADAMW, "bfloat16", "AdamW") == "AdamW's beta_2 0.999 is 1.0 in bfloat16"
    assert rounds_away(ADAMW, "float16", "AdamW") is None  # 0.999 is 0.99902 in float16
    assert rounds_away(ADAMW, "float32", "AdamW") is None
    assert rounds_away({"learning_rate": 1e-8}, "float16", "SGD") == (
        "SGD's learning_rate 1e-08 is 0.0 in float16"
    )
    # A value set so on purpose is no rounding.
    assert rounds_away({"beta_2": 1.0, "learning_rate": 0.0}, "bfloat16") is None


def test_weights_that_do_not_move_are_the_precisions_where_they_are_half() -> None:
    why = rounds_away(ADAMW, "bfloat16", "AdamW")
    hazard = not_training("bfloat16", 5, 72, "bfloat16", why)
    assert (hazard.kind, hazard.severity, hazard.whose, hazard.layer) == (
        NOT_TRAINING,
        "unsafe",
        "precision",
        None,
    )
    assert hazard.evidence == (
        "none of 5 trainable weights moved over 72 steps (AdamW's beta_2 0.999 is 1.0 in bfloat16)"
    )
    assert hazard.fix == (
        "use mixed_bfloat16 (float32 weights), or keep the optimizer's state in float32"
    )
    assert Hazard.from_dict(json.loads(json.dumps(hazard.to_dict()))) == hazard
    # float32 weights that do not move: the precision does not explain it.
    theirs = not_training("mixed_bfloat16", 5, 72, None, None)
    assert (theirs.severity, theirs.whose) == ("warning", "model")


def test_a_trap_in_todays_run_is_the_first_line_and_no_speedup_is_stated_against_it(
    tmp_path: Path,
) -> None:
    """A script that runs full bfloat16 today (trial #0) whose weights do not move: the
    recommendation says so first, with the fix; no setup that does not train is recommended,
    and no speed-up is stated against that run."""
    trap = not_training("bfloat16", 5, 72, "bfloat16", rounds_away(ADAMW, "bfloat16", "AdamW"))
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 300, "bfloat16": 1400},
        unsafe={"bfloat16": trap},
    )
    own = Setup("bfloat16", 64)
    space = SearchSpace(
        policies=("float32", "mixed_bfloat16", "bfloat16"),
        user_policy="bfloat16",
        user_setup=own,
        user_setup_words="bfloat16 (set at train.py:18), batch size 64 (fit at train.py:40)",
    )
    result = run(machine, tmp_path, space=space)
    assert machine.calls[0].setup == own  # trial #0: what the user runs today
    rec = result.recommendation
    line = (
        "your run today does not train: none of 5 trainable weights moved over 72 steps "
        "(AdamW's beta_2 0.999 is 1.0 in bfloat16). Fix: use mixed_bfloat16 (float32 "
        "weights), or keep the optimizer's state in float32"
    )
    assert rec.today_trap == line
    assert rec.reason.startswith("Y" + line[1:] + ". ")
    assert rec.setup.policy in ("float32", "mixed_bfloat16")
    rows = evidence_rows(rec)
    assert rows[0] == ("Today", "Y" + line[1:])
    today = dict(rows)["Against what you run today"]
    assert today.startswith("no speed-up stated: your run today does not train")
    assert rec.today is None  # the figures are against float32, not that run
    # The trap is kept with the recommendation as stored and read back.
    again = type(rec).from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again.today_trap == line


def test_a_full_half_setup_and_todays_trap_export_and_read_back(tmp_path: Path) -> None:
    from tests_support import make_config

    from tuner.export import TunedConfig, render

    trap = not_training("bfloat16", 5, 72, "bfloat16", rounds_away(ADAMW, "bfloat16", "AdamW"))
    line = f"your run today does not train: {trap.evidence}. Fix: {trap.fix}"
    config = make_config(policy="mixed_bfloat16", hazards=(trap,))
    config = dataclasses.replace(
        config, evidence=dataclasses.replace(config.evidence, today_trap=line)
    )
    path = tmp_path / "tuned.json"
    config.save(path)
    assert TunedConfig.load(path) == config
    assert json.loads(path.read_text())["evidence"]["today_trap"] == line
    # Said first in the exported code's evidence.
    snippet = render(config, "snippet")
    evidence = next(x for x in snippet.splitlines() if x.startswith("# Evidence:"))
    assert evidence.startswith("# Evidence: your run today does not train: none of 5")
    # A full half setup is exported by its name, which Keras takes as it is.
    half = make_config(policy="bfloat16")
    half.save(path)
    assert TunedConfig.load(path).setup == Setup("bfloat16", 16)
    assert "set_global_policy('bfloat16')" in render(half, "snippet")


class FailingMachine(Machine):
    """Its mixed_float16 trials fail where the user's layer meets a float32 draw, as the trap
    checks of issue 71 report it: unsafe, no step measured, the hazard with its place."""

    def __call__(self, spec, on_event=None, *, cancel=None, source=None):
        if str(spec.policy) != "mixed_float16":
            return super().__call__(spec, on_event, cancel=cancel, source=source)
        self.calls.append(spec)
        return TrialResult(
            spec,
            TrialStatus.UNSAFE,
            error=TrialError("fails only under mixed_float16; float32 trains the same batch"),
            hazards=(MISMATCH,),
        )


MISMATCH = Hazard(
    "dtype_mismatch",
    "mixed_float16",
    "layer 'sampling' (Sampling)",
    "keras.random.normal draws float32 noise that meets a float16 z_log_var",
    "draw the noise in z_mean.dtype",
    severity="unsafe",
    at="vae.py:14 in Sampling.call",
    whose="model",
)


def test_a_run_today_that_fails_is_said_to_fail_at_its_place(tmp_path: Path) -> None:
    machine = FailingMachine(speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 1500})
    own = Setup("mixed_float16", 64)
    space = SearchSpace(
        policies=("float32", "mixed_float16"),
        user_policy="mixed_float16",
        user_setup=own,
        user_setup_words="mixed_float16 (set at vae.py:3), batch size 64 (fit at vae.py:60)",
    )
    rec = run(machine, tmp_path, space=space).recommendation
    assert rec.today_trap == (
        "your run today fails: keras.random.normal draws float32 noise that meets a float16 "
        "z_log_var (at vae.py:14 in Sampling.call). Fix: draw the noise in z_mean.dtype"
    )
    assert rec.setup.policy == "float32"
    assert evidence_rows(rec)[0][1].startswith("Your run today fails: ")


def test_what_you_run_today_stands_where_a_budget_left_its_precision_unchecked(
    tmp_path: Path,
) -> None:
    """A search a budget ended before today's precision's best batch was compared with
    float32 (the whole precision rejected, as a KerasHub BERT's mixed_bfloat16 was) recommends
    what the user runs today over a slower setup, never the slower one (issue 71)."""
    from tuner.search.recommend import recommend
    from tuner.search.space import SearchSettings

    machine = Machine(
        speed={"float32": 800, "mixed_bfloat16": 1200, "mixed_float16": 1000}, growth=0.0
    )
    own = Setup("mixed_bfloat16", 16)
    space = SearchSpace(
        policies=("float32", "mixed_float16", "mixed_bfloat16"),
        batch_sizes=(16, 32, 64),
        user_policy="mixed_bfloat16",
        user_setup=own,
        user_setup_words="mixed_bfloat16 (set at t.py:3), batch size 16 (fit at t.py:9)",
    )
    settings = SearchSettings(max_trials=4)
    result = run(machine, tmp_path, space=space, settings=settings)
    outcome = result.outcome
    # What the KerasHub search met: the budget left mixed_bfloat16's pick unchecked.
    for c in outcome.candidates:
        if c.setup.policy == "mixed_bfloat16":
            c.rejected = "not compared with float32 at batch size 32 (the budget ended first)"
    rec = recommend(outcome, space, settings)
    assert rec.setup == own
    assert rec.reason.startswith("What you run today is the best setup measured here")
    # Not where today's run is a trap: the user is told, and no figure stands on it.
    trap = not_training("mixed_bfloat16", 5, 40, "bfloat16", None)
    base = outcome.baseline
    outcome.baseline = dataclasses.replace(
        base, result=dataclasses.replace(base.result, hazards=(trap,))
    )
    assert recommend(outcome, space, settings).setup != own
