"""The test suite's fork server: a process that imports what a trial worker imports (the
backend's framework, Keras, the worker's modules) once, then forks a worker for each trial that
asks, so that the worker skips the interpreter's start and the imports (2-3 s of CPU time for
TensorFlow or PyTorch, about 1 for JAX). :mod:`forkserver.client` is the runner's side, plugged
into mptune through its launcher seam (:mod:`tuner.trials.launcher`) by tests/conftest.py.

``python -m forkserver.server --control-fd N`` (tests/ on ``PYTHONPATH``): the server reads
requests from the control socket (``SOCK_SEQPACKET``: one message a request, with its
descriptors) and writes one ``up`` message once its imports are done. End-of-file on the
socket (the runner closed it or died) ends it, as does end-of-file on its stdin, its lifeline.

For each request it forks a *keeper*, which forks the *worker* and stays its parent: the worker
leads a session of its own (as ``start_new_session`` does), takes the request's descriptors as
its stdin, log and channel, its environment (and the suite's fault switches it sets:
:func:`faults.install`), and runs :func:`tuner.worker.main.main`. The
keeper writes the worker's pid to the request's status socket, then its exit status once it
has exited, without reaping it (``WNOWAIT``), so that its process group stays the runner's to
kill; it reaps the worker when the runner closes the status socket. Nothing is imported or
initialised here that starts a framework's runtime: the worker configures its device after
the fork, as a fresh one does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

from forkserver.client import (
    MAX_REQUEST_BYTES,
    REQUEST_FDS,
    UNCOUNTED_WORDS,
    UP_MESSAGE,
    status_mb,
    untouched_file_mb,
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m forkserver.server")
    parser.add_argument("--control-fd", type=int, required=True)
    args = parser.parse_args(argv)
    control = socket.socket(fileno=args.control_fd)
    # Its stdin is its lifeline: end-of-file (the runner closed it or died) ends it at once,
    # even while it imports. The keepers and workers it forked do not have this thread.
    threading.Thread(target=_lifeline, name="mptune-fork-lifeline", daemon=True).start()
    from tuner.worker.main import import_frameworks

    error = import_frameworks()
    if error is not None:
        # A worker forked from here would only report it: the runner starts its own instead.
        print(f"mptune fork server: the imports failed: {error!r}", file=sys.stderr)
        return 1
    # Keepers are reaped by the kernel; each keeper sets this back for its worker.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    control.sendall(UP_MESSAGE)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, REQUEST_FDS)
        except OSError:
            return 0
        if not message:
            return 0  # the runner closed its end or died
        if len(fds) != REQUEST_FDS:
            for fd in fds:
                os.close(fd)
            continue
        request = json.loads(message)
        request["file_mb"] = status_mb("RssFile")  # what its worker shares of its own
        if os.fork() == 0:
            control.close()
            _keeper(request, fds)  # never returns
        for fd in fds:
            os.close(fd)


def _lifeline() -> None:
    with contextlib.suppress(OSError):
        while os.read(0, 1 << 10):
            pass
    os._exit(0)


def _keeper(request: dict[str, Any], fds: list[int]) -> None:
    """The forked keeper: fork the worker, report its pid and exit status, reap it when the
    runner lets go. Ends the process."""
    stdin_fd, log_fd, channel_fd, status_fd = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    status = socket.socket(fileno=status_fd)
    session_read, session_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status.close()
        os.close(session_read)
        os.setsid()
        os.close(session_write)  # it leads its group now: the runner may kill the group
        _worker(request, stdin_fd, log_fd, channel_fd)  # never returns
    for fd in (stdin_fd, log_fd, channel_fd, session_write):
        os.close(fd)
    os.read(session_read, 1)  # end-of-file once the worker has its own session (or died)
    os.close(session_read)
    try:
        status.sendall(f"pid {pid} {os.getpid()}\n".encode())
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert info is not None  # None only with WNOHANG
        code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        status.sendall(f"exit {code}\n".encode())
        while status.recv(64):
            pass  # until the runner closes it: it has killed the group, the pid may go
    except OSError:
        pass
    finally:
        # The worker is gone or going: its lifeline (stdin) ends it when the runner is gone.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os._exit(0)


def _worker(request: dict[str, Any], stdin_fd: int, log_fd: int, channel_fd: int) -> None:
    """The forked worker: its own session, the request's descriptors and environment, then
    the worker's loop, as ``python -m tuner.worker`` runs it. Ends the process."""
    code = 1
    try:
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        keep = {0, 1, 2, channel_fd}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        import faults

        faults.install()  # the suite's fault switches, where the environment sets one
        from tuner.worker import training

        file_mb = request.get("file_mb")
        training.UNCOUNTED_RSS = (lambda: untouched_file_mb(file_mb), UNCOUNTED_WORDS)
        from tuner.worker.main import main as worker_main
        from tuner.worker.main import note_start

        argv = ["--channel-fd", str(channel_fd), *request["args"]]
        import tuner.worker

        worker_dir = os.path.dirname(tuner.worker.__file__)
        sys.argv = [os.path.join(worker_dir, "__main__.py"), *argv]
        note_start()
        code = worker_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - said in the log, as a fresh worker's would be
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
