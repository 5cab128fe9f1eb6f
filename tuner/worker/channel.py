"""The worker's ends of its two pipes to the parent: the event channel and the lifeline."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from typing import Any

from tuner.trials.events import TOKEN_FIELD, encode_event


class Channel:
    """Writes events as JSON lines to the pipe the parent gave us; never to stdout.

    Every line carries the trial's token, which the parent sent on the worker's stdin: a line
    the user's code writes to this descriptor (it is inherited, and its number is on the command
    line) has no token, and the parent ignores it.
    """

    def __init__(self, fd: int, token: str = "") -> None:
        self._fd = fd
        self._token = token
        self._t0 = time.monotonic()

    def next_trial(self, token: str) -> None:
        """A warm worker's next trial: its lines carry that trial's token."""
        self._token = token
        self._t0 = time.monotonic()

    def emit(self, type_: str, **fields: Any) -> None:
        event = {"type": type_, "t": round(time.monotonic() - self._t0, 4), **fields}
        if self._token:
            event[TOKEN_FIELD] = self._token
        view = memoryview(encode_event(event))
        while view:  # a pipe write can be partial when the parent is slow to read
            written = os.write(self._fd, view)
            view = view[written:]

    def send(self, message: Any) -> None:
        """A typed message (:mod:`tuner.trials.messages`), in its wire form, timed now."""
        fields = {k: v for k, v in message.to_dict().items() if k not in ("type", "t")}
        self.emit(message.type, **fields)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Lifeline:
    """End this worker's whole process group when the parent goes away; hand on the specs the
    parent sends for more trials.

    The parent keeps the write end of our stdin open for as long as it wants the worker to live
    and never hands that end to anyone else, so end-of-file on it means the parent closed it or
    died (by any signal, SIGKILL included: the kernel closes a dead process's descriptors). The
    descriptor is moved off fd 0 first, and fd 0 becomes ``/dev/null``, so the user's code
    cannot read from it. The worker leads its own process group, so the kill takes the model's
    own child processes (data loaders, a forked helper) with it. A warm worker reads its next
    trial's spec, one JSON line, from the same pipe (:meth:`next_line`).
    """

    def __init__(self, fd: int = 0) -> None:
        self._lifeline = os.dup(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, fd)
        os.close(null)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self.thread = threading.Thread(target=self._watch, name="mptune-lifeline", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        pending = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(self._lifeline, 1 << 16):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._lines.put(line)
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(0), signal.SIGKILL)
        os._exit(1)  # not in a group of our own (run by hand): at least end ourselves

    def next_line(self) -> bytes:
        """The parent's next line; blocks (the parent going away ends the process instead)."""
        return self._lines.get()


def hold_lifeline(fd: int = 0) -> Lifeline:
    """Start the :class:`Lifeline` on ``fd`` (the worker's stdin)."""
    return Lifeline(fd)
