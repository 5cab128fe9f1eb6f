"""tuner.api, the faces' one way in: its search calls spell out the engine's keywords."""

from __future__ import annotations

import inspect
from typing import Any

from tuner import api
from tuner.search import fleet
from tuner.search import tune as search_tune


def _parameters(function: Any) -> dict[str, tuple[object, object]]:
    return {name: (p.kind, p.default) for name, p in inspect.signature(function).parameters.items()}


def test_the_search_is_re_exported_not_restated() -> None:
    """Issue 36: ``api.tune`` is the engine's ``tune`` itself, and ``api.TuneRequest`` the one
    request both faces build and ``tune`` takes."""
    from tuner.search import request

    assert api.tune is search_tune.tune
    assert api.TuneRequest is request.TuneRequest
    assert list(_parameters(api.tune)) == ["request", "on_event", "cancel", "runner", "clock"]


def test_joining_a_search_is_re_exported_not_restated() -> None:
    from tuner.search import request

    assert api.work is fleet.work
    assert api.JoinRequest is request.JoinRequest
    assert list(_parameters(api.work)) == ["request", "cancel", "on_event", "runner"]


def test_a_resumed_request_leaves_the_space_and_settings_to_its_session() -> None:
    request = api.TuneRequest(
        model="builtin:mlp",
        space=api.SearchSpace(policies=("float32",)),
        settings=api.SearchSettings(max_trials=3),
        storage="sqlite:///x.db",
        study="s",
        parallel="auto",
        workers=True,
    )
    resumed = request.resumed("old")
    assert (resumed.study, resumed.resume, resumed.space, resumed.settings) == (
        "old",
        True,
        None,
        None,
    )
    assert resumed.model == request.model
    assert resumed.storage == request.storage
