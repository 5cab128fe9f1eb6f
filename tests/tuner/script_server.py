"""An interpreter that imports Keras (and its backend's framework) once and then runs each
Python program a test asks for in a child forked from it, as ``python script.py args``,
``python -m module args`` or ``python -c code args`` would: the test skips the 2-5 s of
importing TensorFlow, JAX or PyTorch again (tests/tuner/tests_support.py, ``run_python``).
Test support only: mptune's own fork server for trial workers is tuner/worker/forkserver.py.

``python tests/tuner/script_server.py`` with ``KERAS_BACKEND`` set: it writes ``{"up": true}``
once its imports are done, then reads one JSON request a line on stdin (``argv``, ``cwd``,
``env``, and the files ``out`` and ``err`` for the program's stdout and stderr), forks a child
that leads a session of its own and runs the program, writes ``{"pid": N}``, and once the child
has exited ``{"status": S}`` (its exit code; negative: the signal that ended it). End-of-file
on stdin ends it, and a child whose server has died is killed (``PR_SET_PDEATHSIG``). Nothing
is run here that starts a framework's runtime: each child starts its own, as a fresh
interpreter does.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import runpy
import signal
import sys
import traceback
from typing import Any, NoReturn

#: What each backend's program imports first, imported here once.
IMPORTS = {
    "tensorflow": ("tensorflow", "keras"),
    "jax": ("jax", "keras"),
    "torch": ("torch", "keras"),
}


def main() -> int:
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    for name in IMPORTS[backend]:
        importlib.import_module(name)
    _reply({"up": True})
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply({"status": os.waitstatus_to_exitcode(status)})
    return 0


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _child(request: dict[str, Any]) -> NoReturn:
    """Run the request's program as ``python`` would, and exit with its code."""
    code = 1
    try:
        os.setsid()
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the server
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        if argv[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        elif argv[0] == "-m":
            sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, and 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
