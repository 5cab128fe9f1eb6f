"""Tuning sessions, stored as Optuna studies.

A session is one Optuna study: Optuna does the storage (SQLite by default, any URL Optuna
accepts), the trial numbering and the bookkeeping; mptune's strategy decides what to run and
drives it with ask-and-tell. Each trial carries the full :class:`TrialResult` as a user
attribute, the stage that asked for it and the setup as Optuna parameters, so a study opened in
optuna-dashboard reads sensibly too. The study carries the hardware profile, the search settings
and, at the end, the recommendation.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import optuna
import psutil
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import MptuneError
from tuner.hardware.fingerprint import session_fingerprint
from tuner.policies import FULL_HALF, POLICIES
from tuner.said import setting
from tuner.search.records import Recommendation, SessionFailure
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.storage import GRACE_S, open_storage, redact_url, storage_errors
from tuner.search.wording import run_words
from tuner.setup import Setup
from tuner.trials.outcome import lost
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

logger = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

#: The states of a closed trial: what a session's trials are, in every view and count of it.
CLOSED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
#: The Optuna parameters every trial records (fixed choices, so Optuna accepts them all). A
#: full half policy (issue 71) is recorded under a parameter of its own: Optuna refuses a study
#: whose trials give one parameter different choices, and sessions stored before it know three.
DISTRIBUTIONS = {
    "policy": CategoricalDistribution(POLICIES),
    "batch_size": IntDistribution(1, 1 << 20, log=True),
}
FULL_HALF_DISTRIBUTION = {"full_half_policy": CategoricalDistribution(FULL_HALF)}


def optuna_params(setup: Setup) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Optuna parameters a trial of ``setup`` records, and their distributions."""
    name = setup.policy.name
    if name in POLICIES:
        return {"policy": name, "batch_size": setup.batch_size}, dict(DISTRIBUTIONS)
    distributions = {"batch_size": DISTRIBUTIONS["batch_size"], **FULL_HALF_DISTRIBUTION}
    return {"full_half_policy": name, "batch_size": setup.batch_size}, distributions


#: The leases of :mod:`tuner.search.lease` are studies named with this prefix; session lists
#: leave them out, and no session may be named so.
LOCK_PREFIX = "mptune-lock:"


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
    #: what it was to run (kept for a trial that closed without a result: a stopped trial)
    spec: TrialSpec | None = None
    #: when storage opened and closed it (Optuna's ``datetime_start`` and
    #: ``datetime_complete``; None where it did not say): the order a search ran its trials
    #: in, and how long a stopped one ran (the window's plots place them so, as they did live)
    started: datetime | None = None
    closed: datetime | None = None


#: How long to wait before each new try of a write to a database server whose connection
#: dropped (a restart, a network blip): about half a minute in all, then the search stops.
STORAGE_RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a lost or refused connection to a server."""
    import sqlalchemy.exc

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
            return True
        if getattr(seen, "connection_invalidated", False):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


T = TypeVar("T")


def _retrying(url: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, tried again while a database server's connection is down (not SQLite's
    file: its errors are not passing), waiting :data:`STORAGE_RETRY_S` between tries."""
    delays = () if url.startswith("sqlite") else STORAGE_RETRY_S
    for delay in delays:
        try:
            return call()
        except optuna.exceptions.StorageInternalError as exc:
            if not _connection_lost(exc):
                raise
            logger.warning(
                "session storage %s: %s; trying again in %g s", redact_url(url), what, delay
            )
            time.sleep(delay)
    return call()


