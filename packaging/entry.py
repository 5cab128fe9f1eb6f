"""The frozen bundle's entry point: the `mptune` command, or a trial worker.

In a PyInstaller bundle ``sys.executable`` is this program, so the trial runner's
``sys.executable -m tuner.worker`` lands here and is dispatched to the worker.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:3] == ["-m", "tuner.worker"]:
        from tuner.worker.main import main as worker_main

        sys.exit(worker_main(sys.argv[3:]))
    from tuner.cli import main

    sys.exit(main())
