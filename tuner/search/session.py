"""Tuning sessions, stored as Optuna studies.

A session is one Optuna study: Optuna does the storage (SQLite by default, any URL Optuna
accepts), the trial numbering and the bookkeeping; mptune's strategy decides what to run and
drives it with ask-and-tell. Each trial carries the full :class:`TrialResult` as a user
attribute, the stage that asked for it and the setup as Optuna parameters, so a study opened in
optuna-dashboard reads sensibly too. The study carries the hardware profile, the search settings
and, at the end, the recommendation.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import psutil
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import MptuneError
from tuner.policies import POLICIES
from tuner.setup import Setup
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    from tuner.search.recommend import Recommendation

logger = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

#: The Optuna parameters every trial records (fixed choices, so Optuna accepts them all).
DISTRIBUTIONS = {
    "policy": CategoricalDistribution(POLICIES),
    "batch_size": IntDistribution(1, 1 << 20, log=True),
}


def default_storage_url() -> str:
    """``sqlite:///<user data dir>/sessions.db`` (platformdirs), created on first use."""
    import platformdirs

    directory = Path(platformdirs.user_data_dir("mptune", appauthor=False))
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'sessions.db'}"


def open_storage(url: str | None) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url`` (default: the SQLite file).

    Raises:
        MptuneError: the URL is malformed or the database cannot be reached, in one line.
    """
    url = url or default_storage_url()
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises many kinds; one problem here
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MptuneError(f"cannot open session storage {_redact(url)}: {reason}") from None


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}


def _redact(url: str) -> str:
    """The URL without a password, for messages."""
    head, sep, tail = url.partition("://")
    if sep and "@" in tail:
        creds, _, host = tail.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{head}://{user}:***@{host}"
    return url


class PlannedSampler(optuna.samplers.BaseSampler):
    """The Optuna sampler of a session: the strategy has already chosen the setup, and Optuna
    asks for it. (An enqueued trial would do the same, but a process that dies between
    enqueueing and asking leaves a stray WAITING trial that a later ask would pick up.)"""

    def __init__(self) -> None:
        self.planned: dict[str, Any] = {}

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, Any]:
        return {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: Any
    ) -> Any:
        return self.planned[param_name]


@dataclass(frozen=True)
class StoredTrial:
    """One finished (or failed) trial of a session, as stored."""

    number: int
    stage: str
    result: TrialResult | None  #: None when the trial never finished (interrupted, orphaned)
    state: str  #: Optuna's state name
    note: str | None = None


class TuningSession:
    """A stored tuning session (an Optuna study) and the trials in it."""

    def __init__(
        self,
        study: optuna.Study,
        storage: optuna.storages.BaseStorage,
        sampler: PlannedSampler | None = None,
    ) -> None:
        self.study = study
        self.storage = storage
        self.sampler = sampler

    @property
    def name(self) -> str:
        return self.study.study_name

    @classmethod
    def create(
        cls, name: str, storage_url: str | None, attrs: dict[str, Any], resume: bool = False
    ) -> TuningSession:
        """Create a session, or continue the one called ``name`` when it exists.

        Args:
            name: the study name.
            storage_url: Optuna storage URL, ``None`` for the default SQLite file.
            attrs: study attributes (model, settings, hardware) recorded when it is created.
            resume: require the session to exist already.

        Raises:
            MptuneError: ``resume`` and no such session, or the storage cannot be opened.
        """
        storage = open_storage(storage_url)
        exists = name in optuna.get_all_study_names(storage)
        if resume and not exists:
            raise MptuneError(f"no session named {name!r} to resume (see mptune sessions)")
        sampler = PlannedSampler()
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            direction="maximize",
            load_if_exists=True,
            sampler=sampler,
        )
        session = cls(study, storage, sampler)
        if not exists:
            for key, value in attrs.items():
                study.set_user_attr(key, value)
            study.set_user_attr("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
        return session

    @classmethod
    def load(cls, name: str, storage_url: str | None) -> TuningSession:
        """Open an existing session.

        Raises:
            MptuneError: there is no such session.
        """
        storage = open_storage(storage_url)
        if name not in optuna.get_all_study_names(storage):
            raise MptuneError(f"no session named {name!r} (see mptune sessions)")
        return cls(optuna.load_study(study_name=name, storage=storage), storage)

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.study.user_attrs)

    def set_attr(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)

    def recommendation(self) -> Recommendation | None:
        """The stored recommendation; None before the search has finished (or when what is
        stored cannot be read, which is logged)."""
        from tuner.search.recommend import Recommendation

        data = self.study.user_attrs.get("recommendation")
        if not isinstance(data, dict):
            return None
        try:
            return Recommendation.from_dict(data)
        except (ValueError, TypeError) as exc:
            logger.warning("session %s has an unreadable recommendation (%s)", self.name, exc)
            return None

    def view(self) -> SessionView:
        """Everything stored about this session, as one frozen record (read once)."""
        attrs = self.attrs
        return SessionView(
            name=self.name,
            model=str(attrs.get("model") or ""),
            created=attrs.get("created"),
            space=dict(attrs.get("space") or {}),
            settings=dict(attrs.get("settings") or {}),
            hardware=dict(attrs.get("hardware") or {}),
            trials=tuple(self.trials()),
            recommendation=self.recommendation(),
        )

    def fail_orphans(self) -> int:
        """Mark trials left RUNNING by a process that died as failed; returns how many.

        A trial started on this host whose process is gone can never finish. Trials of other
        hosts are left alone: they may belong to a worker that is still running there.
        """
        host = socket.gethostname()
        count = 0
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            attrs = trial.user_attrs
            if attrs.get("host") != host:
                continue
            pid = attrs.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and psutil.pid_exists(pid):
                continue
            self.storage.set_trial_user_attr(
                trial._trial_id, "note", "the tuning process died while this trial ran"
            )
            self.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            count += 1
        if count:
            logger.warning(
                "marked %d trial(s) of session %s as failed: their process died", count, self.name
            )
        return count

    def start_trial(self, spec: TrialSpec, stage: str) -> optuna.Trial:
        """Record a trial as running (Optuna's ask) before its worker starts."""
        if self.sampler is None:
            raise RuntimeError("a session opened with load() is read-only")
        self.sampler.planned = {
            "policy": spec.setup.policy.name,
            "batch_size": spec.setup.batch_size,
        }
        trial = self.study.ask(DISTRIBUTIONS)
        trial.set_user_attr("spec", spec.to_dict())
        trial.set_user_attr("loss_scale", str(spec.loss_scale))
        trial.set_user_attr("stage", stage)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", os.getpid())
        return trial

    def finish_trial(self, trial: optuna.Trial, result: TrialResult) -> int:
        """Store the result and close the trial (Optuna's tell); returns its number."""
        trial.set_user_attr("result", result.to_dict())
        trial.set_user_attr("status", result.status.value)
        if result.status is TrialStatus.OK and result.samples_per_second is not None:
            self.study.tell(trial, result.samples_per_second)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        return trial.number

    def abandon_trial(self, trial: optuna.Trial, note: str) -> None:
        """Close a trial that will never have a result (Ctrl-C, a stop from the GUI)."""
        trial.set_user_attr("note", note)
        self.study.tell(trial, state=TrialState.FAIL)

    def trials(self) -> list[StoredTrial]:
        """Every closed trial, oldest first."""
        stored = []
        for trial in self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        ):
            stored.append(_stored(trial))
        return stored


