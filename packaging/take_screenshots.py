"""Open the app, run a short real search, and save screenshots of what a user sees.

Run it with a display (packaging/screenshots.sh starts Xvfb for it):

    python packaging/take_screenshots.py docs/screenshots

It uses settings and a session database of its own, so it changes nothing of the user's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings, QTimer
from PySide6.QtWidgets import QApplication

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.qt_main_window import QtMainWindow  # noqa: E402
from tuner.resources import read_asset  # noqa: E402

MODEL = "builtin:cnn:image_size=16,filters=8,dense=32"


def wait(condition, timeout_s: float) -> None:
    """Run the event loop until ``condition()`` holds (or the timeout passes)."""
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(50)
    timer.timeout.connect(lambda: loop.quit() if condition() else None)
    timer.start()
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    timer.stop()


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyleSheet(read_asset("style.qss"))
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(f"{tmp}/settings.ini", QSettings.Format.IniFormat)
        settings.setValue("storage", f"sqlite:///{tmp}/sessions.db")
        window = QtMainWindow(settings=settings)
        window.resize(1400, 900)
        window.show()
        wait(lambda: window.profile is not None, 10)
        window.setup.set_model(MODEL)
        window.setup.batch_min.setValue(8)
        window.setup.batch_max.setValue(128)
        window.setup.measure_seconds.setValue(1.0)
        window.start_search()
        wait(lambda: window.table.trials.rowCount() >= 4, 300)
        window.grab().save(str(out / "searching.png"))
        # Stopped mid-trial and resumed, as a user would: the stopped trial keeps its row, the
        # memory plot goes on after a gap, the counts add up.
        window.stop_search()
        wait(lambda: window.finished_status is not None, 30)
        wait(window.start_button.isEnabled, 10)  # reads Resume once the search thread ended
        window.start_search()
        wait(lambda: window.finished_status not in (None, "stopped"), 600)
        window.tabs.setCurrentWidget(window.recommendation)
        wait(lambda: False, 0.5)
        window.grab().save(str(out / "recommendation.png"))
        window.tabs.setCurrentWidget(window.table)
        window.table.selectRow(0)
        wait(lambda: False, 0.5)
        window.grab().save(str(out / "trials.png"))
        window.open_export("snippet")  # read off the GUI thread: the dialog comes later
        wait(lambda: window.export_dialog is not None and bool(window.export_dialog.text()), 30)
        if window.export_dialog is not None:
            window.export_dialog.grab().save(str(out / "export.png"))
            window.export_dialog.close()
        window.resize(900, 600)
        wait(lambda: False, 0.5)
        window.grab().save(str(out / "small-window.png"))
        status = window.finished_status
        window.close()
    print(f"search {status}; screenshots in {out}")
    return 0 if status == "done" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots"))
