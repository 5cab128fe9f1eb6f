"""A trial worker's process: started through the launcher (:mod:`tuner.trials.launcher`) with
its event pipe and its log, watched while it starts (a worker that makes no progress is not
waited for), and ended with its whole process group. :mod:`tuner.trials.runner` drives one
through a trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import tempfile
import threading
import time
from typing import IO, Any

from tuner.trials import launcher
from tuner.trials.events import STACK_SIGNAL
from tuner.trials.launcher import WorkerHandle

#: How often the parent samples the worker's resident memory (live plots, the CPU limit).
MEMORY_SAMPLE_INTERVAL_S = 0.25
_LOG_TAIL_CHARS = 4000
#: A worker started ahead that used no CPU time for this long while it starts is stalled (a
#: stopped process, one blocked on a driver or a network file system): the others' trials are
#: not held up for it. An import that progresses uses CPU time in every such window.
STALL_S = 2.0
#: How long a worker killed at its time limit is given to write its threads' stacks first
#: (faulthandler writes them from its signal handler: milliseconds), and how long its log must
#: stay still for the stacks to count as written.
STACK_GRACE_S = 1.0
_STACK_QUIET_S = 0.1


class TrialCancelled(Exception):
    """The caller asked the running trial to stop; the worker has been killed."""


#: The worker processes this process has running, so that all of them can be ended at once
#: (the window closing must not wait for a search thread that may be blocked on storage).
LIVE: set[WorkerHandle] = set()
LIVE_LOCK = threading.Lock()


def kill_all_workers() -> int:
    """Kill every trial worker this process has running (and their process groups) now;
    returns how many. Their :func:`run_trial` calls then end as crashed or cancelled."""
    with LIVE_LOCK:
        live = list(LIVE)
    for proc in live:
        kill_group(proc)
    return len(live)


def read_line(fd: int) -> bytes:
    """One line from ``fd``, read a byte at a time so that nothing after it is consumed; what
    came before end-of-file when the line did not end."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


