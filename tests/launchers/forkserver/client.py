"""The test suite's launcher (:mod:`tuner.trials.launcher`'s seam): workers forked from a fork
server instead of started afresh. This is the runner's side of :mod:`forkserver.server`;
tests/conftest.py names :func:`forkserver.launcher` in ``MPTUNE_LAUNCHER`` for the pytest
process and every mptune it runs, and a test marked ``product_launcher`` runs without it.

A fresh worker spends most of its start importing: TensorFlow about 2.3 s of CPU time, PyTorch
3.4, JAX 1.4, each time. A fork server imports them once for an environment (the backend and
every variable but mptune's own ``MPTUNE_*``, which the worker reads only while it runs) and
forks a worker per trial in milliseconds. The forked worker is the same program from its
first line on: its own process group, the same stdin lifeline, log and event channel, the
trial's whole environment, the device configured after the fork, as a fresh worker does.

A search starts one per environment before its first trial (``Launcher.prepare``, from
``WorkerPool.start_ahead``) and waits until it is up; its workers started ahead and every
later fresh worker of the search (a policy's worker ended by a failure, a probe trial's, one
past the warm workers kept) fork from it. In the pytest process a worker whose environment was
seen before starts one for the next too (:data:`EAGER`).

Not the product's: on the CPU a trial's peak memory is its process's resident memory, and a
forked worker holds only the shared libraries' pages it touches again, where a fresh process,
as the user's training, holds all it loaded. The worker adds back its server's file pages it
did not touch (``training.UNCOUNTED_RSS``): on TensorFlow within 2% of a fresh worker's peak
(690 against 703 MB, ``builtin:mlp``), but on JAX, whose backend loads its pages in the
worker, 12-27% low (305 against 348 MB). docs/trials.md says why mptune's users keep spawn.

On the CPU only (``CUDA_VISIBLE_DEVICES=-1``), and on Linux: a fork after importing the
frameworks (no runtime initialised, no device touched) ran TensorFlow, JAX and PyTorch trials
alike on the CPU; a worker on a GPU starts afresh (:class:`tuner.trials.launcher.SpawnLauncher`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import faults

from tuner.trials.launcher import WorkerHandle

#: What the fork server writes on its control socket once its imports are done.
UP_MESSAGE = b"up"
#: The descriptors a request carries: the worker's stdin (read end), its log, its event
#: channel (write end) and the status socket its keeper reports on.
REQUEST_FDS = 4
MAX_REQUEST_BYTES = 1 << 20
#: What a forked worker's peak memory method adds (``training.UNCOUNTED_RSS``).
UNCOUNTED_WORDS = (
    "with its fork server's shared-library pages it did not touch again, as a fresh worker "
    "holds them"
)
#: The folder that holds this package: on the fork server's ``PYTHONPATH``.
TESTS_DIR = str(Path(__file__).resolve().parents[1])
#: Fork servers kept at once (one per environment; the least recently used goes first).
MAX_SERVERS = 3
#: A server that used no CPU time for this long while it imports is stalled (as a worker is,
#: :data:`tuner.trials.process.STALL_S`): its workers start afresh instead.
STALL_S = 2.0
_POLL_S = 0.25
#: How long a fork request may take to name its worker before the server counts as broken.
_FORK_ANSWER_S = 10.0


class ForkedProcess:
    """A worker forked by a fork server, with what the runner uses of a ``subprocess.Popen``:
    its ``pid``, ``stdin``, ``returncode`` (set by :meth:`wait`), :meth:`wait` and
    :meth:`exited` (without reaping it, so that its process group can still be killed)."""

    def __init__(
        self,
        pid: int,
        keeper: int,
        stdin: IO[bytes],
        status: socket.socket,
        pending: bytes,
        server_file_mb: float | None = None,
    ) -> None:
        self.pid = pid
        self.keeper = keeper
        #: the server's resident file-backed memory when it forked this worker (see
        #: :meth:`uncounted_mb`)
        self.server_file_mb = server_file_mb
        self.stdin: IO[bytes] | None = stdin
        self.returncode: int | None = None
        self._status = status
        self._pending = pending
        self._code: int | None = None
        self._parse()

    def _parse(self) -> None:
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            if line.startswith(b"exit "):
                self._code = int(line.split()[1])

    def _read(self, block: bool) -> None:
        if self._code is not None:
            return
        if not block and not select.select([self._status], [], [], 0)[0]:
            return
        try:
            data = self._status.recv(256)
        except OSError:
            data = b""
        if not data:  # its keeper is gone without a word: the worker went with it
            self._code = -signal.SIGKILL
            return
        self._pending += data
        self._parse()

    def uncounted_mb(self) -> float:
        """What a fresh worker would hold resident beside this one's own resident memory: its
        server's file-backed pages (the shared libraries) it has not touched again. A forked
        process counts only those it touched; a fresh one, and the user's training process,
        hold them all (0.3-0.4 GB on TensorFlow). The worker adds it to its peak alike."""
        return untouched_file_mb(self.server_file_mb, self.pid)

    def exited(self) -> bool:
        """Whether the worker has exited (it stays unreaped until :meth:`wait`). Its keeper
        reports the exit a moment after it: a worker seen to have ended already is waited
        for, so that this agrees with the process's state as a child's would."""
        self._read(block=False)
        if self._code is None and _ended(self.pid):
            self.wait_status()
        return self._code is not None

    def wait_status(self) -> None:
        """Block until the keeper has reported the worker's exit."""
        while self._code is None:
            self._read(block=True)

    def wait(self) -> int:
        """Wait for the worker's exit, let its keeper reap it; its exit status (``-N``:
        ended by signal N)."""
        self.wait_status()
        if self.returncode is None:
            assert self._code is not None
            self.returncode = self._code
            self._status.close()
            _wait_gone(self.keeper)  # it reaps the worker now: both are gone on return
        return self.returncode


