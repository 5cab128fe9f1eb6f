"""Start the desktop application: ``mptune gui`` or ``python -m app``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tuner.resources import asset, asset_path


def run(argv: Sequence[str] | None = None) -> int:
    """Open the window and run the event loop; returns the exit status."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.qt_main_window import QtMainWindow

    existing = QApplication.instance()
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
    return int(app.exec())
