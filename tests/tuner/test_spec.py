from __future__ import annotations

import pytest

from tuner.trials.spec import LossScale, TrialSpec


@pytest.mark.parametrize(
    "text, expected",
    [
        ("none", LossScale("none")),
        ("dynamic", LossScale("dynamic")),
        ("DYNAMIC:1024", LossScale("dynamic", initial_scale=1024.0)),
        ("dynamic:32768:2000", LossScale("dynamic", initial_scale=32768.0, growth_steps=2000)),
        ("fixed:128", LossScale("fixed", value=128.0)),
        ("fixed:0.5", LossScale("fixed", value=0.5)),
    ],
)
def test_loss_scale_parses_and_round_trips(text: str, expected: LossScale) -> None:
    parsed = LossScale.parse(text)
    assert parsed == expected
    assert LossScale.parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("fixed", "write none, dynamic"),
        ("fixed:abc", "is not a number"),
        ("fixed:-4", "positive"),
        ("fixed:inf", "positive finite"),
        ("dynamic:1:0", "at least 1"),
        ("dynamic:1:2:3", "write none"),
        ("static:8", "write none"),
        ("none:3", "write none"),
    ],
)
def test_malformed_loss_scales_are_named(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="malformed loss scale") as info:
        LossScale.parse(text)
    assert fragment in str(info.value)


def test_effective_defaults_are_keras_defaults() -> None:
    scale = LossScale.parse("dynamic")
    assert scale.effective_initial_scale == 32768.0
    assert scale.effective_growth_steps == 2000


def test_policy_default_loss_scale() -> None:
    assert TrialSpec.create("builtin:mlp", "mixed_float16", 8).loss_scale.kind == "dynamic"
    assert TrialSpec.create("builtin:mlp", "mixed_bfloat16", 8).loss_scale.kind == "none"
    assert TrialSpec.create("builtin:mlp", "float32", 8, "fixed:8").loss_scale.value == 8


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"policy": "float64"}, "unknown policy"),
        ({"batch_size": 0}, "batch size must be from 1 to"),
        ({"batch_size": 10**400}, "batch size must be from 1 to"),
        ({"batch_size": 2.5}, "whole number"),
        ({"device": "tpu"}, "unknown device"),
        ({"timeout_s": 0}, "timeout"),
        ({"steps": 0}, "measured steps"),
        ({"memory_limit_mb": -1}, "memory limit"),
    ],
)
def test_bad_spec_values_are_named(kwargs: dict, fragment: str) -> None:
    setup = {k: kwargs.pop(k) for k in ("policy", "batch_size") if k in kwargs}
    with pytest.raises(ValueError, match=fragment):
        TrialSpec.create("builtin:mlp", **{"policy": "float32", "batch_size": 8, **setup}, **kwargs)


def test_spec_round_trips_through_dict() -> None:
    spec = TrialSpec.create(
        "builtin:cnn",
        "mixed_float16",
        64,
        "dynamic:1024:100",
        steps=7,
        device="gpu:1",
        memory_limit_mb=512.0,
    )
    again = TrialSpec.from_dict(spec.to_dict())
    assert again == spec
    assert spec.to_dict()["loss_scale"] == "dynamic:1024:100"


def test_from_dict_rejects_unknown_fields() -> None:
    data = TrialSpec.create("builtin:cnn", "float32", 8).to_dict()
    data["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        TrialSpec.from_dict(data)
