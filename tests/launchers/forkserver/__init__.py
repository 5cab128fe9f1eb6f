"""The test suite's fork server, plugged into mptune through its launcher seam
(:mod:`tuner.trials.launcher`): ``MPTUNE_LAUNCHER=forkserver:launcher`` with tests/ on
``PYTHONPATH`` (tests/conftest.py sets both). :mod:`forkserver.client` is the runner's side,
:mod:`forkserver.server` the server process; tests/README.md says what it saves."""

from __future__ import annotations

from forkserver.client import LAUNCHER, ForkLauncher

#: The value of ``MPTUNE_LAUNCHER`` that names it.
NAME = "forkserver:launcher"


def launcher() -> ForkLauncher:
    """The launcher ``MPTUNE_LAUNCHER`` names (one for the process)."""
    return LAUNCHER
