"""How the runner starts a trial worker's process: one small interface, :class:`Launcher`, and
the product's implementation, :class:`SpawnLauncher`, a fresh interpreter for each worker
(``python -m tuner.worker``, its own session and process group).

``MPTUNE_LAUNCHER=module:attr`` (:data:`LAUNCHER_ENV`) names another: ``attr`` of the
importable ``module``, called with no arguments, returns the :class:`Launcher` every worker of
this process starts through. It is the one extension point for starting workers otherwise;
mptune ships no other. The test suite plugs in a fork server through it
(tests/launchers/forkserver/: workers forked from a process that did the framework's imports
once), so that what it changes is named in one place and tests marked ``product_launcher`` run
through the product's own.

A launcher may start a worker by any means that keeps what the runner relies on of a child
process (:class:`WorkerHandle`): its pid leads a process group the runner may kill until it
has waited for it, its stdin is the worker's lifeline and trial channel, its exit status is
the worker's. Where the worker's resident memory does not count pages a fresh process would
hold (a forked one shares its parent's), :meth:`WorkerHandle.uncounted_mb` says how many,
and the worker adds them to its peak alike (:data:`tuner.worker.training.UNCOUNTED_RSS`).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Protocol

from tuner.errors import MptuneError

#: ``module:attr``: a callable returning the :class:`Launcher` to use (see the module).
LAUNCHER_ENV = "MPTUNE_LAUNCHER"


class LauncherError(MptuneError):
    """:data:`LAUNCHER_ENV` names nothing that returns a launcher (the user's setting: one
    line, exit status 2)."""


class WorkerHandle(Protocol):
    """A started worker's process, as the runner uses it (what it uses of a
    ``subprocess.Popen``, and two questions a launcher answers for its own processes)."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | None: ...

    def wait(self) -> int:
        """Wait for the worker's exit and reap it; its exit status (``-N``: signal N)."""
        ...

    def exited(self) -> bool:
        """Whether the worker has exited, without reaping it (its group can still be killed)."""
        ...

    def uncounted_mb(self) -> float:
        """Resident memory a fresh worker would hold that this one's ``VmRSS`` leaves out."""
        ...


class Launcher(Protocol):
    """Starts trial workers (see the module)."""

    def launch(
        self, env: dict[str, str], args: list[str], log_fd: int, channel_fd: int
    ) -> WorkerHandle:
        """Start a worker with this environment and these arguments of ``tuner.worker``: its
        stdin a pipe (the handle's), its stdout and stderr ``log_fd``, its event channel
        ``channel_fd`` (``--channel-fd``), leading a session of its own."""
        ...

    def prepare(
        self,
        envs: Sequence[dict[str, str]],
        deadline: float,
        cancel: threading.Event | None,
    ) -> Callable[[], None]:
        """Get ready to start workers of these environments, within ``deadline``
        (``time.monotonic``) and while ``cancel`` stays clear (a search calls it before its
        first trial); returns what ends what it started, called when the search's pool ends."""
        ...


class SpawnedWorker(subprocess.Popen[bytes]):
    """A worker started afresh: a child process of this one."""

    def exited(self) -> bool:
        if self.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def uncounted_mb(self) -> float:
        return 0.0  # a process of its own holds all it loaded


#: The module a worker runs (``python -m``): the worker's entry point.
WORKER_MODULE = "tuner.worker"


class SpawnLauncher:
    """The product's launcher: a fresh ``python -m tuner.worker`` for each worker.

    ``module`` names another module to run instead, one that ends by running the worker's
    entry point (:data:`WORKER_MODULE`) with the arguments it was given: a worker started
    the same way, with something done first (the test suite's faults, tests/launchers/faults.py)."""

    def __init__(self, module: str = WORKER_MODULE) -> None:
        self.module = module

    def launch(
        self, env: dict[str, str], args: list[str], log_fd: int, channel_fd: int
    ) -> WorkerHandle:
        return SpawnedWorker(
            [sys.executable, "-m", self.module, "--channel-fd", str(channel_fd), *args],
            stdin=subprocess.PIPE,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            pass_fds=(channel_fd,),
            env=env,
            start_new_session=True,  # its own process group: Ctrl-C reaches us, not it
        )

    def prepare(
        self,
        envs: Sequence[dict[str, str]],
        deadline: float,
        cancel: threading.Event | None,
    ) -> Callable[[], None]:
        return _nothing  # each worker imports for itself


def _nothing() -> None:
    pass


SPAWN = SpawnLauncher()
_NAMED: dict[str, Launcher] = {}
_LOCK = threading.Lock()


def current() -> Launcher:
    """The launcher this process starts workers through: :data:`LAUNCHER_ENV`'s, else
    :data:`SPAWN`. Read at each start, so that a change of the variable takes effect.

    Raises:
        LauncherError: the variable names no importable callable returning a launcher.
    """
    name = os.environ.get(LAUNCHER_ENV, "").strip()
    if not name:
        return SPAWN
    with _LOCK:
        if name not in _NAMED:
            _NAMED[name] = _load(name)
        return _NAMED[name]


def _load(name: str) -> Launcher:
    module_name, _, attr = name.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr) if attr else None
    except (ImportError, AttributeError) as exc:
        raise LauncherError(
            f"{LAUNCHER_ENV}={name!r} names no launcher ({type(exc).__name__}: {exc})"
        ) from None
    if not callable(factory):
        raise LauncherError(
            f"{LAUNCHER_ENV}={name!r} names no launcher: it takes module:attr, a callable "
            "that returns one"
        )
    launcher = factory()
    if not (hasattr(launcher, "launch") and hasattr(launcher, "prepare")):
        raise LauncherError(f"{LAUNCHER_ENV}={name!r} returned no launcher: {launcher!r}")
    return launcher  # type: ignore[no-any-return]
