"""The Setup value type: parsing, equality and hashing, round trips, and the old stored forms."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tuner.search.recommend import Recommendation
from tuner.setup import LossScale, Policy, Setup
from tuner.trials.spec import TrialSpec


def test_policy_parses_once_and_round_trips_its_config() -> None:
    policy = Policy.parse("mixed_float16")
    assert policy.compute_dtype == "float16" and policy.variable_dtype == "float32"
    assert policy.needs_loss_scaling and policy.is_mixed
    assert Policy.from_config(policy.get_config()) == policy
    assert Policy("mixed_bfloat16").compute_dtype == "bfloat16"
    assert not Policy("float32").is_mixed
    # Equal to its name, with the same hash: a policy keys the same entry as its name.
    assert policy == "mixed_float16" and {"mixed_float16": 1}[policy] == 1
    with pytest.raises(ValueError, match="unknown policy 'float64': choose one of float32"):
        Policy.parse("float64")


def test_setup_parses_strings_and_defaults_the_loss_scale() -> None:
    setup = Setup("mixed_float16", 64)
    assert setup.policy == Policy("mixed_float16") and setup.loss_scale == LossScale("dynamic")
    assert Setup("mixed_bfloat16", 64).loss_scale == LossScale("none")
    assert setup.label == "mixed_float16 b64 dynamic"
    assert setup.replace(policy="float32").loss_scale == LossScale("none")
    assert setup.replace(batch_size=128) == Setup("mixed_float16", 128, "dynamic")


def test_equal_setups_key_one_ledger_entry() -> None:
    a = Setup("mixed_float16", 8, "fixed:128.0")
    b = Setup(Policy("mixed_float16"), 8, LossScale("fixed", value=128))
    assert a == b and hash(a) == hash(b) and a.key == b.key
    assert {a: 1}[b] == 1
    assert Setup("mixed_float16", 8, "dynamic") != Setup("mixed_float16", 8, "dynamic:1024")


def test_setup_key_is_stable_across_processes() -> None:
    code = (
        "from tuner.setup import Setup; print(Setup('mixed_float16', 64, 'dynamic:1024:500').key)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == Setup("mixed_float16", 64, "dynamic:1024:500").key
    assert json.loads(out) == {
        "batch_size": 64,
        "loss_scale": "dynamic:1024:500",
        "policy": "mixed_float16",
    }


@pytest.mark.parametrize(
    "setup",
    [
        Setup("float32", 1),
        Setup("mixed_float16", 4096, "fixed:0.5"),
        Setup("mixed_float16", 96, "dynamic:1024:500"),
        Setup("mixed_bfloat16", 1 << 24),
    ],
)
def test_setup_round_trips_through_dict_and_json(setup: Setup) -> None:
    assert Setup.from_dict(json.loads(json.dumps(setup.to_dict()))) == setup


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"policy": "float32"}, "batch_size is missing"),
        ({"batch_size": 8}, "policy is missing"),
        ({"policy": "float32", "batch_size": 8, "turbo": True}, "unknown setup field"),
        ({"policy": 3, "batch_size": 8}, "policy must be a string"),
        ({"policy": "float32", "batch_size": True}, "whole number"),
        ({"policy": "float32", "batch_size": 10**400}, "from 1 to"),
        ({"policy": "float32", "batch_size": 8, "loss_scale": "fixed:nan"}, "positive finite"),
        ({"policy": "float32", "batch_size": 8, "loss_scale": "dynamic:8:0"}, "at least 1"),
        ([1, 2], "must be an object"),
    ],
)
def test_bad_setups_are_named(data: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Setup.from_dict(data)


def test_trial_spec_keeps_the_stored_shape_of_earlier_sessions() -> None:
    # A spec as sessions stored it before Setup existed: the setup's fields at the top level.
    old = {
        "model": "builtin:cnn",
        "policy": "mixed_float16",
        "batch_size": 64,
        "loss_scale": "dynamic",
        "warmup_steps": 5,
        "steps": None,
        "measure_seconds": 2.0,
        "min_steps": 40,
        "max_steps": 2000,
        "seed": 0,
        "timeout_s": 300.0,
        "device": "auto",
        "memory_limit_mb": None,
    }
    spec = TrialSpec.from_dict(old)
    assert spec.setup == Setup("mixed_float16", 64)
    assert spec.to_dict() == old


def test_a_recommendation_stored_by_earlier_versions_loads() -> None:
    old = {
        "policy": "mixed_bfloat16",
        "batch_size": 256,
        "loss_scale": "none",
        "samples_per_second": 1000.0,
        "samples_per_second_spread": [990.0, 1010.0],
        "baseline_samples_per_second": 800.0,
        "float32_samples_per_second": 900.0,
        "speedup_vs_float32": 1.11,
        "speedup_vs_baseline": 1.25,
        "memory_saving": 0.2,
        "peak_memory_mb": 500.0,
        "memory_kind": "cpu_rss",
        "loss_gap": 0.01,
        "skipped_steps": 0,
        "reason": "faster",
        "trials": [1, 4],
        "objective": "speed",
        "alternatives": [
            {
                "policy": "float32",
                "batch_size": 256,
                "loss_scale": "none",
                "samples_per_second": 900.0,
                "speedup_vs_float32": 1.0,
                "loss_gap": 0.0,
                "rejected": None,
                "trials": [2],
            }
        ],
        "not_tried": [],
        "notes": [],
        "device": "cpu",
        "versions": {},
        "setup": {"policy": "mixed_bfloat16", "batch_size": 256, "loss_scale": "none"},
    }
    rec = Recommendation.from_dict(old)
    assert rec.setup == Setup("mixed_bfloat16", 256)
    assert rec.alternatives[0].setup == Setup("float32", 256)
    again = rec.to_dict()
    assert Recommendation.from_dict(json.loads(json.dumps(again))) == rec
    # What `tune --json` printed before is still printed: the flat keys and the setup object.
    assert {k: again[k] for k in old} == old
