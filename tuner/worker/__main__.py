"""Entry point of a trial worker: ``python -m tuner.worker --channel-fd N``."""

from __future__ import annotations

import os
import sys

from tuner.worker.main import main

#: A file each worker adds its process id to when it starts, where set: the test suite's way to
#: see which tests start real workers (tests/conftest.py keeps them out of the fast lane).
WORKER_LOG_ENV = "MPTUNE_WORKER_LOG"

if __name__ == "__main__":
    log = os.environ.get(WORKER_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    sys.exit(main(sys.argv[1:]))
