"""``mptune worker``: join a running search and take trials from it, through its store.

A search started with ``--workers`` puts each trial it wants in its Optuna study as a waiting
trial (Optuna's ``WAITING`` state) and runs it in its own slot unless another process claims it
first. A worker claims a waiting trial by moving it to ``RUNNING``, which the store does
atomically (a row lock in PostgreSQL and MySQL): of two workers asking for one trial, exactly
one gets it, so no trial runs twice. The worker runs it in a fresh or warm trial process, like
the search would, records Optuna's heartbeat of it while it runs, and stores the result; the
search reads it from the store. A worker killed mid-trial stops sending that heartbeat: after
:data:`~tuner.search.storage.GRACE_S` the search closes the trial as ``crashed`` and, as for
any crashed trial, runs it once more, wherever a slot is free.

A worker measures only on the kind of machine the session was measured on (its hardware
fingerprint), and only over a database server: SQLite is not safe for several processes
writing at once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import MptuneError
from tuner.said import setting
from tuner.search.events import SearchEvent, TrialFinished, TrialStarted, WorkerReported
from tuner.search.lease import Lease
from tuner.search.owned import same_hardware, same_model_file
from tuner.search.request import JoinRequest
from tuner.search.session import StoredTrial, TuningSession, needs_server
from tuner.search.storage import GRACE_S, HEARTBEAT_S, redact_url, storage_errors
from tuner.trials.messages import WorkerMessage
from tuner.trials.models import parse_model_spec
from tuner.trials.process import TrialCancelled
from tuner.trials.protocol import TrialRunner
from tuner.trials.runner import WorkerPool
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)

#: How often an idle worker looks for a waiting trial.
POLL_S = 0.5


@dataclass(frozen=True)
class WorkDone:
    """What a worker did: the trials it ran, and why it stopped."""

    session: str
    ran: tuple[int, ...]
    reason: str


def work(
    request: JoinRequest,
    *,
    cancel: threading.Event | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    runner: TrialRunner | None = None,
) -> WorkDone:
    """Take trials from the running search of session ``request.study`` until it ends
    (:class:`~tuner.search.request.JoinRequest` says what it holds).

    Args:
        request: which session, where, and on what.
        cancel: set it to stop; the running trial is closed, and the search runs it again.
        on_event: called with :class:`TrialStarted`, :class:`WorkerReported` and
            :class:`TrialFinished` for the trials run here.
        runner: runs one trial; by default a :class:`~tuner.trials.runner.WorkerPool`.

    Raises:
        MptuneError: SQLite, no such session, this machine is another kind than the one the
            session was measured on, or its copy of the model file is not the session's.
        TrialCancelled: stopped by ``cancel`` (the running trial was closed).
    """
    study, storage, profile, device = (
        request.study,
        request.storage,
        request.profile,
        request.device,
    )
    needs_server(storage)
    emit = on_event or (lambda event: None)
    stop = cancel or threading.Event()
    with storage_errors(storage):
        session = TuningSession.find(study, storage)
        if session is None:
            raise MptuneError(
                f"no session named {study!r} in {redact_url(storage)}: start its search "
                f"first (with {setting('workers')} {setting('study', study)} "
                f"{setting('storage', 'URL')})"
            )
        view = session.view()
    if profile is None:
        from tuner.hardware import detect

        profile = detect()
    same_hardware(view, profile, device or view.search_settings().device)
    same_model_file(view, parse_model_spec(view.model), joining=True)
    lease = Lease(session.storage, session.name)
    pool = WorkerPool() if runner is None else None
    run = pool.run if pool is not None else runner
    assert run is not None
    ran: list[int] = []
    wait = _Wait(lease)
    beat = _Beat(session)
    beat.start()
    try:
        while not stop.is_set():
            with storage_errors(storage):
                trial = next(
                    (t for t in (session.claim(i) for i in session.waiting()) if t is not None),
                    None,
                )
                if trial is None:
                    ended = wait.ended()
                    if ended is not None:
                        return WorkDone(session.name, tuple(ran), ended)
                    stop.wait(POLL_S)
                    continue
                wait.seen = True
                stored, attrs = session.peek(trial._trial_id)
            spec = TrialSpec.from_dict(attrs["spec"])
            if device is not None:
                spec = dataclasses.replace(spec, device=device)
            done = _run_one(session, trial, stored, spec, run, emit, beat, stop, storage)
            if done is not None:
                ran.append(done)
        raise TrialCancelled(f"worker of session {study}")
    finally:
        beat.stop()
        if pool is not None:
            pool.close()


class _Wait:
    """Whether a worker with nothing to take is done. A worker may start before its search
    holds the session (or between a stop and a resume): it waits up to :data:`GRACE_S` for
    one, and ends when the search it saw ends."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.searched = time.monotonic()  # when a search last held the session
        self.seen = False  # whether this worker has seen its search

    def ended(self) -> str | None:
        """Why the worker ends now; None while it waits on."""
        if self.lease.searching():
            self.seen, self.searched = True, time.monotonic()
            return None
        if self.seen:
            return "its search ended"
        if time.monotonic() - self.searched > GRACE_S:
            return f"no search ran it for {GRACE_S} s"
        return None


