"""One search per session at a time: a lease held in the session's own storage.

Two processes searching one session would both run every trial, each measured under the
other's load. Before a search starts, it takes the session's lease: a study named
``mptune-lock:<session>`` in the same Optuna storage. Creating a study is atomic in every
storage Optuna supports (the name is unique), so of two searches started at once exactly one
gets it; the other is refused naming the holder. The holder records its host, pid and a
heartbeat; a lease whose holder is gone (a dead pid on this host, or no heartbeat for
:data:`~tuner.search.storage.GRACE_S` from another host) is taken over, so a search killed by
SIGKILL or a power cut does not lock its session for ever.

While the search runs, :class:`Heartbeat` renews the lease and records Optuna's heartbeat of the
running trial every :data:`~tuner.search.storage.HEARTBEAT_S`, so that a trial whose search died
on another host is failed by Optuna (``fail_stale_trials``) rather than left RUNNING.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any

import optuna
import psutil
from optuna.study import StudyDirection

from tuner.errors import MptuneError
from tuner.said import setting
from tuner.search.session import LOCK_PREFIX
from tuner.search.storage import GRACE_S, HEARTBEAT_S

logger = logging.getLogger(__name__)


class SessionBusy(MptuneError):
    """Another search holds the session."""


class Lease:
    """The right to search one session; :meth:`acquire` it, then :meth:`release` it.

    Args:
        storage: the session's Optuna storage.
        session: the session (study) name.
    """

    def __init__(self, storage: optuna.storages.BaseStorage, session: str) -> None:
        self.storage = storage
        self.session = session
        self.name = LOCK_PREFIX + session
        self._study_id: int | None = None

    @property
    def held(self) -> bool:
        return self._study_id is not None

    def acquire(self) -> None:
        """Take the lease.

        Raises:
            SessionBusy: a live search holds it, named in the message.
        """
        for _ in range(3):
            try:
                study_id = self.storage.create_new_study([StudyDirection.MAXIMIZE], self.name)
            except optuna.exceptions.DuplicatedStudyError:
                holder = self._holder()
                if holder is not None and _alive(holder):
                    raise SessionBusy(_busy_message(self.session, holder)) from None
                self._break(holder)
                continue
            self._study_id = study_id
            for key, value in {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "heartbeat": time.time(),
            }.items():
                self.storage.set_study_user_attr(study_id, key, value)
            return
        raise SessionBusy(f"session {self.session!r} is being taken by another search; retry")

    def searching(self) -> bool:
        """Whether a live search holds the lease (this process's or another's)."""
        holder = self._holder()
        return holder is not None and _alive(holder)

    def beat(self) -> None:
        """Record that the holder is alive."""
        if self._study_id is not None:
            self.storage.set_study_user_attr(self._study_id, "heartbeat", time.time())

    def release(self) -> None:
        """Give the lease back (never raises: this runs on the way out of a failed search)."""
        study_id, self._study_id = self._study_id, None
        if study_id is None:
            return
        try:
            self.storage.delete_study(study_id)
        except Exception as exc:  # noqa: BLE001 - the storage may be what failed
            logger.warning("could not release the lease on session %s: %s", self.session, exc)

    def _holder(self) -> dict[str, Any] | None:
        try:
            study_id = self.storage.get_study_id_from_name(self.name)
            # The holder may release it between these two reads: no holder either way.
            attrs = dict(self.storage.get_study_user_attrs(study_id))
        except KeyError:
            return None  # released between our attempt and this read
        attrs["_study_id"] = study_id
        return attrs

    def _break(self, holder: dict[str, Any] | None) -> None:
        """Remove a lease whose holder is gone."""
        if holder is None:
            return
        logger.warning(
            "session %s was left locked by pid %s on %s, which is gone; taking it over",
            self.session,
            holder.get("pid"),
            holder.get("host"),
        )
        with contextlib.suppress(KeyError):
            self.storage.delete_study(int(holder["_study_id"]))


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the lease's holder may still be searching."""
    pid, host, beat = holder.get("pid"), holder.get("host"), holder.get("heartbeat")
    if host == socket.gethostname() and isinstance(pid, int):
        try:
            process = psutil.Process(pid)
            return bool(process.status() != psutil.STATUS_ZOMBIE)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
    if not isinstance(beat, (int, float)):
        return True  # just created, its attributes not written yet
    return time.time() - beat < GRACE_S


def _busy_message(session: str, holder: dict[str, Any]) -> str:
    return (
        f"session {session!r} is already being searched by pid {holder.get('pid')} on "
        f"{holder.get('host')} (since {holder.get('since')}): two searches of one session would "
        "run every trial twice, each under the other's load. Wait for it, stop it, or use "
        f"another {setting('study')}"
    )


class Heartbeat:
    """A daemon thread that renews a lease and the running trial's Optuna heartbeat.

    Use as a context manager around the search; tell it which trials run (:meth:`started`,
    :meth:`ended`): several at once with ``--parallel``.
    """

    def __init__(
        self, storage: optuna.storages.RDBStorage, lease: Lease, interval_s: float = HEARTBEAT_S
    ) -> None:
        self.storage = storage
        self.lease = lease
        self.interval_s = interval_s
        self._running: set[int] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mptune-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def started(self, trial_id: int) -> None:
        with self._guard:
            self._running.add(trial_id)

    def ended(self, trial_id: int) -> None:
        with self._guard:
            self._running.discard(trial_id)

    def beat(self) -> None:
        self.lease.beat()
        with self._guard:
            running = sorted(self._running)
        for trial_id in running:
            self.storage.record_heartbeat(trial_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - a missed beat is not fatal; logged
                logger.warning("could not record the search's heartbeat: %s", exc)
