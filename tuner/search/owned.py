"""What a session owns, so that its trials compare: the kind of machine it was measured on,
and its model file's or training script's content. A continued search and a fleet worker are
refused what would mix another's measurements into it."""

from __future__ import annotations

from typing import Any

from tuner.errors import MptuneError
from tuner.hardware.fingerprint import HardwareFingerprint, device_of
from tuner.said import setting
from tuner.search.session import SessionView
from tuner.trials.models import ModelSource


def same_model_file(stored: SessionView, source: ModelSource, joining: bool) -> bool:
    """Refuse a model file or training script whose content is not the one the session
    measured (``source``: this machine's copy, found and readable): a fleet worker's copy never, a
    resumed search's only where its trials would not compare (the session failed in the
    model's own code, or measured nothing yet: the fixed file is what it goes on with).
    Returns whether the session should record the file's digest as its model's from now on."""
    path, digest = source.path, source.digest
    if not digest or digest == stored.model_digest:
        return False
    if not stored.model_digest:
        return not joining  # a session from before sessions recorded it: from now on
    if joining:
        raise MptuneError(
            f"this machine's {path} is not the file session {stored.name!r} measures (its "
            "content differs): copy the session's file here, at the same path, then join"
        )
    measured = sum(1 for t in stored.trials if t.result is not None and t.result.ok)
    if stored.failure is None and measured:
        raise MptuneError(
            f"{path} has changed since session {stored.name!r} measured it ({measured} "
            f"trial{'s' if measured != 1 else ''}): trials of the two versions would not "
            f"compare. Give another {setting('study')} to tune the file as it is now, or put "
            "back the version it measured"
        )
    return True


def same_hardware(stored: SessionView, profile: Any, device: str) -> None:
    """Refuse to continue a session measured on another kind of machine: its trials and the new
    ones would not compare (one session per kind of machine, also in a shared store)."""
    if not stored.hardware:
        return  # a session from before sessions recorded it
    here = profile.to_dict()
    theirs = HardwareFingerprint.from_profile_dict(
        stored.hardware, device_of(stored.hardware, device)
    )
    mine = HardwareFingerprint.from_profile_dict(here, device_of(here, device))
    if theirs.digest != mine.digest:
        differences = "; ".join(theirs.mismatches(mine)) or "another machine"
        raise MptuneError(
            f"session {stored.name!r} was measured on {theirs.kind}, and this machine is "
            f"{mine.kind} ({differences}): measurements of different hardware never mix in one "
            f"session. Give another {setting('study')} for this machine"
        )