class WorkerProcess:
    """A worker process with its event pipe and its log: started for one trial, or kept warm
    for several by a :class:`WorkerPool`."""

    def __init__(self, env: dict[str, str], announce_import: bool = False) -> None:
        read_fd, write_fd = os.pipe()
        # The worker's stdout and stderr go to a file with no name: it is unlinked as soon as
        # the worker has it, so nothing is left behind however this process ends, and its tail
        # is read back through this process's own descriptor once the worker is gone.
        self.log = tempfile.TemporaryFile(prefix="mptune-worker-", suffix=".log")  # noqa: SIM115
        args = ["--announce-import"] if announce_import else []
        try:
            self.proc = launcher.current().launch(env, args, self.log.fileno(), write_fd)
        except BaseException:
            self.log.close()
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.read_fd = read_fd
        self.closed = False
        #: when it was spawned (``time.monotonic``): its start counts against its first trial
        self.spawned = time.monotonic()
        #: how long its start took (interpreter and imports), once a worker started ahead said
        #: its imports were done; None before
        self.up_s: float | None = None
        #: it has had a trial: its start is no later trial's to count
        self.used = False
        #: started ahead, it writes one line when its imports are done, before any trial's
        #: events: True until that line is read
        self.announcing = announce_import
        #: started ahead, it was stopped at its trial's limit before its imports were done
        self.start_timed_out = False
        #: its CPU time when last seen to grow, and when (see :meth:`stalled`)
        self._progress: tuple[float, float] | None = None
        #: every thread's Python stack, as it wrote them when it was stopped at a limit
        self.stack: str | None = None
        #: its exit status and log tail, once closed, and how long it had lived then
        self._ended: tuple[int, str] | None = None
        self.lived_s = 0.0
        #: whether its trials run on the CPU (as its first trial's ``started`` event said)
        self.on_cpu = False
        #: its trials hold a fixed arena of the GPU's memory (a memory limit), which no other
        #: worker's trial may run beside
        self.holds_arena = False
        with LIVE_LOCK:
            LIVE.add(self.proc)

    def stalled(self, now: float) -> bool:
        """Whether it has used no CPU time for :data:`STALL_S` (stopped, or blocked)."""
        import psutil

        try:
            times = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return False
        cpu = times.user + times.system
        if self._progress is None or cpu > self._progress[0]:
            self._progress = (cpu, now)
            return False
        return now - self._progress[1] >= STALL_S

    def read_imported(self) -> bool:
        """Read the line a worker started ahead writes once its imports are done (call it when
        the channel is readable): whether that is what it said (else it failed to start)."""
        line = read_line(self.read_fd)
        self.announcing = False
        if not line.startswith(b'{"type": "imported"}'):
            return False
        self.up_s = time.monotonic() - self.spawned
        return True

    def wait_up(self, deadline: float, cancel: threading.Event | None) -> bool:
        """Wait until a worker started ahead has done its imports, at most until ``deadline``
        (its trial's limit): False when it has not by then. One that failed to start counts
        as up: its trial then finds it dead and says why.

        Raises:
            TrialCancelled: ``cancel`` was set meanwhile.
        """
        with selectors.DefaultSelector() as selector:
            selector.register(self.read_fd, selectors.EVENT_READ)
            while self.announcing:
                if cancel is not None and cancel.is_set():
                    raise TrialCancelled("a worker started ahead")
                now = time.monotonic()
                if now >= deadline:
                    return False
                if selector.select(timeout=min(MEMORY_SAMPLE_INTERVAL_S, deadline - now)):
                    self.read_imported()
                elif self.exited():
                    return True
        return True

    def start_spent(self) -> float:
        """The seconds of its start its next trial is charged: none once it has had a trial;
        for a worker started ahead, what its start took (so far, when it is not up)."""
        if self.used:
            return 0.0
        if self.up_s is not None:
            return self.up_s
        return time.monotonic() - self.spawned

    def stop_at_limit(self) -> None:
        """Its time is up: ask it for its threads' stacks (:data:`STACK_GRACE_S` at most),
        then kill it."""
        if self.closed:
            return
        self.stack = self._dump_stack()
        self.close()

    def _dump_stack(self) -> str | None:
        """What the worker writes to its log on :data:`STACK_SIGNAL` (faulthandler: every
        thread's Python stack, most recent call first); None when it cannot answer (it has
        exited or is stopped) or writes nothing within :data:`STACK_GRACE_S`."""
        import psutil

        try:
            if self.exited() or psutil.Process(self.proc.pid).status() == psutil.STATUS_STOPPED:
                return None
            start = size = os.fstat(self.log.fileno()).st_size
            os.kill(self.proc.pid, STACK_SIGNAL)
        except (OSError, psutil.Error):
            return None
        # The handler writes the whole dump at once; the log staying still a moment after it
        # grew says it is done.
        deadline = time.monotonic() + STACK_GRACE_S
        still_since = None
        while time.monotonic() < deadline and not self.exited():
            time.sleep(_STACK_QUIET_S / 4)
            now_size = os.fstat(self.log.fileno()).st_size
            if now_size != size:
                size, still_since = now_size, time.monotonic()
            elif still_since is not None and time.monotonic() - still_since >= _STACK_QUIET_S:
                break
        if size == start:
            return None
        try:
            # pread: the worker shares this file's offset, which must not move under it.
            text = os.pread(self.log.fileno(), size - start, start).decode(errors="replace")
        except OSError:
            return None
        return text.strip() or None

    def send(self, payload: dict[str, Any]) -> None:
        """Write one trial's payload, one line, to the worker's stdin."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died at once; the log says why

    def exited(self) -> bool:
        return has_exited(self.proc)

    def close(self) -> tuple[int, str]:
        """Kill the worker's whole group, reap it; returns its exit status and log tail (the
        same again when called again)."""
        if self.closed:
            return self._ended or (self.proc.returncode or 0, "")
        self.closed = True
        # The whole group, even when the worker itself has exited: a process the model
        # forked may still be running. Not yet reaped, so the group id is still ours.
        kill_group(self.proc)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        os.close(self.read_fd)
        returncode = self.proc.wait()
        with LIVE_LOCK:
            LIVE.discard(self.proc)
        self.lived_s = time.monotonic() - self.spawned
        log_tail = read_tail(self.log)
        self.log.close()
        self._ended = (returncode, log_tail)
        return self._ended


def kill_group(proc: WorkerHandle) -> None:
    """Kill the worker and anything it started (it leads its own process group).

    Until the worker is reaped its pid, and so its group id, cannot be reused, so this is safe
    to call after the worker has exited but before ``wait``: that is when a child the model
    forked is still to be ended.
    """
    if proc.returncode is not None:  # reaped: the id may belong to someone else by now
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def has_exited(proc: WorkerHandle) -> bool:
    """Whether the worker has exited, without reaping it (so its group can still be killed)."""
    return proc.returncode is not None or proc.exited()


def read_tail(fh: IO[bytes]) -> str:
    try:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - _LOG_TAIL_CHARS))
        return fh.read().decode(errors="replace")
    except OSError:
        return ""
