"""Where a :class:`~tuner.setup.Setup` meets Keras 3: the policy, the loss scaling, compile().

The trial worker and :func:`tuner.apply_config` (in the user's training process) both go
through these functions, so a setup trains the same way in a trial and in the user's script.
The export templates render the same rules from one Jinja2 macro
(``assets/templates/_keras.j2``); tests/tuner/test_export_exec.py runs both and compares.

Keras 3 facts this relies on (keras/src/optimizers/loss_scale_optimizer.py, keras/src/trainers/
trainer.py): ``compile()`` wraps the optimizer in ``LossScaleOptimizer`` by itself under
mixed_float16 unless ``auto_scale_loss=False``, and leaves one that is already wrapped alone;
a fixed scale is ``loss_scale_factor`` on the inner optimizer (Keras 3 has no ``dynamic=False``),
and that path never skips a step whose gradients are not finite.

This module imports Keras; only the worker and ``apply_config`` may import it.
"""

from __future__ import annotations

from typing import Any

import keras

from tuner.setup import LossScale, Policy, Setup


def apply_policy(policy: Policy | Setup) -> None:
    """Make ``policy`` (or a setup's) the global policy: layers built after this use it."""
    chosen = policy.policy if isinstance(policy, Setup) else policy
    keras.mixed_precision.set_global_policy(chosen.name)


def wrap_optimizer(optimizer: Any, loss_scale: LossScale) -> Any:
    """``optimizer`` with the loss scaling ``loss_scale`` says.

    Args:
        optimizer: a Keras 3 optimizer, or its name (``"adam"``), as ``compile()`` takes it.
        loss_scale: the setting.

    Returns:
        A ``LossScaleOptimizer`` for dynamic scaling, a copy with ``loss_scale_factor`` set for
        a fixed scale, or the optimizer unchanged for none.
    """
    if isinstance(optimizer, str):
        optimizer = keras.optimizers.get(optimizer)
    if loss_scale.kind == "dynamic":
        return keras.optimizers.LossScaleOptimizer(
            optimizer,
            initial_scale=loss_scale.effective_initial_scale,
            dynamic_growth_steps=loss_scale.effective_growth_steps,
        )
    if loss_scale.kind == "fixed":
        config = optimizer.get_config()
        config["loss_scale_factor"] = loss_scale.value
        return type(optimizer).from_config(config)
    return optimizer


def compile_kwargs(loss_scale: LossScale) -> dict[str, Any]:
    """Arguments for ``model.compile`` next to a :func:`wrap_optimizer` optimizer.

    Unless the scaling is dynamic (already wrapped, so Keras leaves it), ``auto_scale_loss=False``
    stops Keras from adding dynamic scaling of its own under mixed_float16: "none" and "fixed"
    must mean exactly that.
    """
    return {} if loss_scale.kind == "dynamic" else {"auto_scale_loss": False}


def compile_model(
    model: Any, setup: Setup, optimizer: Any = None, loss: Any = None, **kwargs: Any
) -> None:
    """Compile ``model`` for ``setup``: its loss scaling on ``optimizer`` (Adam 1e-3 when
    ``None``), and ``loss`` (mean squared error when ``None``)."""
    inner = optimizer if optimizer is not None else keras.optimizers.Adam(1e-3)
    model.compile(
        optimizer=wrap_optimizer(inner, setup.loss_scale),
        loss=loss if loss is not None else "mean_squared_error",
        **compile_kwargs(setup.loss_scale),
        **kwargs,
    )
