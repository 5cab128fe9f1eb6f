"""The window's engine calls: `Controller.wait` ends only when their threads have ended."""

from __future__ import annotations

import threading

from app.controller import Controller


def test_wait_is_true_only_once_the_thread_itself_has_ended(qtbot, monkeypatch) -> None:
    """A call is off the books before its thread returns (so that the window's last callback
    sees the controller idle); a wait that ended there left a live thread behind, which a CI
    run's leftover check caught ("mptune-measured-here-4")."""
    release = threading.Event()
    handed_over = threading.Event()
    run = Controller._run

    def run_then_linger(self: Controller, *args: object) -> None:
        run(self, *args)  # type: ignore[arg-type]
        handed_over.set()
        release.wait(30)  # the thread lives on after the result was handed over

    monkeypatch.setattr(Controller, "_run", run_then_linger)
    controller = Controller()
    values: list[int] = []
    controller.call(lambda: 7, values.append, name="linger")
    assert handed_over.wait(10)
    assert not controller.busy
    assert controller.wait(0.05) is False, "wait said done while the call's thread was alive"
    release.set()
    assert controller.wait(10)
    assert not any(t.name.startswith("mptune-linger") for t in threading.enumerate())
    qtbot.waitUntil(lambda: values == [7])
