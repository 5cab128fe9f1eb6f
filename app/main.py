"""Start the desktop application: ``mptune gui`` or ``python -m app``."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from tuner.errors import MptuneError
from tuner.resources import asset, asset_path

#: Said after every display problem: the CLI does everything the window does.
_INSTEAD = "on a machine without a desktop use mptune tune instead"


def _find_library(name: str) -> str | None:
    """``ctypes.util.find_library``, or the library's soname where the dynamic loader finds it
    anyway (an ``LD_LIBRARY_PATH`` directory that ``ldconfig`` does not list)."""
    found = ctypes.util.find_library(name)
    if found:
        return found
    soname = f"lib{name}.so.0"
    try:
        ctypes.CDLL(soname)
    except OSError:
        return None
    return soname


def display_problem(
    env: Mapping[str, str],
    platform: str,
    find_library: Callable[[str], str | None] = _find_library,
) -> str | None:
    """Why Qt could not open a window here, in one line, or ``None`` when it can try.

    Qt's xcb platform (the Linux default) aborts the process with a multi-line message when
    there is no X display or when the library xcb-cursor is missing; this says so first.

    Args:
        env: the environment (``os.environ``).
        platform: ``sys.platform``; only Linux is checked.
        find_library: ``ctypes.util.find_library`` or a stand-in.
    """
    if not platform.startswith("linux"):
        return None
    # QT_QPA_PLATFORM may list platforms to try in turn ("wayland;xcb"), each with options
    # after a colon; any platform but xcb (offscreen, wayland, vnc, ...) is Qt's to judge.
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    names = {part.split(":")[0].strip() for part in requested.split(";")} - {""}
    if names - {"xcb"}:
        return None
    x11, wayland = env.get("DISPLAY", "").strip(), env.get("WAYLAND_DISPLAY", "").strip()
    if names == {"xcb"} and not x11:
        return f"QT_QPA_PLATFORM is xcb but there is no X display (DISPLAY is not set); {_INSTEAD}"
    if not names and not x11 and not wayland:
        return (
            "no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set); "
            f"{_INSTEAD} (QT_QPA_PLATFORM=offscreen runs the window unseen)"
        )
    uses_xcb = names == {"xcb"} or not wayland  # unset: X11 unless a Wayland session is there
    if uses_xcb and find_library("xcb-cursor") is None:
        return (
            "Qt's X11 platform needs the library xcb-cursor, which is not installed "
            f"(on Debian or Ubuntu: apt install libxcb-cursor0); {_INSTEAD}"
        )
    return None


def run(argv: Sequence[str] | None = None) -> int:
    """Open the window and run the event loop; returns the exit status.

    Raises:
        MptuneError: there is no display to open the window on (see :func:`display_problem`).
    """
    from PySide6.QtWidgets import QApplication

    existing = QApplication.instance()
    if not isinstance(existing, QApplication):
        problem = display_problem(os.environ, sys.platform)
        if problem:
            raise MptuneError(problem)

    from PySide6.QtGui import QIcon

    from app.qt_main_window import QtMainWindow

    app = (
        existing if isinstance(existing, QApplication) else QApplication(list(argv or sys.argv[:1]))
    )
    app.setApplicationName("mptune")
    app.setOrganizationName("mptune")
    app.setWindowIcon(QIcon(str(asset_path("mptune.svg"))))
    style = asset("style.qss")
    if style.is_file():
        app.setStyleSheet(style.read_text(encoding="utf-8"))
    window = QtMainWindow()
    window.show()
    code = int(app.exec())
    # The window closed at once (it never waits); an engine call still under way (an export
    # being written, a session being read or pruned) and the search thread, its worker already
    # killed, get a few seconds to end before the interpreter cuts their daemon threads short.
    window.controller.wait(EXIT_GRACE_S)
    window.bridge.wait(EXIT_GRACE_S)
    return code


#: How long the process waits at exit for the window's calls and search thread to end.
EXIT_GRACE_S = 5.0
