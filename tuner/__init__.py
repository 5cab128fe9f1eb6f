"""mptune's engine: hardware detection, trials, search and export. Never imports Qt."""

from __future__ import annotations

__version__ = "0.1.0"