class TuningSession:
    """A stored tuning session (an Optuna study) and the trials in it.

    Its writes (a trial opened, its result, a closed trial, a session attribute) are tried
    again for about half a minute when a database server's connection drops
    (:data:`STORAGE_RETRY_S`); past that the error reaches the search, which stops with every
    finished trial kept.
    """

    def __init__(
        self,
        study: optuna.Study,
        storage: optuna.storages.RDBStorage,
        sampler: PlannedSampler | None = None,
    ) -> None:
        self.study = study
        self.storage = storage
        self.sampler = sampler
        #: one trial opened or closed at a time: the sampler's plan is per trial, and parallel
        #: trials (``--parallel``) open and close theirs from several threads
        self._lock = threading.RLock()

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
        if name.startswith(LOCK_PREFIX) or not name.strip():
            raise MptuneError(f"{name!r} cannot be a session name")
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
        session = cls.find(name, storage_url)
        if session is None:
            raise MptuneError(f"no session named {name!r} (see mptune sessions)")
        return session

    @classmethod
    def find(cls, name: str, storage_url: str | None) -> TuningSession | None:
        """The existing session called ``name``, or None.

        Raises:
            MptuneError: the storage cannot be opened or read.
        """
        storage = open_storage(storage_url)
        with storage_errors(storage_url):
            if name.startswith(LOCK_PREFIX) or name not in optuna.get_all_study_names(storage):
                return None
            return cls(optuna.load_study(study_name=name, storage=storage), storage)

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.study.user_attrs)

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        return _retrying(str(self.storage.url), what, call)

    def set_attr(self, key: str, value: Any) -> None:
        self._retry("writing the session", lambda: self.study.set_user_attr(key, value))

    def recommendation(self) -> Recommendation | None:
        """The stored recommendation; None before the search has finished (or when what is
        stored cannot be read, which is logged)."""
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
            failure=SessionFailure.from_dict(attrs.get("failure")),
            model_digest=str(attrs.get("model_digest") or ""),
            runs=tuple(r for r in attrs.get("runs") or () if isinstance(r, dict)),
        )

    def add_run(self, run: dict[str, Any]) -> None:
        """Keep one real run of the tuned setup (``mptune run``: what it achieved beside what
        it was tuned at), after the runs kept before."""
        runs = [r for r in self.attrs.get("runs") or () if isinstance(r, dict)]
        self.set_attr("runs", [*runs, run])

    def fail_orphans(self) -> int:
        """Mark trials left RUNNING by a search that died as failed; returns how many.

        A trial started on this host whose process is gone can never finish. A trial of another
        host is failed when its heartbeat is older than :data:`GRACE_S` (Optuna's
        ``fail_stale_trials``); while its heartbeat is fresh its search may still be running.
        """
        count = 0
        # Optuna's fail_stale_trials, with a note on each trial: Optuna keeps the heartbeats
        # but has no public way to ask which trials are stale.
        for trial_id in self.storage._get_stale_trial_ids(self.study._study_id):
            note = f"its search or worker sent no heartbeat for over {GRACE_S} s"
            count += self._fail(trial_id, note=note)
        # A trial left waiting was handed out by a search that is gone (this one holds the
        # lease now and has handed out nothing yet): nobody waits for its result.
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            count += self._fail(trial._trial_id, note="left waiting by a search that stopped")
        host = socket.gethostname()
        for trial in self._running():
            attrs = trial.user_attrs
            if "host" not in attrs:
                # Opened by Optuna's ask() in parts (mptune before it wrote a trial whole) and
                # never finished: the store failed in between, and nothing runs it.
                count += self._fail(trial._trial_id, note="never fully written: the store failed")
                continue
            if attrs.get("host") != host:
                continue
            pid = attrs.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and psutil.pid_exists(pid):
                continue
            died = "the tuning process died while this trial ran"
            count += self._fail(trial._trial_id, note=died)
        if count:
            logger.warning(
                "marked %d trial(s) of session %s as failed: their search died", count, self.name
            )
        return count

    def _running(self) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))

    def start_trial(self, spec: TrialSpec, stage: str) -> optuna.Trial:
        """Record a trial as running (Optuna's ask) before its worker starts."""
        with self._lock:
            return self._start_trial(spec, stage)

    def _start_trial(self, spec: TrialSpec, stage: str) -> optuna.Trial:
        if self.sampler is None:
            raise RuntimeError("a session opened with load() is read-only")
        # The trial is written whole, in one transaction (its setup, spec, stage and who runs
        # it), or not at all: a store that fails on write (a full disk) leaves no trial half
        # written, which nothing would ever close. (Optuna's ask() writes the trial, then
        # each parameter and attribute apart.)
        params, distributions = optuna_params(spec.setup)
        frozen = optuna.trial.create_trial(
            state=TrialState.RUNNING,
            params=params,
            distributions=distributions,
            user_attrs={
                "spec": spec.to_dict(),
                "loss_scale": str(spec.loss_scale),
                "stage": stage,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            },
        )
        trial_id = self._retry(
            "opening a trial",
            lambda: self.storage.create_new_trial(self.study._study_id, template_trial=frozen),
        )
        try:
            self._retry("opening a trial", lambda: self.storage.record_heartbeat(trial_id))
            return optuna.Trial(self.study, trial_id)
        except BaseException as exc:
            self._close_unwritten(trial_id, f"it could not be opened: {exc}")
            raise

    # -- trials handed out through the store (``mptune worker``) -------------------------------
    def enqueue_trial(self, spec: TrialSpec, stage: str) -> int:
        """Record a trial as waiting (Optuna's WAITING state) for whoever claims it first: this
        search's own slot or an ``mptune worker``; returns its trial id."""
        params, distributions = optuna_params(spec.setup)
        frozen = optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=params,
            distributions=distributions,
            user_attrs={"spec": spec.to_dict(), "loss_scale": str(spec.loss_scale),
                        "stage": stage},
        )  # fmt: skip
        with self._lock:
            return self._retry(
                "opening a trial",
                lambda: self.storage.create_new_trial(self.study._study_id, template_trial=frozen),
            )

    def claim(self, trial_id: int) -> optuna.Trial | None:
        """Take a waiting trial to run it here: the trial, or None when another process took
        it first (the store decides, atomically: Optuna's WAITING to RUNNING)."""
        with self._lock:
            try:
                taken = self._retry(
                    "claiming a trial",
                    lambda: self.storage.set_trial_state_values(trial_id, TrialState.RUNNING),
                )
            except optuna.exceptions.UpdateFinishedTrialError:
                return None  # abandoned by its search meanwhile
            if not taken:
                return None
            self._retry("claiming a trial", lambda: self.storage.record_heartbeat(trial_id))
            for key, value in {"host": socket.gethostname(), "pid": os.getpid()}.items():
                self._retry(
                    "claiming a trial",
                    functools.partial(self.storage.set_trial_user_attr, trial_id, key, value),
                )
            return optuna.Trial(self.study, trial_id)

    def waiting(self) -> list[int]:
        """The ids of the trials waiting to be claimed, oldest first."""
        trials = self.storage.get_all_trials(
            self.study._study_id, deepcopy=False, states=(TrialState.WAITING,)
        )
        return [t._trial_id for t in sorted(trials, key=lambda t: t.number)]

    def peek(self, trial_id: int) -> tuple[StoredTrial, dict[str, Any]]:
        """One trial as stored now (any state: ``WAITING``, ``RUNNING``, ...), with its user
        attributes (who runs it: ``host``, ``pid``)."""
        trial = self._retry("reading a trial", lambda: self.storage.get_trial(trial_id))
        return _stored(trial), dict(trial.user_attrs)

    def give_up(self, trial_id: int, note: str) -> None:
        """Close a trial this search handed out and no longer waits for (a stop): failed,
        with ``note``; a worker running it finds it closed and drops it."""
        self._fail(trial_id, note=note)

    def fail_stale(self, trial_id: int, result: TrialResult) -> bool:
        """Close a running trial whose runner stopped sending its heartbeat, with ``result``
        (``crashed``, saying why); False when it ended meanwhile after all."""
        return self._fail(trial_id, result=result)

    def _fail(
        self, trial_id: int, *, note: str | None = None, result: TrialResult | None = None
    ) -> bool:
        """Close a trial as failed, with a note or a result; False when another process closed
        it first."""
        attrs: dict[str, Any] = {"note": note} if note is not None else {}
        if result is not None:
            attrs |= {"result": result.to_dict(), "status": result.status.value}
        with self._lock:
            try:
                for key, value in attrs.items():
                    self.storage.set_trial_user_attr(trial_id, key, value)
                self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                return False
            return True

    def stale(self, trial_id: int) -> bool:
        """Whether a running trial's runner has sent no heartbeat for :data:`GRACE_S`
        (Optuna's heartbeat, the same test as ``fail_stale_trials``)."""
        return trial_id in self._retry(
            "reading the heartbeats",
            lambda: self.storage._get_stale_trial_ids(self.study._study_id),
        )

    def finish_trial(self, trial: optuna.Trial, result: TrialResult) -> int:
        """Store the result and close the trial (Optuna's tell); returns its number."""
        with self._lock:
            return self._finish_trial(trial, result)

    def _finish_trial(self, trial: optuna.Trial, result: TrialResult) -> int:
        what = "storing a trial's result"
        try:
            self._retry(what, lambda: trial.set_user_attr("result", result.to_dict()))
            self._retry(what, lambda: trial.set_user_attr("status", result.status.value))
            if result.status is TrialStatus.OK and result.samples_per_second is not None:
                self._retry(what, lambda: self.study.tell(trial, result.samples_per_second))
            else:
                self._retry(what, lambda: self.study.tell(trial, state=TrialState.FAIL))
        except BaseException as exc:
            self._close_unwritten(trial._trial_id, f"its result could not be stored: {exc}")
            raise
        return trial.number

    def _close_unwritten(self, trial_id: int, note: str) -> None:
        """Close, as failed, a trial whose opening or result the store refused; a store that
        refuses this too leaves it running, and the next search of the session fails it
        (:meth:`fail_orphans`). Never raises: the store's first failure is the one to report."""
        try:
            self._fail(trial_id, note=note)
        except Exception as exc:  # noqa: BLE001 - the store is what failed
            logger.warning("could not close trial %d of session %s: %s", trial_id, self.name, exc)

    def abandon_trial(self, trial: optuna.Trial, note: str) -> None:
        """Close a trial that will never have a result (Ctrl-C, a stop from the GUI)."""
        with self._lock:
            self._retry("closing a trial", lambda: trial.set_user_attr("note", note))
            self._retry("closing a trial", lambda: self.study.tell(trial, state=TrialState.FAIL))

    def trials(self) -> list[StoredTrial]:
        """Every closed trial, oldest first."""
        stored = []
        for trial in self.study.get_trials(deepcopy=False, states=CLOSED):
            stored.append(_stored(trial))
        return stored


