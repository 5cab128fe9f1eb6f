"""Every execution knob is declared once (``tuner.setup.KNOBS``); each place that needs one
entry per knob either derives it from that declaration or is checked here, so a knob left out
of one fails a test instead of going unnoticed (docs/architecture.md, "Adding a knob")."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from tests_support import make_config

from tuner import keras_setup
from tuner.cli import build_parser
from tuner.export.render import render
from tuner.search.recommend import EVIDENCE
from tuner.search.records import KnobEvidence, plain_knobs
from tuner.setup import KNOB_DEFAULTS, KNOBS, Setup
from tuner.trials.runner import WARM_VARIES

NAMES = [knob.name for knob in KNOBS]


def _set(knob_name: str) -> Setup:
    """A float32 setup with the knob away from its default."""
    values = {
        "xla": True,
        "steps_per_execution": 8,
        "tf32": True,
        "gradient_accumulation_steps": 4,
    }
    assert set(values) == set(NAMES), "a new knob needs a value here"
    return Setup("float32", 64, **{knob_name: values[knob_name]})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_the_setup_has_the_knob_with_its_default(name: str) -> None:
    knob = next(k for k in KNOBS if k.name == name)
    assert name in {f.name for f in dataclasses.fields(Setup)}
    assert getattr(Setup("float32", 64), name) == knob.default == KNOB_DEFAULTS[name]
    setup = _set(name)
    assert Setup.from_dict(setup.to_dict()) == setup  # stored and read back
    assert knob.setting(setup) != knob.setting(Setup("float32", 64))


@pytest.mark.parametrize("name", NAMES)
def test_the_knob_is_in_every_derived_table(name: str) -> None:
    knob = next(k for k in KNOBS if k.name == name)
    assert KnobEvidence.LABELS[knob.evidence] == knob.label
    assert name in EVIDENCE, "recommend.EVIDENCE: how the recommendation shows its evidence"
    assert (name in WARM_VARIES) == knob.warm
    assert knob.evidence in {e.knob for e in plain_knobs(Setup("float32", 64))}
    # Said in words wherever the setup is (the label, the faces, the recommendation), unless
    # the precision says it already.
    setup = _set(name)
    if knob.say(setup) is not None:
        assert knob.say(setup) in setup.in_words()
        assert knob.short(setup) in setup.label
    else:
        assert knob.phrase_of(setup) is not None or knob.short(setup) is None


@pytest.mark.parametrize("name", NAMES)
def test_the_knob_has_its_flag_and_is_applied_in_keras(name: str) -> None:
    knob = next(k for k in KNOBS if k.name == name)
    trial = build_parser()._subparsers._group_actions[0].choices["trial"]  # type: ignore[union-attr]
    flags = {flag for action in trial._actions for flag in action.option_strings}
    assert knob.flag in flags, f"mptune trial has no {knob.flag}"
    assert name in inspect.getsource(keras_setup), "tuner/keras_setup.py never applies it"


@pytest.mark.parametrize("name", NAMES)
def test_the_exported_code_applies_the_knob(name: str) -> None:
    """The export's template context carries every knob, and the code it writes changes when
    the knob is set (the templates' one macro applies it)."""
    plain = make_config()
    knobbed = dataclasses.replace(plain, setup=_set(name))
    for fmt in ("snippet", "script"):
        assert render(plain, fmt) != render(knobbed, fmt), f"{fmt} ignores {name}"
