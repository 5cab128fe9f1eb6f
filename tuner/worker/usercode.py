"""Calling into the user's code, and blaming it precisely when it fails."""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UserCodeError(Exception):
    """The user's model, data or code failed. ``location`` is their ``file:line``."""

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class PolicyFailure(Exception):
    """The model fails under the trial's policy, and float32 runs the same batch."""


class InternalError(Exception):
    """mptune's own code failed: a bug in mptune, never the user's to fix (the trial is
    reported as crashed, its traceback kept for a report)."""


#: The folder of mptune's engine: an exception raised in a frame there is mptune's own.
_ENGINE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def raised_by_mptune(exc: BaseException) -> bool:
    """Whether mptune's own code failed: an :class:`InternalError`, or an exception whose
    innermost frame is in mptune's engine (a bug there, not a failure of the model it ran)."""
    if isinstance(exc, InternalError):
        return True
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    return bool(frames) and os.path.realpath(frames[-1].filename).startswith(_ENGINE + os.sep)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\](\s*name:.*)?$")
_NODE = re.compile(r"Detected at node (\S+)")
_CALLING = re.compile(r"Exception encountered when calling (\S+?)\.?$")
#: Lines of a TensorFlow or Keras error message that frame the error instead of stating it.
_FRAMING = (
    "Graph execution error",
    "Detected at node",
    "Exception encountered when calling",
    "Arguments received by",
    "Stack trace for op definition",
    "Traceback (most recent call last)",
    'File "',
    "[[",
    "\u2022",
)


def meaningful_line(exc: BaseException, limit: int = 300) -> str:
    """The line of an exception's message that says what went wrong.

    TensorFlow's graph-execution errors start with ``Graph execution error:`` and a stack of
    op definitions, and state the error last (``indices[3,17] = 20000 is not in [0, 20000)``);
    Keras wraps errors raised in a layer in ``Exception encountered when calling X.call()``.
    For those the stated error is taken, with where it happened; any other message gives its
    first line.
    """
    text = _ANSI.sub("", str(exc)).strip()
    lines = text.splitlines()
    framed = bool(lines) and lines[0].strip().startswith(_FRAMING)
    if not framed:
        return lines[0].strip() if lines else ""
    stated = []
    for raw in lines:
        if not raw.strip() or raw[:1] in (" ", "\t"):
            continue  # blank, or a frame or source line of a traceback
        line = _OP_SUFFIX.sub("", _FUNCTION_NODE.sub("", raw.strip())).strip()
        if line and not line.startswith(_FRAMING):
            stated.append(line)
    if not stated:
        return lines[0].strip()
    where = ""
    node = _NODE.search(text)
    calling = _CALLING.search(lines[0].strip())
    if node:
        where = f" (at {'/'.join(node.group(1).split('/')[-3:])})"
    elif calling:
        where = f" (in {calling.group(1)})"
    line = stated[-1] + where
    return line[: limit - 3] + "..." if len(line) > limit else line


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its class and the line of its message that states the error
    (:func:`meaningful_line`)."""
    line = meaningful_line(exc, limit)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def user_location(exc: BaseException, path: str | None, shown_as: str | None = None) -> str | None:
    """The innermost traceback frame in the user's file, as ``file:line``."""
    if not path:
        return None
    target = os.path.realpath(path)
    found = None
    tb = exc.__traceback__
    for frame in traceback.extract_tb(tb) if tb else ():
        if os.path.realpath(frame.filename) == target:
            found = frame.lineno
    if (
        found is None
        and isinstance(exc, SyntaxError)
        and exc.filename
        and os.path.realpath(exc.filename) == target
    ):
        found = exc.lineno
    if found is None:
        return None
    return f"{shown_as or os.path.basename(path)}:{found}"


def call_user(fn: Callable[[], T], what: str, path: str | None, shown_as: str | None = None) -> T:
    """Run ``fn``; turn anything it raises into a :class:`UserCodeError` naming ``what``.

    Out-of-memory errors pass through untouched: they are a trial outcome, not a bug.
    """
    try:
        return fn()
    except MemoryError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "ResourceExhaustedError":
            raise
        raise UserCodeError(
            f"{what} failed: {first_line(exc)}", user_location(exc, path, shown_as)
        ) from exc
