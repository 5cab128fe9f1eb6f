"""Where sessions are stored: an Optuna storage opened for a URL (SQLite by default, any URL
Optuna accepts), its failures in one line without the password, and how often a search or a
worker records that it is alive in it."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna

from tuner.errors import MptuneError


def default_storage_url() -> str:
    """``sqlite:///<user data dir>/sessions.db`` (platformdirs), created on first use."""
    import platformdirs

    directory = Path(platformdirs.user_data_dir("mptune", appauthor=False))
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'sessions.db'}"


def _seconds(name: str, default: int) -> int:
    """A whole number of seconds from the environment variable ``name``, else ``default``."""
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() and int(value) > 0 else default


#: How often a search (or an ``mptune worker``) records that it is alive: its lease on the
#: session, and Optuna's heartbeat of its running trials. ``MPTUNE_HEARTBEAT_S`` sets it.
HEARTBEAT_S = _seconds("MPTUNE_HEARTBEAT_S", 10)
#: A trial or a lease whose heartbeat is older than this belongs to a process that died (on
#: any host): its trial is failed (and run again by the search), and another search may take
#: the session over. ``MPTUNE_GRACE_S`` sets it (a fleet on a slow network may want more).
GRACE_S = max(_seconds("MPTUNE_GRACE_S", 60), 2 * HEARTBEAT_S)
#: Storage URLs whose tables this process has found in Optuna's schema. Optuna checks it on
#: every open by loading its Alembic migration scripts (about 25 ms, 5 times the rest of an
#: open of a SQLite file); a search opens its storage several times, and the schema a process
#: found compatible stays so (only ``optuna storage upgrade`` changes it, to this version's).
_SCHEMA_CHECKED: set[str] = set()


def open_storage(url: str | None) -> optuna.storages.RDBStorage:
    """An Optuna storage for ``url`` (default: the SQLite file), with Optuna's trial heartbeat on.

    Raises:
        MptuneError: the URL is malformed or the database cannot be reached, in one line.
    """
    url = url or default_storage_url()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs=_engine_kwargs(url),
                heartbeat_interval=HEARTBEAT_S,
                grace_period=GRACE_S,
                skip_compatibility_check=url in _SCHEMA_CHECKED,
            )
        _SCHEMA_CHECKED.add(url)
        return storage
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises many kinds; one problem here
        raise MptuneError(
            f"cannot open session storage {redact_url(url)}: {_reason(exc, url)}"
        ) from None


def _reason(exc: BaseException, url: str) -> str:
    """One line for a storage failure: the database's own words, never the password."""
    chain: list[BaseException] = [exc]
    while chain[-1].__cause__ is not None or (
        chain[-1].__context__ is not None and not chain[-1].__suppress_context__
    ):
        chain.append(chain[-1].__cause__ or chain[-1].__context__)  # type: ignore[arg-type]
    root = chain[-1]
    if isinstance(root, ModuleNotFoundError) and (root.name or "").startswith("psycopg"):
        return "the PostgreSQL driver is not installed (pip install 'mptune[postgres]')"
    # The deepest cause that says something (a pool's clean-up may end the chain with "()").
    said = [e for e in chain if str(e).strip(" ()")]
    text = str(said[-1]).strip() if said else type(exc).__name__
    line = text.splitlines()[0]
    line = re.sub(r"^\((?:[\w.]+)\)\s*", "", line)  # sqlalchemy's "(sqlite3.OperationalError) "
    password = _password(url)
    if password:
        # Also the pieces of it a parser may have split off at an unencoded "@" or ":".
        for piece in sorted({password, *re.split(r"[@:/]", password)}, key=len, reverse=True):
            if len(piece) >= 2:
                line = line.replace(piece, "***")
        if "@" in password:
            line += " (the password holds an '@': write it as %40 in the URL)"
    return line


def _password(url: str) -> str | None:
    _, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return None
    creds = tail.rpartition("@")[0]
    return creds.split(":", 1)[1] if ":" in creds else None


@contextmanager
def storage_errors(url: str | None) -> Iterator[None]:
    """Turn a failure of the session database (read-only file, a dropped connection, a full
    disk) into one line naming the storage: it is the environment, not mptune, that failed."""
    try:
        yield
    except optuna.exceptions.StorageInternalError as exc:
        where = redact_url(url or default_storage_url())
        raise MptuneError(f"session storage {where} failed: {_reason(exc, where)}") from None


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}


def redact_url(url: str) -> str:
    """The URL without a password, for messages."""
    head, sep, tail = url.partition("://")
    if sep and "@" in tail:
        creds, _, host = tail.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{head}://{user}:***@{host}"
    return url