class ForkServer:
    """One fork server process for one environment."""

    def __init__(self, env: dict[str, str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forkserver.server",
                    "--control-fd",
                    str(theirs.fileno()),
                ],
                stdin=subprocess.PIPE,  # its lifeline: held open until it is closed
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env={
                    **env,
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (TESTS_DIR, env.get("PYTHONPATH")) if p
                    ),
                },
                start_new_session=True,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.control = mine
        self.up = False
        self.broken = False
        self._lock = threading.Lock()

    def is_up(self, timeout: float = 0.0) -> bool:
        """Whether its imports are done and it takes requests (waits ``timeout`` at most)."""
        with self._lock:
            if self.broken:
                return False
            if not self.up and select.select([self.control], [], [], timeout)[0]:
                try:
                    self.up = self.control.recv(64) == UP_MESSAGE
                except OSError:
                    self.up = False
                self.broken = not self.up
            if self.up and self.proc.poll() is not None:
                self.broken, self.up = True, False
            return self.up

    def fork(
        self, env: dict[str, str], args: list[str], log_fd: int, channel_fd: int
    ) -> ForkedProcess:
        """Fork a worker with this environment, arguments, log and channel.

        Raises:
            OSError: the server did not answer (it is then marked broken).
        """
        stdin_read, stdin_write = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"env": env, "args": args}).encode()
        try:
            with self._lock:
                socket.send_fds(
                    self.control, [request], [stdin_read, log_fd, channel_fd, theirs.fileno()]
                )
            pid, keeper, pending = _read_pid(mine)
        except OSError:
            self.broken = True
            os.close(stdin_write)
            mine.close()
            raise
        finally:
            os.close(stdin_read)
            theirs.close()
        file_mb = status_mb("RssFile", self.proc.pid)
        return ForkedProcess(pid, keeper, os.fdopen(stdin_write, "wb"), mine, pending, file_mb)

    def close(self) -> None:
        """End the server. Not its group: each keeper in it stays until its worker is done."""
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def status_mb(field: str, pid: int | str = "self") -> float | None:
    """A memory field of ``/proc/<pid>/status`` (``VmHWM``, ``RssFile``...) in MB; None where
    there is none. The worker's own (``tuner.worker.training.status_mb``) again: this side runs
    in the runner's process, which must not import the worker's floor (Keras, a framework)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def untouched_file_mb(server_file_mb: float | None, pid: int | str = "self") -> float:
    """Of a fork server's resident file-backed memory when it forked worker ``pid``, what the
    worker has not touched again (0 for a worker not forked): what a fresh worker would hold
    resident beside what this one holds."""
    if server_file_mb is None:
        return 0.0
    return max(0.0, server_file_mb - (status_mb("RssFile", pid) or 0.0))


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie, or no longer there)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")


def _wait_gone(pid: int, within: float = 5.0) -> None:
    """Wait until process ``pid`` (not our child) has ended, ``within`` seconds at most."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return  # gone already, or no pidfd here
    try:
        select.select([fd], [], [], within)
    finally:
        os.close(fd)


