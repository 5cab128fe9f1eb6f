"""``python -m app`` opens the window."""

from __future__ import annotations

import sys

from app.main import run

sys.exit(run())
