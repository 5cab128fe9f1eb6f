"""What earlier searches measured on this kind of machine, per policy: the hardware advice is a
prior, and once a policy has been measured here it should say what was measured
(``mptune detect``, the window's hardware panel).

It reads the sessions' stored summaries only (their recommendation and its alternatives), never
their trials, so that it costs one query of the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna

from tuner.errors import MptuneError
from tuner.hardware.fingerprint import HardwareFingerprint, device_of, session_fingerprint
from tuner.search.session import LOCK_PREFIX
from tuner.search.storage import open_storage
from tuner.setup import SETUP_FIELDS, Setup


@dataclass(frozen=True)
class PolicyMeasured:
    """The fastest a policy ran against float32 in the sessions of this kind of machine.

    Attributes:
        policy: ``float32``, ``mixed_float16`` or ``mixed_bfloat16``.
        speedup_vs_float32: its best setup's samples/s over float32's, in the session where
            that was highest (1.0 for float32 itself).
        setup: that setup's label (``mixed_float16 b64 dynamic``).
        session: the session it was measured in.
        model: the model that session tuned.
        sessions: how many sessions of this machine measured the policy.
    """

    policy: str
    speedup_vs_float32: float
    setup: str
    session: str
    model: str
    sessions: int

    def words(self) -> str:
        """``measured here: 0.01x float32 at best (mixed_float16 b64 dynamic, builtin:cnn,
        session cnn-1; 3 sessions)``."""
        many = f"; {self.sessions} sessions" if self.sessions > 1 else ""
        best = " at best" if self.sessions > 1 else ""
        ratio = (
            "under 0.01x" if self.speedup_vs_float32 < 0.005 else f"{self.speedup_vs_float32:.2f}x"
        )
        return (
            f"measured here: {ratio} float32{best} ({self.setup}, {self.model}, session "
            f"{self.session}{many})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "speedup_vs_float32": self.speedup_vs_float32,
            "setup": self.setup,
            "session": self.session,
            "model": self.model,
            "sessions": self.sessions,
        }


def measured_here(profile: Any, storage_url: str | None) -> dict[str, PolicyMeasured]:
    """Per policy, what the finished sessions of this kind of machine (the same hardware
    fingerprint as ``profile`` on the device a search would use) measured of it against
    float32. Empty where the store cannot be read: advice never fails for want of history.
    """
    here = profile.to_dict()
    mine = HardwareFingerprint.from_profile_dict(here, device_of(here, "auto")).digest
    try:
        summaries = optuna.get_all_study_summaries(
            open_storage(storage_url), include_best_trial=False
        )
    except (MptuneError, Exception):  # noqa: BLE001 - history is optional; the advice is not
        return {}
    found: dict[str, list[tuple[float, str, str, str]]] = {}
    for summary in summaries:
        if summary.study_name.startswith(LOCK_PREFIX):
            continue
        attrs = summary.user_attrs
        if _digest(attrs) != mine:
            continue
        for policy, ratio, setup in _ratios(attrs.get("recommendation")):
            found.setdefault(policy, []).append(
                (ratio, setup, summary.study_name, str(attrs.get("model") or "?"))
            )
    return {
        policy: PolicyMeasured(policy, *max(rows), sessions=len({r[2] for r in rows}))
        for policy, rows in found.items()
    }


def _digest(attrs: dict[str, Any]) -> str | None:
    fingerprint = session_fingerprint(attrs)
    return fingerprint.digest if fingerprint else None


def _ratios(rec: Any) -> list[tuple[str, float, str]]:
    """(policy, speed-up against float32, setup label) of each setup a stored recommendation
    states a speed-up for: the recommended one and its alternatives, rejected ones included
    (a policy rejected for its loss gap still measured its speed)."""
    if not isinstance(rec, dict):
        return []
    rows = [rec, *(a for a in rec.get("alternatives") or () if isinstance(a, dict))]
    out = []
    for row in rows:
        ratio = row.get("speedup_vs_float32")
        nested = row.get("setup")
        data: dict[str, Any] = nested if isinstance(nested, dict) else row
        try:
            setup = Setup.from_dict({k: data[k] for k in SETUP_FIELDS if k in data})
        except (ValueError, TypeError, KeyError):
            continue
        if not isinstance(ratio, int | float) or not math.isfinite(ratio) or setup.tf32:
            continue  # TF32 is float32 with other matmuls: not a policy of its own
        out.append((setup.policy.name, float(ratio), setup.label))
    return out