def _read_pid(status: socket.socket) -> tuple[int, int, bytes]:
    """The worker's and its keeper's pids, the keeper's first line, and what came after it."""
    data = b""
    deadline = time.monotonic() + _FORK_ANSWER_S
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([status], [], [], left)[0]:
            raise OSError("the fork server did not answer")
        chunk = status.recv(256)
        if not chunk:
            raise OSError("the fork server's keeper ended without a worker")
        data += chunk
    line, rest = data.split(b"\n", 1)
    if not line.startswith(b"pid "):
        raise OSError(f"the fork server said {line!r}")
    _, pid, keeper = line.split()
    return int(pid), int(keeper), rest


_SERVERS: dict[str, ForkServer] = {}
_LOCK = threading.Lock()


#: In this process, a worker that finds no server up for its environment starts one too, for
#: the next, from the second worker of that environment on (the test suite sets it: hundreds
#: of single trials, none of them timed; an environment seen once, a test's own variable, would
#: only push a used server out). Off, only a search's workers started ahead start servers.
EAGER = False
_SEEN: set[str] = set()


def mode(env: dict[str, str]) -> str:
    """``on`` or ``off``: whether a worker with this environment forks (see the module)."""
    if not sys.platform.startswith("linux"):
        return "off"
    if env.get("CUDA_VISIBLE_DEVICES") != "-1":  # on a GPU: not yet checked on a device
        return "off"
    return "on"


#: Variables a fork server's environment need not match, besides mptune's own ``MPTUNE_*``:
#: read by no import, they change from call to call (pytest names the running test in one).
#: The forked worker is given the trial's whole environment all the same.
UNKEYED = frozenset({"PYTEST_CURRENT_TEST"})


def server_key(env: dict[str, str]) -> str:
    """What a fork server's environment must match: every variable but mptune's own and
    :data:`UNKEYED`."""
    return json.dumps(
        sorted((k, v) for k, v in env.items() if not k.startswith("MPTUNE_") and k not in UNKEYED)
    )


def start(
    envs: list[dict[str, str]], deadline: float, cancel: threading.Event | None = None
) -> list[ForkServer]:
    """A fork server for each of ``envs`` (where forking is on), waited for until up
    (:func:`wait_up`); returns those started here, which their caller ends (:func:`discard`):
    one that ran already is another owner's."""
    servers: list[ForkServer] = []
    started: list[ForkServer] = []
    for env in envs:
        with _LOCK:
            before = _SERVERS.get(server_key(env))
        server = prepare(env)
        if server is None or server in servers:
            continue
        servers.append(server)
        if server is not before:
            started.append(server)
    if servers:
        wait_up(servers, deadline, cancel)
    return started


