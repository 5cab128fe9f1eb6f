"""A search as a face asks for it: one :class:`TuneRequest`, which the command line and the
window build and :func:`tuner.search.tune.tune` takes (issue 36: it was written three times, as
``api.tune``'s arguments, ``search.tune.tune``'s and a request's); and a worker's
:class:`JoinRequest`, which :func:`tuner.search.fleet.work` takes. Light to import: a face
builds one before the search (and Optuna) loads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.search.space import SearchSettings, SearchSpace

if TYPE_CHECKING:
    from tuner.hardware.profile import HardwareProfile


@dataclass(frozen=True)
class TuneRequest:
    """What to search and where; what belongs to the thread that runs it (the listener, the
    cancel flag) and to tests (the trial runner, the clock) is passed to ``tune`` beside it.

    A session owns its model, space and settings: continuing one (``resume``, or a ``study``
    that exists) uses them. ``None`` means "the session's"; a model, space or setting that
    differs from the session's is refused, naming both, except the budgets
    (:attr:`SearchSettings.BUDGET_FIELDS`), which a continued search may change.

    Attributes:
        model: the model spec (see :mod:`tuner.trials.models`); ``None`` only to continue.
        space: what to try; ``None``: the session's, or for a new one the hardware prior's
            policies and the default ladder.
        settings: objective, budgets, tolerances; ``None``: the session's, or the defaults.
        storage: Optuna storage URL; ``None`` for the default SQLite file.
        study: the session's name; an existing session of that name is continued.
        resume: the session must exist already.
        profile: the hardware profile; ``None`` detects it.
        parallel: how many independent trials run at once (each slot with its own worker pool
            and GPU), or ``auto``.
        workers: hand trials out through the store too, to ``mptune worker`` processes of the
            same kind of machine; needs a database server.
    """

    model: str | None = None
    space: SearchSpace | None = None
    settings: SearchSettings | None = None
    storage: str | None = None
    study: str | None = None
    resume: bool = False
    profile: HardwareProfile | None = None
    parallel: int | str = 1
    workers: bool = False

    def resumed(self, study: str) -> TuneRequest:
        """This request continuing the stored session ``study``: the session owns its space
        and settings, so the continued search uses the stored ones."""
        return dataclasses.replace(self, study=study, resume=True, space=None, settings=None)


@dataclass(frozen=True)
class JoinRequest:
    """A machine joining a running search (``mptune worker``): which session, where, and on
    what; the cancel flag, the listener and the trial runner are passed to ``work`` beside it.

    Attributes:
        study: the session's name.
        storage: the database server's URL (not SQLite).
        profile: this machine's hardware profile; ``None`` detects it.
        device: run the trials here (``cpu``, ``gpu:N``); ``None``: as the search asks.
    """

    study: str
    storage: str
    profile: HardwareProfile | None = None
    device: str | None = None
