"""Entry point of a trial worker: ``python -m tuner.worker --channel-fd N``."""

from __future__ import annotations

import sys

from tuner.worker.main import main, note_start

if __name__ == "__main__":
    note_start()
    sys.exit(main(sys.argv[1:]))
