"""Exporting a tuned setup: the versioned JSON config, snippets, scripts, and ``apply_config``.

``apply_config`` (in :mod:`tuner.export.apply`) runs in the user's training process and imports
Keras; it is loaded lazily so that importing this package stays TensorFlow-free.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tuner import __version__
from tuner.export.config import (
    SCHEMA,
    SCHEMA_VERSION,
    ConfigError,
    Evidence,
    HardwareFingerprint,
    TunedConfig,
)
from tuner.export.render import FORMATS, render
from tuner.said import setting
from tuner.setup import Setup
from tuner.trials.hazards import Hazard

if TYPE_CHECKING:
    from tuner.export.apply import (
        AppliedConfig,
        BackendMismatchError,
        HardwareMismatchWarning,
        apply_config,
    )
    from tuner.search.session import SessionView

__all__ = [
    "FORMATS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "AppliedConfig",
    "BackendMismatchError",
    "ConfigError",
    "Evidence",
    "HardwareFingerprint",
    "HardwareMismatchWarning",
    "Hazard",
    "Setup",
    "TunedConfig",
    "apply_config",
    "config_from_session",
    "render",
]

#: Names served from :mod:`tuner.export.apply` on first use (PEP 562), so that importing this
#: package never imports Keras.
_LAZY = ("AppliedConfig", "BackendMismatchError", "HardwareMismatchWarning", "apply_config")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from tuner.export import apply

        return getattr(apply, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def config_from_session(session: SessionView) -> TunedConfig:
    """The tuned config of a finished session.

    Raises:
        ConfigError: the session has no recommendation yet.
    """
    from tuner.hardware import HardwareProfile

    rec = session.recommendation
    if rec is None and session.failure is not None:
        raise ConfigError(
            f"session {session.name} has no recommendation: its search failed in the model's "
            f"own code ({session.failure.message}); fix the model, then continue with "
            f"{setting('resume', session.name)}"
        )
    if rec is None:
        raise ConfigError(
            f"session {session.name} has no recommendation yet: finish it with "
            f"{setting('resume', session.name)}"
        )
    profile = HardwareProfile.from_dict(session.hardware)
    return TunedConfig(
        setup=rec.setup,
        model=session.model,
        evidence=Evidence(
            samples_per_second=rec.samples_per_second,
            samples_per_second_spread=rec.samples_per_second_spread,
            baseline_samples_per_second=rec.baseline_samples_per_second,
            speedup_vs_float32=rec.speedup_vs_float32,
            float32_setup=rec.float32_setup.label if rec.float32_setup else None,
            float32_samples_per_second=rec.float32_samples_per_second,
            float32_trials=rec.float32_trials,
            float32_paired=rec.float32_paired,
            baseline_trials=rec.baseline_trials,
            today=rec.today,
            today_trap=rec.today_trap,
            memory_saving=rec.memory_saving,
            peak_memory_mb=rec.peak_memory_mb,
            loss_gap=rec.loss_gap,
            skipped_steps=rec.skipped_steps,
            reason=rec.reason,
            trials=rec.trials,
            device_samples_per_second=rec.device_samples_per_second,
            input_samples_per_second=rec.input.samples_per_second if rec.input else None,
            input_fed_by=rec.input.fed_by if rec.input else None,
            input_bound=rec.input_bound,
        ),
        hardware=HardwareFingerprint.from_profile(profile, rec.device or "cpu"),
        versions=dict(rec.versions),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        mptune_version=__version__,
        session=session.name,
        hazards=tuple(rec.hazards),
    )
