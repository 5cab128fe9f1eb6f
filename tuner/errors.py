"""Errors that reach the user as one line.

Anything raised as :class:`MptuneError` is the user's input being wrong (a missing file, a bad
flag, a model file without ``build_model``): the CLI prints ``mptune: <message>`` and exits with
:data:`EXIT_BAD_INPUT`. Everything else is a bug in mptune and keeps its traceback.
"""

from __future__ import annotations

import threading

#: Exit status for a run that worked.
EXIT_OK = 0
#: Exit status for a trial that ran but did not end ``ok`` (oom, diverged, timeout, crashed).
EXIT_TRIAL_FAILED = 1
#: Exit status for bad input: a wrong flag, a broken model file, a corrupt config.
EXIT_BAD_INPUT = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


class MptuneError(Exception):
    """A problem with the user's input, worded for the user.

    Args:
        message: one line naming the problem.
        location: ``file:line`` in the user's code where there is one.
    """

    #: The CLI's exit status for this error.
    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class Terminated(KeyboardInterrupt):
    """The process was asked to end by a signal (SIGTERM, SIGHUP): raised like Ctrl-C's
    KeyboardInterrupt, so that the same clean-up runs (the worker killed, the running trial
    closed in the store), and the CLI exits with 128 + the signal's number, as shells expect.
    """

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopRequest(threading.Event):
    """A cancel event that remembers what set it.

    The CLI's handlers for SIGINT, SIGTERM and SIGHUP set it instead of raising at once: Python
    delivers a signal's exception wherever the main thread happens to be, and when that is a
    finalizer or a weakref callback (a database connection being collected) the exception is
    printed as "ignored" and lost, and the search runs on. The event is never lost: the running
    trial sees it at its next poll (a quarter of a second) and the search before its next
    trial. ``by`` is the exception the signal stands for, so that a stopped trial's note and the
    exit status still name it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.by: KeyboardInterrupt | None = None

    def stop(self, by: KeyboardInterrupt) -> None:
        """Set the event; the first stop's reason is kept."""
        if self.by is None:
            self.by = by
        self.set()

    def reset(self) -> None:
        self.by = None
        self.clear()