def prepare(env: dict[str, str]) -> ForkServer | None:
    """Start a fork server for this environment unless one runs (or forking is off for it);
    returns it, up or still importing."""
    if mode(env) == "off":
        return None
    key = server_key(env)
    with _LOCK:
        server = _SERVERS.pop(key, None)
        if server is not None and (server.broken or server.proc.poll() is not None):
            server.close()
            server = None
        if server is None:
            server = ForkServer(env)
        _SERVERS[key] = server  # the most recently used last
        ended = []
        while len(_SERVERS) > MAX_SERVERS:
            ended.append(_SERVERS.pop(next(iter(_SERVERS))))
    for old in ended:
        old.close()
    return server


def ready(env: dict[str, str]) -> ForkServer | None:
    """The fork server to fork this environment's worker from: one that is up, else None
    (with :data:`EAGER`, one is started then, for the next worker)."""
    if mode(env) == "off":
        return None
    with _LOCK:
        server = _SERVERS.get(server_key(env))
    if server is not None and server.is_up():
        return server
    if EAGER and (server is None or server.broken):
        key = server_key(env)
        if key in _SEEN:
            prepare(env)
        _SEEN.add(key)
    return None


def wait_up(
    servers: list[ForkServer], deadline: float, cancel: threading.Event | None = None
) -> None:
    """Wait until each of ``servers`` is up, until ``deadline`` (``time.monotonic``) at most,
    and no longer than ``cancel`` stays clear; one that exits, makes no progress (no CPU time
    for :data:`STALL_S`: stopped, blocked on a driver) or is not up by then is ended."""
    import psutil

    waiting = {server: (-1.0, time.monotonic()) for server in servers}
    while waiting:
        now = time.monotonic()
        if now >= deadline or (cancel is not None and cancel.is_set()):
            break
        for server, (cpu, since) in list(waiting.items()):
            if server.is_up() or server.broken or server.proc.poll() is not None:
                del waiting[server]
                continue
            try:
                times = psutil.Process(server.proc.pid).cpu_times()
                used = times.user + times.system
            except psutil.Error:
                used = cpu
            if used > cpu:
                waiting[server] = (used, now)
            elif now - since >= STALL_S:
                del waiting[server]
        if waiting:
            controls = [s.control for s in waiting]
            select.select(controls, [], [], min(_POLL_S, max(0.0, deadline - now)))
    for server in servers:
        if not server.is_up():
            discard(server)


def discard(server: ForkServer) -> None:
    """End ``server`` and forget it."""
    with _LOCK:
        for key in [k for k, s in _SERVERS.items() if s is server]:
            del _SERVERS[key]
    server.close()


def server_pids() -> list[int]:
    """The fork servers' process ids (their keepers are their children)."""
    with _LOCK:
        return [s.proc.pid for s in _SERVERS.values()]


def close_all() -> None:
    """End every fork server (at exit)."""
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.close()


atexit.register(close_all)


class ForkLauncher:
    """The suite's :class:`tuner.trials.launcher.Launcher`: a worker forked from its
    environment's fork server when one is up, else started afresh by the product's (with the
    suite's fault entry where a fault switch is set: :func:`faults.spawner`)."""

    def launch(
        self, env: dict[str, str], args: list[str], log_fd: int, channel_fd: int
    ) -> WorkerHandle:
        server = ready(env)
        if server is not None:
            try:
                return server.fork(env, args, log_fd, channel_fd)
            except OSError:
                discard(server)
        return faults.spawner(env).launch(env, args, log_fd, channel_fd)

    def prepare(
        self, envs: Sequence[dict[str, str]], deadline: float, cancel: threading.Event | None
    ) -> Callable[[], None]:
        """A fork server for each environment, up (:func:`start`); those started here end
        with the caller's pool, one that ran already is left to its owner."""
        started = (
            start(list(envs), deadline, cancel) if any(mode(env) == "on" for env in envs) else []
        )

        def end() -> None:
            for server in started:
                discard(server)

        return end


LAUNCHER = ForkLauncher()
