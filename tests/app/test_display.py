"""``mptune gui`` where no window can open: one line and exit 2, never Qt's abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.main import display_problem

ROOT = Path(__file__).resolve().parents[2]


def installed(name: str) -> str | None:
    return f"lib{name}.so.0"


def missing(name: str) -> str | None:
    return None


def test_no_display_at_all() -> None:
    problem = display_problem({}, "linux", installed)
    assert problem is not None
    assert "DISPLAY" in problem
    assert "mptune tune" in problem
    # An empty variable is no display either, and naming xcb needs an X display.
    assert display_problem({"DISPLAY": ""}, "linux", installed) is not None
    problem = display_problem(
        {"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0"}, "linux", installed
    )
    assert problem is not None
    assert "DISPLAY is not set" in problem


def test_a_display_is_enough() -> None:
    assert display_problem({"DISPLAY": ":0"}, "linux", installed) is None
    assert display_problem({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":1"}, "linux", installed) is None


def test_wayland_needs_no_x_display_nor_xcb_cursor() -> None:
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux", missing) is None
    assert display_problem({"QT_QPA_PLATFORM": "wayland"}, "linux", missing) is None


@pytest.mark.parametrize("platform", ["offscreen", "minimal", "vnc:size=800x600", "wayland;xcb"])
def test_other_qt_platforms_are_left_to_qt(platform: str) -> None:
    assert display_problem({"QT_QPA_PLATFORM": platform}, "linux", missing) is None


def test_xcb_cursor_missing() -> None:
    looked_up: list[str] = []

    def find(name: str) -> str | None:
        looked_up.append(name)
        return None

    for env in ({"DISPLAY": ":0"}, {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}):
        problem = display_problem(env, "linux", find)
        assert problem is not None
        assert "\n" not in problem
        assert "xcb-cursor" in problem
        assert "libxcb-cursor0" in problem
        assert "mptune tune" in problem
    assert looked_up == ["xcb-cursor", "xcb-cursor"]


def test_only_linux_is_checked() -> None:
    for platform in ("darwin", "win32"):
        assert display_problem({}, platform, missing) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is Linux's")
def test_gui_without_a_display_says_so_on_one_line() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "gui"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mptune: error: no display")
    assert "mptune tune" in lines[0]