def _stored(trial: FrozenTrial) -> StoredTrial:
    attrs = trial.user_attrs
    data = attrs.get("result")
    result = None
    if isinstance(data, dict):
        try:
            result = TrialResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("trial %d has an unreadable result (%s); ignored", trial.number, exc)
    return StoredTrial(
        trial.number, str(attrs.get("stage", "")), result, trial.state.name, attrs.get("note")
    )


@dataclass(frozen=True)
class SessionView:
    """A stored session read whole: what the CLI's ``show`` and the window's history display.

    Attributes:
        name: the session (Optuna study) name.
        model: the model spec it tunes.
        created: when it was created (ISO 8601, UTC).
        space: the search space it was created with (its stored form).
        settings: the search settings it was created with (its stored form).
        hardware: the hardware profile it ran on (``HardwareProfile.to_dict``).
        trials: every closed trial, oldest first.
        recommendation: None until a search of it has finished.
    """

    name: str
    model: str
    created: str | None
    space: dict[str, Any]
    settings: dict[str, Any]
    hardware: dict[str, Any]
    trials: tuple[StoredTrial, ...]
    recommendation: Recommendation | None

    def to_dict(self) -> dict[str, Any]:
        """What ``mptune show --json`` prints."""
        return {
            "session": self.name,
            "model": self.model,
            "created": self.created,
            "settings": self.settings,
            "space": self.space,
            "hardware": self.hardware,
            "trials": [
                {
                    "number": t.number,
                    "stage": t.stage,
                    "state": t.state,
                    "note": t.note,
                    "result": t.result.to_dict() if t.result else None,
                }
                for t in self.trials
            ],
            "recommendation": self.recommendation.to_dict() if self.recommendation else None,
        }


@dataclass(frozen=True)
class SessionSummary:
    """A line of ``mptune sessions``."""

    name: str
    model: str | None
    created: str | None
    trials: int
    recommendation: str | None


def list_sessions(storage_url: str | None) -> list[SessionSummary]:
    """Every session in the storage, newest first."""
    storage = open_storage(storage_url)
    summaries = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        attrs = summary.user_attrs
        rec = attrs.get("recommendation")
        label = None
        if isinstance(rec, dict) and isinstance(rec.get("setup"), dict):
            try:
                label = Setup.from_dict(rec["setup"]).label
            except ValueError:
                label = "unreadable"
        summaries.append(
            SessionSummary(
                summary.study_name,
                attrs.get("model"),
                attrs.get("created"),
                summary.n_trials,
                label,
            )
        )
    summaries.sort(key=lambda s: s.created or "", reverse=True)
    return summaries
