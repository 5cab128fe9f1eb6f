"""tuner.api, the faces' one way in: its search calls spell out the engine's keywords."""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any

import pytest

from tuner import api
from tuner.search import fleet
from tuner.search import tune as search_tune


def _parameters(function: Any) -> dict[str, tuple[object, object]]:
    return {name: (p.kind, p.default) for name, p in inspect.signature(function).parameters.items()}


def test_tune_takes_the_engines_keywords_by_name() -> None:
    """api.tune mirrors tuner.search.tune.tune: the same parameters, kinds and defaults, but
    for the runner, whose default (None) is the engine's own."""
    ours, theirs = _parameters(api.tune), _parameters(search_tune.tune)
    assert list(ours) == list(theirs)
    assert ours.pop("runner") == (inspect.Parameter.KEYWORD_ONLY, None)
    theirs.pop("runner")
    assert ours == theirs


def test_work_takes_the_engines_keywords_by_name() -> None:
    assert _parameters(api.work) == _parameters(fleet.work)


def test_a_tune_request_runs_tune_with_every_argument() -> None:
    """Every field of the request reaches ``tune``; the listener and the cancel flag are the
    caller's; a resumed request leaves the space and settings to the stored session."""
    fields = {f.name for f in dataclasses.fields(api.TuneRequest)}
    assert fields == set(_parameters(api.tune)) - {"on_event", "cancel", "runner", "clock"}
    request = api.TuneRequest(
        model="builtin:mlp",
        space=api.SearchSpace(policies=("float32",)),
        settings=api.SearchSettings(max_trials=3),
        storage="sqlite:///x.db",
        study="s",
        parallel="auto",
        workers=True,
    )
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def fake_tune(*args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return "done"

    cancel, listener = threading.Event(), print
    assert request.run(listener, cancel, via=fake_tune) == "done"
    ((args, kwargs),) = seen
    assert args == ("builtin:mlp",)
    assert kwargs == {
        **{name: getattr(request, name) for name in fields - {"model"}},
        "on_event": listener,
        "cancel": cancel,
    }
    resumed = request.resumed("old")
    assert (resumed.study, resumed.resume, resumed.space, resumed.settings) == (
        "old",
        True,
        None,
        None,
    )
    assert resumed.model == request.model and resumed.storage == request.storage


def test_api_tune_hands_the_engine_a_runner_only_when_given_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(search_tune, "tune", lambda model, **kwargs: calls.append(kwargs))
    api.tune("builtin:mlp")
    api.tune("builtin:mlp", runner=print)
    assert "runner" not in calls[0] and calls[1]["runner"] is print
    assert calls[0]["parallel"] == 1 and calls[0]["workers"] is False
