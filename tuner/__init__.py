"""mptune's engine: hardware detection, trials, search and export. Never imports Qt.

``from tuner import apply_config`` gives the runtime helper for training scripts (it imports
Keras only when called).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "apply_config"]


def apply_config(path_or_config: Any, *, warn_on_mismatch: bool = True) -> Any:
    """Apply a tuned config in a training script; see :func:`tuner.export.apply.apply_config`."""
    from tuner.export.apply import apply_config as _apply

    return _apply(path_or_config, warn_on_mismatch=warn_on_mismatch)
