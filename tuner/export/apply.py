"""``apply_config``: the runtime helper a user's own training script calls.

    from tuner import apply_config

    tuned = apply_config("mptune.json")        # sets the precision policy
    model = build_model()                      # build after the policy is set
    model.compile(optimizer=tuned.wrap_optimizer(keras.optimizers.Adam()), loss=...,
                  **tuned.compile_kwargs())
    model.fit(dataset.batch(tuned.batch_size), ...)

This module runs in the user's process and imports Keras (inside functions only).
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

from tuner.export.config import HardwareFingerprint, TunedConfig
from tuner.trials.spec import LossScale

logger = logging.getLogger(__name__)


class HardwareMismatchWarning(UserWarning):
    """The config was tuned on different hardware; its setup may not be the best here."""


@dataclass(frozen=True)
class AppliedConfig:
    """A tuned setup that has been applied (the policy is set)."""

    policy: str
    batch_size: int
    loss_scale: str
    config: TunedConfig

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` with the tuned loss scaling.

        Args:
            optimizer: a Keras 3 optimizer, or its name (``"adam"``).

        Returns:
            A ``LossScaleOptimizer`` for dynamic scaling, a copy with ``loss_scale_factor`` set
            for a fixed scale, or ``optimizer`` unchanged for none.
        """
        import keras

        if isinstance(optimizer, str):
            optimizer = keras.optimizers.get(optimizer)  # "adam", as compile() would take it
        scale = LossScale.parse(self.loss_scale)
        if scale.kind == "dynamic":
            return keras.optimizers.LossScaleOptimizer(
                optimizer, initial_scale=scale.effective_initial_scale,
                dynamic_growth_steps=scale.effective_growth_steps)
        if scale.kind == "fixed":
            config = optimizer.get_config()
            config["loss_scale_factor"] = scale.value
            return type(optimizer).from_config(config)
        return optimizer

    def compile_kwargs(self) -> dict[str, Any]:
        """Arguments for ``model.compile``: unless the tuned scaling is dynamic, stop Keras from
        wrapping the optimizer in a ``LossScaleOptimizer`` of its own under mixed_float16."""
        return {} if LossScale.parse(self.loss_scale).kind == "dynamic" else {
            "auto_scale_loss": False}


def apply_config(path_or_config: str | os.PathLike[str] | TunedConfig, *,
                 warn_on_mismatch: bool = True) -> AppliedConfig:
    """Apply a tuned config: set the precision policy and return the batch size and helpers.

    Args:
        path_or_config: the JSON file ``mptune export`` wrote, or a loaded config.
        warn_on_mismatch: warn (:class:`HardwareMismatchWarning`) when this machine differs from
            the one the config was tuned on.

    Raises:
        ConfigError: the file is missing, corrupt, or of a newer schema.
    """
    import keras

    config = path_or_config if isinstance(path_or_config, TunedConfig) \
        else TunedConfig.load(path_or_config)
    keras.mixed_precision.set_global_policy(config.setup.policy)
    if warn_on_mismatch:
        _check_hardware(config)
    return AppliedConfig(config.setup.policy, config.setup.batch_size, config.setup.loss_scale,
                         config)


def _check_hardware(config: TunedConfig) -> None:
    tuned = config.hardware
    try:
        from tuner.hardware import detect

        profile = detect()
        if tuned.device == "gpu" and profile.gpus:
            # NVML lists every card, even those CUDA_VISIBLE_DEVICES hides from TensorFlow, so
            # any local GPU like the tuned one counts; otherwise compare with the first.
            candidates = [HardwareFingerprint.from_profile(profile, f"gpu:{g.index}")
                          for g in profile.gpus]
        else:
            candidates = [HardwareFingerprint.from_profile(profile, tuned.device)]
    except Exception as exc:  # noqa: BLE001 - a failed check must not stop training
        logger.debug("hardware check skipped: %s", exc)
        return
    differences = min((tuned.mismatches(here) for here in candidates), key=len)
    if differences:
        warnings.warn(
            "this config was tuned on other hardware (" + "; ".join(differences)
            + "): its setup may not be the fastest here; run mptune tune on this machine",
            HardwareMismatchWarning, stacklevel=3)
