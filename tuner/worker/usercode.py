"""Calling into the user's code, and blaming it precisely when it fails."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UserCodeError(Exception):
    """The user's model, data or code failed. ``location`` is their ``file:line``."""

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its class and the first line of its message."""
    text = str(exc).strip().splitlines()
    line = text[0].strip() if text else ""
    if len(line) > limit:
        line = line[: limit - 3] + "..."
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