def _run_one(
    session: TuningSession,
    trial: optuna.Trial,
    stored: StoredTrial,
    spec: TrialSpec,
    run: TrialRunner,
    emit: Callable[[SearchEvent], None],
    beat: _Beat,
    stop: threading.Event,
    storage: str,
) -> int | None:
    """Run a claimed trial and store its result: its number, or None when its search gave it
    up or closed it meanwhile.

    Raises:
        TrialCancelled: ``stop`` was set (the trial is given up, for its search to run again).
    """
    number = stored.number
    logger.info("took trial #%d of session %s: %s", number, session.name, spec.setup.label)
    emit(TrialStarted(number, stored.stage, spec))
    mine = threading.Event()
    beat.track(trial._trial_id, mine, stop)  # claim() recorded its first heartbeat
    try:

        def heard(message: WorkerMessage) -> None:
            emit(WorkerReported(number, message))

        result = run(
            spec,
            heard,
            cancel=mine,
            source=parse_model_spec(spec.model),
        )
    except TrialCancelled:
        if stop.is_set():
            session.give_up(trial._trial_id, "stopped on its worker")
            raise
        logger.warning("trial #%d was given up by its search", number)
        return None
    finally:
        beat.untrack()
    with storage_errors(storage):
        try:
            session.finish_trial(trial, result)
        except Exception as exc:  # noqa: BLE001 - closed by its search meanwhile
            logger.warning("trial #%d could not be stored: %s", number, exc)
            return None
    emit(TrialFinished(number, stored.stage, result))
    return number


class _Beat(threading.Thread):
    """Records the running trial's heartbeat every :data:`HEARTBEAT_S`, and stops its run when
    the search closed it (gave it up, or took it for dead)."""

    def __init__(self, session: TuningSession) -> None:
        super().__init__(name="mptune-worker-heartbeat", daemon=True)
        self.session = session
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._trial: tuple[int, threading.Event, threading.Event] | None = None

    def track(self, trial_id: int, cancel: threading.Event, stop: threading.Event) -> None:
        with self._lock:
            self._trial = (trial_id, cancel, stop)

    def untrack(self) -> None:
        with self._lock:
            self._trial = None

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)

    def run(self) -> None:
        last = 0.0
        while not self._done.wait(POLL_S):
            with self._lock:
                current = self._trial
            if current is None:
                continue
            trial_id, cancel, stop = current
            if stop.is_set():
                cancel.set()
            if time.monotonic() - last < HEARTBEAT_S:
                continue
            last = time.monotonic()
            try:
                self.session.storage.record_heartbeat(trial_id)
                now, _ = self.session.peek(trial_id)
                if now.state != "RUNNING":
                    cancel.set()  # the search closed it: stop measuring for nothing
            except Exception as exc:  # noqa: BLE001 - a missed beat is not fatal; logged
                logger.warning("could not record the trial's heartbeat: %s", exc)
