"""Where the main window opens and stays: a share of the screen's free area on first opening,
and always within it (a remembered geometry from a larger screen shrinks to this one)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect

#: The window's least size on first opening where the screen has room for it; a smaller screen
#: gets what fits.
DEFAULT_SIZE = (1280, 800)
#: On first opening the window takes this share of a larger screen's free area (across, down).
SCREEN_SHARE = 0.8
#: Room kept for the window manager's title bar and borders (pixels across, down).
FRAME_ALLOWANCE = (8, 32)


class ScreenPlacement:
    """The main window's placement on its screen (mixed into :class:`QtMainWindow`)."""

    resize: Any
    move: Any
    width: Any
    height: Any
    x: Any
    y: Any
    minimumSizeHint: Any

    def open_on(self, area: QRect) -> None:
        """First opening (no remembered geometry): :data:`SCREEN_SHARE` of the screen's free
        area, at least :data:`DEFAULT_SIZE`, centred on it (then :meth:`fit_within` it)."""
        width = max(DEFAULT_SIZE[0], round(area.width() * SCREEN_SHARE))
        height = max(DEFAULT_SIZE[1], round(area.height() * SCREEN_SHARE))
        self.resize(width, height)
        self.fit_within(area)
        self.move(
            area.left() + (area.width() - self.width()) // 2,
            area.top() + max(0, (area.height() - self.height() - FRAME_ALLOWANCE[1]) // 2),
        )

    def fit_within(self, area: QRect) -> None:
        """Keep the window on the screen's free area: no larger than it (less room for the
        window manager's frame) and inside it; a remembered geometry from a larger screen
        shrinks to this one."""
        room = area.adjusted(0, 0, -FRAME_ALLOWANCE[0], -FRAME_ALLOWANCE[1])
        width = max(
            min(self.width(), room.width()), min(self.minimumSizeHint().width(), room.width())
        )
        height = max(
            min(self.height(), room.height()), min(self.minimumSizeHint().height(), room.height())
        )
        self.resize(width, height)
        x = min(max(self.x(), room.left()), room.right() - width + 1)
        y = min(max(self.y(), room.top()), room.bottom() - height + 1)
        self.move(max(x, room.left()), max(y, room.top()))
