"""``apply_config``: the runtime helper a user's own training script calls.

    from tuner import apply_config

    tuned = apply_config("mptune.json")        # sets the precision policy (and TF32); refuses
                                               # a config tuned on another Keras backend
    model = tuned.prepare(build_model())       # build after the policy is set (float8
                                               # quantizes the built model)
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

from tuner.errors import MptuneError
from tuner.export.config import HardwareFingerprint, TunedConfig
from tuner.setup import BACKEND_NAMES, KNOB_NAMES, Setup
from tuner.trials.hazards import Hazard

logger = logging.getLogger(__name__)


class HardwareMismatchWarning(UserWarning):
    """The config was tuned on different hardware; its setup may not be the best here."""


class BackendMismatchError(MptuneError):
    """Keras runs on another backend in this process than the one the config was tuned on: its
    figures (and its knobs: XLA, steps per execution) belong to that backend."""


@dataclass(frozen=True)
class AppliedConfig:
    """A tuned setup that has been applied (the policy is set).

    Attributes:
        setup: the tuned setup.
        config: the whole config it came from (evidence, hazards, hardware, versions).
    """

    setup: Setup
    config: TunedConfig

    @property
    def policy(self) -> str:
        return self.setup.policy.name

    @property
    def batch_size(self) -> int:
        return self.setup.batch_size

    @property
    def loss_scale(self) -> str:
        return str(self.setup.loss_scale)

    @property
    def backend(self) -> str:
        """The Keras 3 backend the setup was tuned on (and Keras runs on: checked)."""
        return self.setup.backend

    def __getattr__(self, name: str) -> Any:
        """Each execution knob of the setup by its name (``xla``, ``steps_per_execution``,
        ``tf32``, ``gradient_accumulation_steps``: :data:`tuner.knobs.KNOBS`)."""
        if name in KNOB_NAMES:
            return getattr(self.setup, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def global_batch(self) -> int:
        """Samples per optimizer update: ``batch_size * gradient_accumulation_steps``."""
        return self.setup.global_batch

    @property
    def hazards(self) -> tuple[Hazard, ...]:
        """The precision hazards the config lists for the applied policy."""
        return self.config.policy_hazards()

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """``optimizer`` (a Keras 3 optimizer or its name) with the tuned loss scaling; see
        :func:`tuner.keras_setup.wrap_optimizer`. A setup tuned with ``--global-batch`` also sets
        ``gradient_accumulation_steps`` on it."""
        from tuner import keras_setup

        return keras_setup.wrap_optimizer(optimizer, self.setup)

    def prepare(self, model: Any) -> Any:
        """``model``, built, as the setup trains it, before ``model.compile``: with float8 its
        Dense and EinsumDense layers quantized (:func:`tuner.keras_setup.after_build`; nothing
        for other setups, nor for a model done already)."""
        from tuner import keras_setup

        keras_setup.after_build(model, self.setup)
        return model

    def compile_kwargs(self) -> dict[str, Any]:
        """Arguments for ``model.compile``: ``jit_compile`` and ``steps_per_execution`` as tuned,
        and, unless the tuned scaling is dynamic, ``auto_scale_loss=False`` (which stops Keras
        wrapping the optimizer in a ``LossScaleOptimizer`` of its own under mixed_float16)."""
        from tuner import keras_setup

        return keras_setup.compile_kwargs(self.setup)


def apply_config(
    path_or_config: str | os.PathLike[str] | TunedConfig, *, warn_on_mismatch: bool = True
) -> AppliedConfig:
    """Apply a tuned config: check that Keras runs on the backend it was tuned on, set the
    precision policy (and, for float32, TF32 on or off as tuned) and return the batch size and
    helpers.

    Args:
        path_or_config: the JSON file ``mptune export`` wrote, or a loaded config.
        warn_on_mismatch: warn (:class:`HardwareMismatchWarning`) when this machine differs from
            the one the config was tuned on.

    The config's unsafe hazards for the applied policy (a config edited to use a policy mptune
    found unsafe) are logged as warnings (logger ``tuner.export.apply``); nothing else changes.

    Raises:
        ConfigError: the file is missing, corrupt (a bad field, control characters or a lone
            surrogate in a string, JSON nested too deeply), or of a newer schema.
        BackendMismatchError: Keras runs on another backend here than the config's
            (``setup.backend``); nothing is applied. Set ``KERAS_BACKEND`` to the config's
            backend before Keras is first imported.
    """
    config = (
        path_or_config
        if isinstance(path_or_config, TunedConfig)
        else TunedConfig.load(path_or_config)
    )
    # Keras only once the config is known good: a bad file fails at once, on one line.
    import keras

    from tuner import keras_setup

    _check_backend(config, keras.backend.backend())
    keras_setup.apply_policy(config.setup)
    # mptune never recommends an unsafe policy; a config edited by hand to use one says so.
    for hazard in config.policy_hazards():
        if hazard.unsafe:
            logger.warning("mptune numerics: unsafe: %s", hazard.describe())
    if warn_on_mismatch:
        _check_hardware(config)
    return AppliedConfig(config.setup, config)


def _check_backend(config: TunedConfig, running: str) -> None:
    """Refuse a config tuned on another backend than the one Keras runs on here."""
    tuned = config.setup.backend
    if running == tuned:
        return
    raise BackendMismatchError(
        f"this config was tuned on the {BACKEND_NAMES[tuned]} backend ({tuned}), but Keras runs "
        f"on {running} in this process: set KERAS_BACKEND={tuned} before Keras is first imported "
        f"(or tune it again with the {running} backend)"
    )


def config_notes(config: TunedConfig) -> list[str]:
    """What applying ``config`` here should say first, without Keras (``mptune run``): the
    unsafe hazards of its policy (a config edited by hand) and other hardware than it was
    tuned on."""
    notes = [f"unsafe: {h.describe()}" for h in config.policy_hazards() if h.unsafe]
    differences = _hardware_differences(config)
    if differences:
        notes.append(_mismatch(differences))
    return notes


def _mismatch(differences: list[str]) -> str:
    return (
        "this config was tuned on other hardware ("
        + "; ".join(differences)
        + "): its setup may not be the fastest here; run mptune tune on this machine"
    )


def _check_hardware(config: TunedConfig) -> None:
    differences = _hardware_differences(config)
    if differences:
        warnings.warn(_mismatch(differences), HardwareMismatchWarning, stacklevel=3)


def _hardware_differences(config: TunedConfig) -> list[str]:
    """How this machine differs from the one ``config`` was tuned on (empty: it does not, or
    it cannot be told)."""
    tuned = config.hardware
    try:
        from tuner.hardware import detect

        profile = detect()
        if tuned.device == "gpu" and profile.gpus:
            # NVML lists every card, even those CUDA_VISIBLE_DEVICES hides from TensorFlow, so
            # any local GPU like the tuned one counts; otherwise compare with the first.
            candidates = [
                HardwareFingerprint.from_profile(profile, f"gpu:{g.index}") for g in profile.gpus
            ]
        else:
            candidates = [HardwareFingerprint.from_profile(profile, tuned.device)]
    except Exception as exc:  # noqa: BLE001 - a failed check must not stop training
        logger.debug("hardware check skipped: %s", exc)
        return []
    return min((list(tuned.mismatches(here)) for here in candidates), key=len)
