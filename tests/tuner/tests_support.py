"""Helpers shared by the export tests."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tuner import __version__
from tuner.export import Evidence, HardwareFingerprint, Hazard, Setup, TunedConfig


def make_config(
    model: str = "builtin:mlp:features=8,width=16,depth=1",
    policy: str = "float32",
    loss_scale: str = "none",
    batch_size: int = 16,
    hazards: tuple[Hazard, ...] = (),
) -> TunedConfig:
    return TunedConfig(
        setup=Setup(policy, batch_size, loss_scale),
        model=model,
        evidence=Evidence(
            samples_per_second=1234.5,
            samples_per_second_spread=(1200.0, 1250.0),
            speedup_vs_float32=1.0,
            loss_gap=0.0,
            reason="float32 is fastest here",
            trials=(0, 3),
        ),
        hardware=HardwareFingerprint(
            device="cpu", cpu_model="Test CPU", cpu_flags=("avx2",), digest="abc"
        ),
        versions={"tensorflow": "2.21.0"},
        created="2026-11-22T00:00:00+00:00",
        mptune_version=__version__,
        session="s1",
        hazards=hazards,
    )


#: Hazards as the numerics probe words them: one unsafe for mixed_float16 (the values of a
#: vocabulary of 30,000 ids), a warning for each mixed policy (one of the model as a whole).
HAZARDS = (
    Hazard(
        "integer_cast",
        "mixed_float16",
        "'embedding' (Embedding)",
        "its float32 input holds whole numbers up to 30,000 (ids, indices or counts), and "
        "mixed_float16 casts it to float16, which holds whole numbers exactly only up to "
        "2,048: 412 of 512 values changed (2,049 became 2,048) before they reach 'embedding' "
        "(Embedding)",
        "declare the model input that carries these numbers as integers (keras.Input(..., "
        "dtype=\"int32\")), or keep 'embedding' from casting its inputs (autocast=False)",
        severity="unsafe",
        figure="2,049 became 2,048",
    ),
    Hazard(
        "divergence",
        "mixed_bfloat16",
        "'dense_1' (Dense)",
        "its output differs from float32's by 14.2% on the same batch and weights (the "
        "threshold is 12.5%)",
        'keep this layer in float32 (dtype="float32" on it) and compare the loss curves',
    ),
    Hazard(
        "underflow",
        "mixed_float16",
        None,
        "3.2% of the gradient values that float32 computes flush to zero in float16",
        "use dynamic loss scaling (LossScaleOptimizer)",
    ),
)


def running_children() -> list[Any]:
    """This process's descendants that run, but for the fork servers it keeps between tests
    and their keepers (each ends with its worker, which is counted)."""
    import psutil
    from forkserver.client import server_pids

    servers = set(server_pids()) | {server.pid for server in _SCRIPT_SERVERS.values()}
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in servers or child.ppid() in servers:
                continue
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


#: The script servers of this process (tests/tuner/script_server.py), by what a program's
#: imports read from the environment.
_SCRIPT_SERVERS: dict[tuple[str | None, ...], subprocess.Popen[bytes]] = {}
#: The environment a program's first imports read: a server serves only programs that agree.
_IMPORT_ENV = ("KERAS_BACKEND", "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "XLA_FLAGS", "PYTHONPATH")
_SERVER = Path(__file__).with_name("script_server.py")


def run_python(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    backend: str = "tensorflow",
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``cwd`` (``script.py ...``, ``-m module ...`` or ``-c code ...``),
    as ``subprocess.run`` with ``capture_output=True, text=True`` runs it, on Keras'
    ``backend`` (the one the program picks: an exported script sets ``KERAS_BACKEND`` itself),
    but forked from a server that imported that backend once (tests/tuner/script_server.py):
    the program's own imports find the framework loaded, its Keras state untouched. A test of
    what a fresh interpreter does (the order of imports) runs ``subprocess`` itself."""
    env = dict(os.environ if env is None else env)
    server_env = {**env, "KERAS_BACKEND": backend}
    key = tuple(server_env.get(name) for name in _IMPORT_ENV)
    server = _SCRIPT_SERVERS.get(key)
    if server is None or server.poll() is not None:
        server = _start_server(server_env)
        _SCRIPT_SERVERS[key] = server
    with tempfile.TemporaryDirectory(prefix="mptune-script-") as folder:
        out, err = Path(folder, "out"), Path(folder, "err")
        request = {"argv": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}
        assert server.stdin is not None
        server.stdin.write(json.dumps(request).encode() + b"\n")
        server.stdin.flush()
        pid = _read(server, 30)["pid"]
        try:
            status = _read(server, timeout)["status"]
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended as the wait did
                os.killpg(pid, signal.SIGKILL)
            _read(server, 30)
            raise subprocess.TimeoutExpired(args, timeout) from None
        return subprocess.CompletedProcess(
            [sys.executable, *args],
            status,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"),
        )


def _start_server(env: dict[str, str]) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, str(_SERVER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if not _read(server, 120).get("up"):
        raise AssertionError("the script server did not start")
    return server


#: What each server (by pid) has written that is not yet read as a reply: its replies are read
#: from the pipe's descriptor, never through a buffered file, whose buffer ``select`` cannot
#: see (a program that ended at once wrote its ``status`` line with its ``pid`` line, the
#: file's first ``readline`` took both, and the next ``select`` waited out its timeout).
_UNREAD: dict[int, bytearray] = {}


def _read(server: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """The server's next reply, within ``timeout`` seconds."""
    assert server.stdout is not None
    fd = server.stdout.fileno()
    unread = _UNREAD.setdefault(server.pid, bytearray())
    deadline = time.monotonic() + timeout
    while b"\n" not in unread:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise subprocess.TimeoutExpired([str(_SERVER)], timeout)
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"the script server ended ({server.wait()})")
        unread += chunk
    line, _, rest = unread.partition(b"\n")
    unread[:] = rest
    reply: dict[str, Any] = json.loads(line)
    return reply


@atexit.register
def _end_servers() -> None:
    for server in _SCRIPT_SERVERS.values():
        if server.stdin is not None:
            server.stdin.close()  # end-of-file: it ends
    for server in _SCRIPT_SERVERS.values():
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
