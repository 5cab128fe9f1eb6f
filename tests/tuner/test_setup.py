"""The Setup value type: parsing, equality and hashing, round trips, and the old stored forms."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tuner.search.recommend import Recommendation
from tuner.setup import LossScale, Policy, Setup
from tuner.trials.spec import TrialSpec


def test_policy_parses_once_and_round_trips_its_config() -> None:
    policy = Policy.parse("mixed_float16")
    assert policy.compute_dtype == "float16"
    assert policy.variable_dtype == "float32"
    assert policy.needs_loss_scaling
    assert policy.is_mixed
    assert Policy.from_config(policy.get_config()) == policy
    assert Policy("mixed_bfloat16").compute_dtype == "bfloat16"
    assert not Policy("float32").is_mixed
    # Equal to its name, with the same hash: a policy keys the same entry as its name.
    assert policy == "mixed_float16"
    assert {"mixed_float16": 1}[policy] == 1
    with pytest.raises(ValueError, match="unknown policy 'float64': choose one of float32"):
        Policy.parse("float64")


def test_setup_parses_strings_and_defaults_the_loss_scale() -> None:
    setup = Setup("mixed_float16", 64)
    assert setup.policy == Policy("mixed_float16")
    assert setup.loss_scale == LossScale("dynamic")
    assert Setup("mixed_bfloat16", 64).loss_scale == LossScale("none")
    assert setup.label == "mixed_float16 b64 dynamic"
    assert setup.replace(policy="float32").loss_scale == LossScale("none")
    assert setup.replace(batch_size=128) == Setup("mixed_float16", 128, "dynamic")


def test_equal_setups_key_one_ledger_entry() -> None:
    a = Setup("mixed_float16", 8, "fixed:128.0")
    b = Setup(Policy("mixed_float16"), 8, LossScale("fixed", value=128))
    assert a == b
    assert hash(a) == hash(b)
    assert a.key == b.key
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


# -- execution knobs ------------------------------------------------------------------------
KNOBBED = Setup(
    "float32", 64, tf32=True, xla=True, steps_per_execution=4, gradient_accumulation_steps=2
)


def test_knobs_default_to_what_a_setup_meant_before_them() -> None:
    setup = Setup("mixed_float16", 64)
    assert (setup.xla, setup.steps_per_execution, setup.tf32) == (False, 1, False)
    assert setup.gradient_accumulation_steps == 1
    assert setup.global_batch == 64
    assert setup.knobs == ()
    assert setup.precision == "mixed_float16"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (
            {"policy": "mixed_float16", "tf32": True},
            "TF32 is a variant of float32; mixed_float16 already computes in float16",
        ),
        (
            {"policy": "mixed_bfloat16", "tf32": True},
            "TF32 is a variant of float32; mixed_bfloat16 already computes in bfloat16",
        ),
        (
            {"steps_per_execution": 0},
            "steps per execution must be a whole number from 1 to 1024, not 0",
        ),
        (
            {"steps_per_execution": 1025},
            "steps per execution must be a whole number from 1 to 1024",
        ),
        ({"steps_per_execution": True}, "steps per execution must be a whole number"),
        ({"steps_per_execution": 2.0}, "steps per execution must be a whole number"),
        (
            {"gradient_accumulation_steps": 0},
            "gradient accumulation steps must be a whole number from 1 to 1024, not 0",
        ),
        ({"gradient_accumulation_steps": "2"}, "gradient accumulation steps must be a whole"),
        ({"xla": "yes"}, "xla must be true or false, not 'yes'"),
        ({"xla": 1}, "xla must be true or false, not 1"),
        ({"xla": None}, "xla must be true or false, not None"),
        ({"tf32": 0}, "tf32 must be true or false, not 0"),
    ],
)
def test_bad_knobs_are_named(kwargs: dict, fragment: str) -> None:
    args = {"policy": "float32", "batch_size": 64, **kwargs}
    with pytest.raises(ValueError, match=re.escape(fragment)):
        Setup(**args)
    # The stored form fails the same way.
    with pytest.raises(ValueError, match=re.escape(fragment)):
        Setup.from_dict(args)


def test_the_label_names_every_knob_away_from_its_default() -> None:
    assert KNOBBED.label == "float32+tf32 b64 none xla spe4 acc2"
    assert KNOBBED.precision == "float32+tf32"
    assert KNOBBED.knobs == ("xla", "spe4", "acc2")
    assert Setup("float32", 64, tf32=True).label == "float32+tf32 b64 none"
    assert Setup("mixed_float16", 8, steps_per_execution=8).label == "mixed_float16 b8 dynamic spe8"
    assert Setup("mixed_bfloat16", 8, xla=True).label == "mixed_bfloat16 b8 none xla"
    assert Setup("float32", 32, gradient_accumulation_steps=4).label == "float32 b32 none acc4"
    assert KNOBBED.describe() == (
        "float32 with TF32 matmuls at batch size 64 (no loss scaling, XLA, 4 steps per "
        "execution, 2 accumulation steps (global batch 128))"
    )


def test_global_batch_is_the_batch_times_the_accumulation() -> None:
    assert KNOBBED.global_batch == 128
    assert Setup("mixed_float16", 96, gradient_accumulation_steps=3).global_batch == 288
    assert Setup("float32", 96).global_batch == 96


def test_to_dict_leaves_default_knobs_out_unless_explicit() -> None:
    plain = Setup("mixed_float16", 64, "dynamic:1024:500")
    assert plain.to_dict() == {
        "policy": "mixed_float16",
        "batch_size": 64,
        "loss_scale": "dynamic:1024:500",
    }
    assert plain.to_dict(explicit=True) == {
        "policy": "mixed_float16",
        "batch_size": 64,
        "loss_scale": "dynamic:1024:500",
        "xla": False,
        "float8": False,
        "steps_per_execution": 1,
        "tf32": False,
        "gradient_accumulation_steps": 1,
        "remat": False,
        "backend": "tensorflow",
    }
    assert Setup("float32", 8, xla=True).to_dict() == {
        "policy": "float32",
        "batch_size": 8,
        "loss_scale": "none",
        "xla": True,
    }
    assert KNOBBED.to_dict(explicit=True) == {
        **KNOBBED.to_dict(),
        "float8": False,
        "remat": False,
        "backend": "tensorflow",
    }
    assert KNOBBED.to_dict() == {
        "policy": "float32",
        "batch_size": 64,
        "loss_scale": "none",
        "xla": True,
        "steps_per_execution": 4,
        "tf32": True,
        "gradient_accumulation_steps": 2,
    }


@pytest.mark.parametrize(
    "setup",
    [
        KNOBBED,
        Setup("float32", 1, tf32=True),
        Setup("mixed_float16", 96, "fixed:128", xla=True, gradient_accumulation_steps=1024),
        Setup("mixed_bfloat16", 256, steps_per_execution=1024),
    ],
)
@pytest.mark.parametrize("explicit", [False, True])
def test_knobs_round_trip_through_dict_and_json(setup: Setup, explicit: bool) -> None:
    again = Setup.from_dict(json.loads(json.dumps(setup.to_dict(explicit=explicit))))
    assert again == setup
    assert hash(again) == hash(setup)
    assert again.key == setup.key


def test_knobs_make_setups_differ() -> None:
    base = Setup("float32", 64)
    variants = [
        base.replace(xla=True),
        base.replace(steps_per_execution=2),
        base.replace(tf32=True),
        base.replace(gradient_accumulation_steps=2),
    ]
    assert len({base, *variants}) == 5
    assert len({s.key for s in (base, *variants)}) == 5
    # A setup at the defaults keeps the key it had before the knobs existed.
    assert base.key == '{"batch_size":64,"loss_scale":"none","policy":"float32"}'
    assert Setup.from_dict({**base.to_dict(), "xla": False}) == base


def test_replace_keeps_the_knobs_and_drops_tf32_off_float32() -> None:
    mixed = KNOBBED.replace(policy="mixed_float16")
    assert mixed.tf32 is False
    assert mixed.loss_scale == LossScale("dynamic")
    assert (mixed.xla, mixed.steps_per_execution, mixed.gradient_accumulation_steps) == (True, 4, 2)
    assert mixed.label == "mixed_float16 b64 dynamic xla spe4 acc2"
    # Back to float32 is plain IEEE float32: TF32 is not brought back.
    assert mixed.replace(policy="float32").tf32 is False
    # Staying on float32 keeps TF32; asking for TF32 on a mixed policy is still refused.
    assert KNOBBED.replace(policy="float32").tf32 is True
    assert KNOBBED.replace(batch_size=32).tf32 is True
    with pytest.raises(ValueError, match="TF32 is a variant of float32"):
        KNOBBED.replace(policy="mixed_bfloat16", tf32=True)
    assert KNOBBED.replace(xla=False, gradient_accumulation_steps=1).knobs == ("spe4",)


def test_simplicity_prefers_default_knobs() -> None:
    base = Setup("float32", 64)
    assert base.simplicity() < base.replace(tf32=True).simplicity()
    assert base.simplicity() < base.replace(xla=True).simplicity()
    assert base.simplicity() < base.replace(steps_per_execution=2).simplicity()
    assert base.simplicity() < base.replace(gradient_accumulation_steps=2).simplicity()
    # IEEE float32 with any knob is still simpler than a mixed policy.
    assert KNOBBED.replace(tf32=False).simplicity() < Setup("mixed_bfloat16", 8).simplicity()


def test_backend_is_a_field_of_the_setup() -> None:
    jax = Setup("mixed_bfloat16", 64, backend="jax")
    assert jax.to_dict() == {
        "policy": "mixed_bfloat16",
        "batch_size": 64,
        "loss_scale": "none",
        "backend": "jax",
    }
    assert Setup.from_dict(jax.to_dict()) == jax
    assert jax != Setup("mixed_bfloat16", 64)  # measured on another backend: another setup
    assert jax.label == "mixed_bfloat16 b64 none jax"
    assert jax.describe().endswith("on JAX)")
    # A setup stored before backends existed is a TensorFlow one.
    assert Setup.from_dict({"policy": "float32", "batch_size": 8}).backend == "tensorflow"


def test_jax_always_compiles_and_torch_runs_one_step_per_call() -> None:
    # JAX jits every step: its xla is False and means "as Keras compiles it".
    assert Setup("float32", 8, xla=True, backend="jax") == Setup("float32", 8, backend="jax")
    assert Setup("float32", 8, backend="jax").replace(xla=True).xla is False
    torch = Setup("float32", 8, xla=True, backend="torch")
    assert "torch.compile" in torch.describe()
    with pytest.raises(ValueError, match="steps per execution must be 1 on the torch backend"):
        Setup("float32", 8, steps_per_execution=4, backend="torch")
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        Setup("float32", 8, backend="mxnet")
    with pytest.raises(ValueError, match="unknown backend"):
        Setup.from_dict({"policy": "float32", "batch_size": 8, "backend": "theano"})
