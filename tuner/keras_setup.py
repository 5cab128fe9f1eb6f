"""Where a :class:`~tuner.setup.Setup` meets Keras 3: the policy, TF32 and rematerialisation
before the model is built, float8 on the built model, the loss scaling and gradient
accumulation on the optimizer, and compile() (XLA, steps per execution).

The trial worker and :func:`tuner.apply_config` (in the user's training process) both go
through these functions, so a setup trains the same way in a trial and in the user's script.
The export templates render the same rules from one Jinja2 macro
(``assets/templates/_keras.j2``); tests/tuner/test_export_exec.py runs both and compares.

Keras 3 facts this relies on (keras/src/optimizers/loss_scale_optimizer.py, keras/src/trainers/
trainer.py): ``compile()`` wraps the optimizer in ``LossScaleOptimizer`` by itself under
mixed_float16 unless ``auto_scale_loss=False``, and leaves one that is already wrapped alone;
a fixed scale is ``loss_scale_factor`` on the inner optimizer (Keras 3 has no ``dynamic=False``),
and that path never skips a step whose gradients are not finite. ``gradient_accumulation_steps``
belongs on the inner optimizer (``LossScaleOptimizer`` refuses it). ``compile(jit_compile=...)``
defaults to ``"auto"``, which turns XLA on by itself on a GPU and off on a CPU
(``Trainer._resolve_auto_jit_compile``), so a setup always passes True or False.
TensorFlow runs float32 matmuls as TF32 on compute capability 8.0 and up unless told otherwise
(``tf.config.experimental.enable_tensor_float_32_execution``); JAX's default matmul precision on
such a GPU is TF32 too, PyTorch's is IEEE float32 for matmuls and TF32 for cuDNN convolutions.

This module imports Keras; only the worker and ``apply_config`` may import it.
"""

from __future__ import annotations

from typing import Any

import keras

from tuner import keras_private
from tuner.setup import LossScale, Policy, Setup, compile_arguments, optimizer_arguments


def apply_policy(policy: Policy | Setup) -> None:
    """Make ``policy`` (or a setup's) the global policy: layers built after this use it.

    For a float32 setup this also sets TF32 as the setup says (on for ``tf32``, off for plain
    float32, which then means IEEE float32 on every GPU); mixed policies leave TensorFlow's TF32
    setting alone. TF32 exists only on the TensorFlow backend, and changes nothing on a CPU.
    A setup's rematerialisation applies to the layers built after this too (:func:`set_remat`).
    """
    chosen = policy.policy if isinstance(policy, Setup) else policy
    keras.mixed_precision.set_global_policy(chosen.name)
    if isinstance(policy, Setup):
        if not chosen.is_half:
            set_tf32(policy.tf32)
        set_remat(policy.remat)


#: The rematerialisation scope :func:`set_remat` entered, while it is.
_REMAT: list[Any] = []


def remat_mode(backend: str) -> str:
    """The ``keras.RematScope`` mode rematerialisation means on ``backend``: ``full`` (every
    layer recomputes its outputs in the backward pass: ``jax.checkpoint``,
    ``torch.utils.checkpoint``), and on TensorFlow ``activations`` (the layers' activation
    functions only): TensorFlow's ``tf.recompute_grad`` takes no keyword argument inside a
    ``tf.function`` (Keras 3.15: "The custom_gradient decorator currently supports keywords
    arguments only when eager execution is enabled"), and a functional model, a ``Dropout`` or
    a ``BatchNormalization`` is called with ``training=``, so ``full`` fails there."""
    return "activations" if backend == "tensorflow" else "full"


def set_remat(enabled: bool) -> None:
    """Rematerialise the layers built from now on (``keras.RematScope`` in the backend's
    :func:`remat_mode`: they recompute their activations in the backward pass instead of
    keeping them), or stop. The scope is entered for the rest of the process, as the global
    policy is set: Keras reads it when a layer is built."""
    while _REMAT:
        _REMAT.pop().__exit__(None, None, None)
    if enabled:
        scope = keras.RematScope(mode=remat_mode(keras.backend.backend()))
        scope.__enter__()
        _REMAT.append(scope)


