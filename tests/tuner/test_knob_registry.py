"""Every execution knob is declared once, as a row of ``tuner.knobs.KNOBS``; each place that
needs one entry per knob derives it from that row. These tests are derived from the rows too:
for every knob, they set it away from its default and check what each derived place does with
it (the setup, the ``mptune trial`` flag, Keras, the exported code, the search's stages, the
recommendation's evidence), so a knob one of them lacks fails here, not in a user's hands
(docs/architecture.md, "Adding a knob")."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import keras
import pytest
from tests_support import make_config

from tuner import keras_setup
from tuner.cli import build_parser
from tuner.export.config import ConfigError
from tuner.export.render import render
from tuner.search import recommend
from tuner.search.measures import SearchOutcome
from tuner.search.records import KnobEvidence, plain_knobs
from tuner.search.space import SearchSpace
from tuner.search.stage import KNOB_STAGES, knob_stage
from tuner.search.stages import knobs as knob_stages
from tuner.search.stages.context import EXPLORING
from tuner.setup import KNOB_DEFAULTS, KNOBS, Setup
from tuner.trials.runner import WARM_VARIES

NAMES = [knob.name for knob in KNOBS]
BY_NAME = {knob.name: knob for knob in KNOBS}


def knobbed(name: str) -> Setup:
    """A float32 TensorFlow setup with the knob ``name`` away from its default (every knob
    takes float32 on TensorFlow)."""
    return Setup("float32", 64, **{name: BY_NAME[name].example()})


def test_the_setup_has_one_field_a_knob() -> None:
    fields = {f.name for f in dataclasses.fields(Setup)}
    assert fields == {"policy", "batch_size", "loss_scale", "backend", *NAMES}
    ranks = [knob.rank for knob in KNOBS]
    assert len(set(ranks)) == len(ranks), "two knobs share a simplicity rank"


@pytest.mark.parametrize("name", NAMES)
def test_the_setup_takes_validates_stores_and_ranks_the_knob(name: str) -> None:
    knob, plain, setup = BY_NAME[name], Setup("float32", 64), knobbed(name)
    assert getattr(plain, name) == knob.default == KNOB_DEFAULTS[name]
    assert getattr(setup, name) == knob.example()
    assert Setup.from_dict(setup.to_dict()) == setup != plain  # stored and read back
    assert name not in plain.to_dict()
    assert name in setup.to_dict()
    assert plain.replace(**{name: getattr(setup, name)}) == setup
    assert plain.simplicity() < setup.simplicity(), "the knob's default must be the simpler"
    assert knob.setting(setup) != knob.setting(plain)
    bad = "yes" if knob.kind is bool else 0
    with pytest.raises(ValueError, match=knob.name if knob.kind is bool else knob.what):
        Setup("float32", 64, **{name: bad})


@pytest.mark.parametrize("name", NAMES)
def test_the_knob_is_said_wherever_the_setup_is(name: str) -> None:
    knob, setup = BY_NAME[name], knobbed(name)
    assert KnobEvidence.LABELS[knob.evidence] == knob.label
    assert knob.evidence in {e.knob for e in plain_knobs(Setup("float32", 64))}
    assert (name in WARM_VARIES) == knob.warm
    if knob.say(setup) is not None:
        assert knob.say(setup) in setup.in_words()
        assert knob.short(setup) in setup.label
    else:  # the precision says it (TF32): the window still has a phrase for it
        assert knob.phrase_of(setup) is not None or knob.short(setup) is None


@pytest.mark.parametrize("name", NAMES)
def test_mptune_trial_sets_the_knob_with_its_flag(name: str) -> None:
    knob = BY_NAME[name]
    value = knob.example()
    flag = f"--{knob.option}"
    given = [flag] if knob.kind is bool else [flag, str(value)]
    base = ["trial", "--model", "builtin:mlp", "--policy", "float32", "--batch-size", "8"]
    args = build_parser().parse_args([*base, *given])
    assert getattr(args, name) == value
    assert getattr(build_parser().parse_args(base), name) == knob.default


@pytest.fixture
def keras_state() -> Iterator[None]:
    """Keras' process-wide settings put back after the test: the global policy, TF32, and
    any rematerialisation scope a setup entered."""
    import tensorflow as tf

    policy = keras.mixed_precision.global_policy().name
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    yield
    keras_setup.apply_policy(Setup("float32", 8))
    keras.mixed_precision.set_global_policy(policy)
    tf.config.experimental.enable_tensor_float_32_execution(tf32)


def applied(setup: Setup) -> dict[str, Any]:
    """What Keras was told when a tiny model was built and compiled for ``setup`` as a trial
    and ``apply_config`` do it: the process-wide settings, the compiled model's own, its
    optimizer's configuration and each layer's rematerialisation."""
    import tensorflow as tf

    keras_setup.apply_policy(setup)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(3)(inputs)))
    keras_setup.compile_model(model, setup, keras.optimizers.Adam(1e-3), "mse")
    optimizer = model.optimizer

    def config(of: Any) -> dict[str, Any]:
        """An optimizer's configuration, less its generated name."""
        return {k: v for k, v in of.get_config().items() if k != "name"} if of else {}

    return {
        "policy": keras.mixed_precision.global_policy().name,
        "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "jit_compile": model.jit_compile,
        "steps_per_execution": model.steps_per_execution,
        "optimizer": (type(optimizer).__name__, config(optimizer)),
        "inner": config(getattr(optimizer, "inner_optimizer", None)),
        "remat": [str(getattr(layer, "_remat_mode", None)) for layer in model.layers],
    }


@pytest.mark.parametrize("name", NAMES)
def test_keras_is_told_the_knob(name: str, keras_state: None) -> None:
    assert applied(knobbed(name)) != applied(Setup("float32", 64))
    assert applied(Setup("float32", 64)) == applied(Setup("float32", 64))


@pytest.mark.parametrize("name", NAMES)
def test_the_exported_code_applies_the_knob(name: str) -> None:
    """The export's template context carries every knob, and the code it writes changes when
    the knob is set (the templates' macros apply it); Keras 2 takes it or is refused on one
    line."""
    plain = make_config()
    config = dataclasses.replace(plain, setup=knobbed(name))
    for fmt in ("snippet", "script"):
        assert render(plain, fmt) != render(config, fmt), f"{fmt} ignores {name}"
    if BY_NAME[name].keras2:
        assert render(plain, "snippet", "2") != render(config, "snippet", "2")
    else:
        with pytest.raises(ConfigError, match=re.escape("[[keras 3]]")):
            render(config, "snippet", "2")


@pytest.mark.parametrize("name", NAMES)
def test_a_knob_with_a_stage_is_searched_and_explains_itself(name: str) -> None:
    knob = BY_NAME[name]
    setup = knobbed(name)
    outcome = SearchOutcome([], None, {}, [], None, {})
    rows = recommend._knob_evidence(setup, outcome, SearchSpace())
    assert [row.knob for row in rows] == [k.evidence for k in KNOBS]
    row = rows[NAMES.index(name)]
    assert row.setting == knob.setting(setup)
    if knob.stage is None:
        return
    assert knob_stage(name) == knob.stage
    assert knob.stage in KNOB_STAGES
    assert knob.stage in EXPLORING, "its trials may be pruned, as every exploring stage's"
    stage = knob_stages.STAGES[KNOB_STAGES.index(knob.stage)]
    assert stage is knob_stages.TRIES.get(name, stage)
    assert stage.__name__ == f"try_{name}"
    assert "not tried" in row.detail  # no stage of this outcome ran it
