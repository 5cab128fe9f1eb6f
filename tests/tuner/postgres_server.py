"""A throw-away PostgreSQL server for tests: ``initdb`` in a temporary directory, a free port on
127.0.0.1, password authentication, stopped afterwards.

The server comes from Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``) or
whatever ``initdb`` is on the PATH. PostgreSQL refuses to run as root: as root it runs as the
package's ``postgres`` user. :func:`start` returns None with the reason when no server can be
started, so that the tests that need one are skipped saying why.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

USER = "mptune"
PASSWORD = "pw-for-tests-only"
DATABASE = "mptune"


@dataclass
class Server:
    root: Path
    bindir: Path
    port: int
    as_user: list[str]

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def _pg_ctl(self, *args: str) -> None:
        # Its log goes to a file: a server holding our pipe open would never let run() return.
        subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
             "-l", str(self.root / "log"), "-w", *args],
            capture_output=True, timeout=120, check=True,
        )  # fmt: skip

    def restart(self) -> None:
        """Stop the server (its connections dropped) and start it again on the same port."""
        self._pg_ctl("-m", "immediate", "restart")

    def down(self) -> None:
        """Stop the server, dropping its connections, until :meth:`up`."""
        self._pg_ctl("-m", "immediate", "stop")

    def up(self) -> None:
        """Start the stopped server again on the same port."""
        self._pg_ctl("-o", f"-p {self.port} -h 127.0.0.1 -k {self.root} -F", "start")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
                 "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections (Linux; its default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def _free_port() -> int:
    """A free port outside the ephemeral range: while a test holds the server down, a port in
    that range can be taken as the source of any outgoing connection, even one to itself (a
    TCP self-connect), and a client would then reach that instead of finding the port closed."""
    ephemeral = _ephemeral_ports()
    candidates = [p for p in range(20000, 32768) if p not in ephemeral] or [0]
    for port in random.sample(candidates, min(len(candidates), 200)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start() -> Server | str:
    """A running server, or the reason there is none."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the PostgreSQL driver psycopg is not installed (pip install -e '.[postgres]')"
    bindir = _bindir()
    if bindir is None:
        return "no PostgreSQL server here (Debian: apt-get install postgresql)"
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="mptune-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            return "running as root and there is no 'postgres' user to run the server as"
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if as_user:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    server = Server(root, bindir, _free_port(), as_user)
    steps = [
        [str(bindir / "initdb"), "-D", str(root / "data"), "-U", USER, f"--pwfile={pwfile}",
         "-A", "scram-sha-256", "--no-sync", "-E", "UTF8"],
        [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "log"), "-w",
         "-o", f"-p {server.port} -h 127.0.0.1 -k {root} -F", "start"],
        [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", USER,
         DATABASE],
    ]  # fmt: skip
    env = {**os.environ, "PGPASSWORD": PASSWORD, "LC_ALL": "C"}
    for step in steps:
        proc = subprocess.run(
            [*as_user, *step], capture_output=True, text=True, timeout=120, env=env, check=False
        )
        if proc.returncode != 0:
            server.stop()
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{Path(step[0]).name} failed: {last[0]}"
    return server