def stored_result(trial: StoredTrial, spec: TrialSpec) -> TrialResult:
    """A closed trial's result; one that closed without a result (its worker stopped, or the
    search gave it up) as ``crashed``, with the trial's note."""
    if trial.result is not None:
        return trial.result
    status, error = lost(trial.note or "it closed without a result")
    return TrialResult(spec, status, error=error)


def _stored(trial: FrozenTrial) -> StoredTrial:
    attrs = trial.user_attrs
    data = attrs.get("result")
    result = None
    if isinstance(data, dict):
        try:
            result = TrialResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("trial %d has an unreadable result (%s); ignored", trial.number, exc)
    spec = result.spec if result is not None else None
    if spec is None and isinstance(attrs.get("spec"), dict):
        try:
            spec = TrialSpec.from_dict(attrs["spec"])
        except (KeyError, TypeError, ValueError):
            spec = None  # an unreadable spec: the trial is listed without its setup
    return StoredTrial(
        trial.number,
        str(attrs.get("stage", "")),
        result,
        trial.state.name,
        attrs.get("note"),
        spec,
        trial.datetime_start,
        trial.datetime_complete,
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
        failure: why its last search failed (the model, in its own code); None when it did not.
    """

    name: str
    model: str
    created: str | None
    space: dict[str, Any]
    settings: dict[str, Any]
    hardware: dict[str, Any]
    trials: tuple[StoredTrial, ...]
    recommendation: Recommendation | None
    failure: SessionFailure | None = None
    #: the model file's or training script's content when it was measured
    #: (:func:`tuner.trials.models.file_digest`); "" for a built-in, or a session from before
    model_digest: str = ""
    #: every ``mptune run`` of its tuned setup: when, the setup, the samples per second it was
    #: tuned at and the one the real fit achieved (issue 49: each real run checks the tuner)
    runs: tuple[dict[str, Any], ...] = ()

    @property
    def hardware_kind(self) -> str | None:
        """The kind of machine it was measured on (``HardwareFingerprint.kind``)."""
        return _hardware_kind({"hardware": self.hardware, "settings": self.settings})

    def search_space(self) -> SearchSpace:
        """The search space the session was created with.

        Raises:
            MptuneError: what is stored is not a valid space.
        """
        try:
            return SearchSpace.from_dict(self.space)
        except (ValueError, TypeError) as exc:
            raise MptuneError(
                f"session {self.name!r} has an unreadable search space: {exc}"
            ) from None

    def search_settings(self) -> SearchSettings:
        """The search settings the session was created with (budgets included).

        Raises:
            MptuneError: what is stored is not valid settings.
        """
        try:
            return SearchSettings.from_dict(self.settings)
        except (ValueError, TypeError) as exc:
            raise MptuneError(f"session {self.name!r} has unreadable settings: {exc}") from None

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
            "failure": self.failure.to_dict() if self.failure else None,
            "runs": [dict(r) for r in self.runs],
        }


@dataclass(frozen=True)
class SessionSummary:
    """A line of ``mptune sessions``."""

    name: str
    model: str | None
    created: str | None
    trials: int
    recommendation: str | None
    #: the kind of machine it was measured on (``HardwareFingerprint.kind``), None if unknown
    hardware: str | None = None
    #: the recommendation's speed-up against the best float32 setup
    speedup: float | None = None
    #: the kind of failure its last search ended in (:attr:`SessionFailure.kind`), if it failed
    failure: str | None = None
    #: its setup's real runs (``mptune run``), as :attr:`SessionView.runs`
    runs: tuple[dict[str, Any], ...] = ()

    #: the headings of :meth:`cells`, for a table of sessions
    COLUMNS = ("session", "model", "created", "hardware", "trials", "recommendation")

    def cells(self) -> tuple[str, ...]:
        """The session as a row of text under :attr:`COLUMNS`."""
        return (
            self.name,
            self.model or "",
            self.created or "",
            self.hardware or "",
            str(self.trials),
            self.outcome,
        )

    @property
    def outcome(self) -> str:
        """The recommendation and its speed-up in a few words, for a list of sessions."""
        if self.recommendation is None:
            return f"failed: {self.failure}" if self.failure else "none: the search did not finish"
        # A float32 pick is stated against itself (1.0 exactly): no ratio to read.
        itself = self.speedup == 1.0 and self.recommendation.startswith("float32 ")
        speedup = f" ({self.speedup:.2f}x float32)" if self.speedup and not itself else ""
        return self.recommendation + speedup + run_words(self.runs)


def list_sessions(storage_url: str | None) -> list[SessionSummary]:
    """Every session in the storage, newest first."""
    storage = open_storage(storage_url)
    summaries = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name.startswith(LOCK_PREFIX):
            continue
        attrs = summary.user_attrs
        rec = attrs.get("recommendation")
        label = None
        if isinstance(rec, dict) and isinstance(rec.get("setup"), dict):
            try:
                label = Setup.from_dict(rec["setup"]).label
            except ValueError:
                label = "unreadable"
        speedup = rec.get("speedup_vs_float32") if isinstance(rec, dict) else None
        failure = SessionFailure.from_dict(attrs.get("failure"))
        summaries.append(
            SessionSummary(
                summary.study_name,
                attrs.get("model"),
                attrs.get("created"),
                # The closed trials, which show lists: not one still running, or left half
                # written by a store that failed (the next search closes those).
                storage.get_n_trials(summary._study_id, state=CLOSED),
                label,
                _hardware_kind(attrs),
                float(speedup) if isinstance(speedup, int | float) else None,
                failure.kind if failure else None,
                tuple(r for r in attrs.get("runs") or () if isinstance(r, dict)),
            )
        )
    summaries.sort(key=lambda s: s.created or "", reverse=True)
    return summaries


def _hardware_kind(attrs: dict[str, Any]) -> str | None:
    """The kind of machine a session was measured on, from its stored profile and device."""
    fingerprint = session_fingerprint(attrs)
    return fingerprint.kind if fingerprint else None


def needs_server(url: str | None) -> None:
    """Refuse (MptuneError) a store that several processes cannot write at once: SQLite, or the
    default SQLite file."""
    if url is None or url.startswith("sqlite"):
        server = setting("storage", "postgresql://...")
        raise MptuneError(
            f"workers share a search through a database server ({server}): SQLite "
            "is not safe for several processes writing at once"
        )