def set_seed(seed: int) -> None:
    """Seed Python, NumPy, Keras' global seed generator and the backend's own generator, as
    ``keras.utils.set_random_seed`` does, without importing TensorFlow on JAX or PyTorch
    (Keras' function imports it whenever it is installed, to seed ``tf.data``: seconds of a JAX
    or PyTorch worker's start-up, and GPU memory, for nothing when no ``tf.data`` is used; a
    model file that builds a ``tf.data`` dataset imports TensorFlow itself)."""
    if keras.backend.backend() == "tensorflow":
        keras.utils.set_random_seed(seed)
        return
    import random

    import numpy as np

    keras_private.seed_global_generators(seed)
    random.seed(seed)
    np.random.seed(seed)
    if keras.backend.backend() == "torch":
        import torch

        torch.manual_seed(seed)


def set_tf32(enabled: bool) -> None:
    """TensorFloat-32 matmuls and convolutions on or off, on the backend Keras runs: TensorFlow
    (``enable_tensor_float_32_execution``; on by default), JAX (``jax_default_matmul_precision``
    ``tensorfloat32`` or ``highest``) or PyTorch (``allow_tf32`` for matmuls and cuDNN)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(enabled)
    elif backend == "jax":
        import jax

        precision = "tensorfloat32" if enabled else "highest"
        jax.config.update("jax_default_matmul_precision", precision)  # type: ignore[no-untyped-call]
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def wrap_optimizer(optimizer: Any, loss_scale: LossScale | Setup) -> Any:
    """``optimizer`` with the loss scaling ``loss_scale`` says (and, given a setup, its gradient
    accumulation).

    Args:
        optimizer: a Keras 3 optimizer, or its name (``"adam"``), as ``compile()`` takes it.
        loss_scale: the setting, or a whole setup.

    Returns:
        A ``LossScaleOptimizer`` for dynamic scaling, a copy with ``loss_scale_factor`` set for
        a fixed scale, or the optimizer unchanged for none. Given a setup, the (inner)
        optimizer's ``gradient_accumulation_steps`` is the setup's (a copy is made only when
        the optimizer's own differs).
    """
    if isinstance(optimizer, str):
        optimizer = keras.optimizers.get(optimizer)
    if isinstance(loss_scale, Setup):
        setup = loss_scale
        loss_scale = setup.loss_scale
        # The setup decides (each knob's optimizer_argument): an optimizer that already
        # accumulates is set to what was measured.
        changes = {
            key: wanted
            for key, wanted in optimizer_arguments(setup).items()
            if (getattr(optimizer, key, None) or None) != wanted
        }
        if changes:
            optimizer = _with_config(optimizer, **changes)
    if loss_scale.kind == "dynamic":
        return keras.optimizers.LossScaleOptimizer(
            optimizer,
            initial_scale=loss_scale.effective_initial_scale,
            dynamic_growth_steps=loss_scale.effective_growth_steps,
        )
    if loss_scale.kind == "fixed":
        return _with_config(optimizer, loss_scale_factor=loss_scale.value)
    return optimizer


def _with_config(optimizer: Any, **changes: Any) -> Any:
    """A copy of ``optimizer`` with ``changes`` to its config (the original is left alone)."""
    config = optimizer.get_config()
    config.update(changes)
    return type(optimizer).from_config(config)


def compile_kwargs(loss_scale: LossScale | Setup) -> dict[str, Any]:
    """Arguments for ``model.compile`` next to a :func:`wrap_optimizer` optimizer.

    Unless the scaling is dynamic (already wrapped, so Keras leaves it), ``auto_scale_loss=False``
    stops Keras from adding dynamic scaling of its own under mixed_float16: "none" and "fixed"
    must mean exactly that. Given a setup, ``jit_compile`` (always True or False: Keras' own
    ``"auto"`` depends on the device) and ``steps_per_execution`` follow it too.
    """
    setup = loss_scale if isinstance(loss_scale, Setup) else None
    scale = setup.loss_scale if setup is not None else loss_scale
    assert isinstance(scale, LossScale)
    kwargs: dict[str, Any] = {} if scale.kind == "dynamic" else {"auto_scale_loss": False}
    if setup is not None:
        kwargs.update(compile_arguments(setup))  # each knob's compile_argument
    return kwargs


def compile_model(
    model: Any, setup: Setup, optimizer: Any = None, loss: Any = None, **kwargs: Any
) -> None:
    """Compile ``model`` for ``setup`` (after :func:`after_build`): its loss scaling and
    accumulation on ``optimizer`` (Adam 1e-3 when ``None``), ``loss`` (mean squared error when
    ``None``, but for a model whose step is its own: :func:`own_step`),
    XLA and steps per execution as the setup says (they win over the same names in
    ``kwargs``)."""
    inner = optimizer if optimizer is not None else keras.optimizers.Adam(1e-3)
    after_build(model, setup)
    with in_its_strategy(model) as strategy:
        # A model built under a tf.distribute strategy (a script's) is compiled again in it:
        # its optimizer must be made in it too (a TensorFlow optimizer keeps the strategy it
        # was made under, and makes its variables there).
        if strategy is not None and not isinstance(inner, str):
            inner = type(inner).from_config(inner.get_config())
        model.compile(
            optimizer=wrap_optimizer(inner, setup),
            # A model whose training step is its own computes its own loss (issue 71): it is
            # compiled as its user compiled it, without one.
            loss=loss if loss is not None or own_step(model) else "mean_squared_error",
            **{**kwargs, **compile_kwargs(setup)},
        )


#: The methods of Keras' ``Trainer`` a model may override to train its own way (the keras.io
#: VAE, GAN and contrastive examples override ``train_step``; a model may compute its own
#: loss in ``compute_loss``): then its loss is its own, and it is compiled without one.
OWN_STEP_METHODS = ("train_step", "compute_loss")


def own_step(model: Any, methods: tuple[str, ...] = OWN_STEP_METHODS) -> type | None:
    """The class in ``model``'s type that defines its own training step (the first of
    ``methods`` that a class outside Keras defines, between the model's type and
    ``keras.Model``), or None where Keras' own runs (``fit``'s compiled loss, metrics and loss
    scaling)."""
    for method in methods:
        for cls in type(model).__mro__:
            if method in vars(cls):
                if cls.__module__.split(".")[0] != "keras":
                    return cls
                break
    return None


def defines_call(model: Any) -> bool:
    """Whether ``model``'s class (or one between it and Keras' own) defines ``call``: a
    functional model, a subclass with a forward pass. The keras.io VAE does not (its layers
    run inside its own ``train_step``): it has no forward pass to run apart from its step."""
    for cls in type(model).__mro__:
        if cls.__module__.split(".")[0] == "keras":
            return cls.__name__ in ("Functional", "Sequential")
        if "call" in vars(cls):
            return True
    return False


def after_build(model: Any, setup: Setup) -> None:
    """What ``setup`` does to the built ``model`` before it is compiled: with ``float8``, Keras'
    ``model.quantize("float8")``, which gives its ``Dense`` and ``EinsumDense`` layers (those
    classes themselves: Keras refuses their subclasses) the ``float8_from_<policy>`` policy.
    Layers with LoRA enabled are left as they are (Keras' float8 call refuses LoRA). Once
    quantized, a model is left alone: a warm worker compiles it again for another setup of the
    same model, and ``apply_config`` may be handed a model already done."""
    if not setup.float8 or quantized_layers(model):
        return
    import warnings

    with warnings.catch_warnings():
        # Keras warns of each layer it does not quantize (a subclass of Dense); the trial
        # names them itself (as_trained.not_quantizable).
        warnings.simplefilter("ignore")
        model.quantize("float8", filters=lambda layer: not getattr(layer, "lora_enabled", False))


def quantized_layers(model: Any) -> list[Any]:
    """``model``'s layers that Keras has quantized (their policy has a quantization mode)."""
    return [
        layer
        for layer in keras_private.tracked_layers(model) or []
        if getattr(getattr(layer, "dtype_policy", None), "quantization_mode", None)
    ]


def in_its_strategy(model: Any) -> Any:
    """The frame ``model`` was built in, to compile and build it again in: its
    ``tf.distribute`` strategy's scope (its variables are the strategy's, and an optimizer
    made outside it fails: "Mixing different tf.distribute.Strategy objects"); elsewhere
    nothing (a ``keras.distribution`` is global, and stays set)."""
    import contextlib

    strategy = keras_private.distribute_strategy(model)
    if keras.backend.backend() == "tensorflow" and strategy is not None:
        return strategy.scope()
    return contextlib.nullcontext()
