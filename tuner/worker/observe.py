"""What a training script trains today, observed (issue 70): the script runs as its user runs
it, its own precision let through (recorded where it sets it, never held off), up to its
``fit``; what that ``fit`` would train is read back from the model and the data it got, and
sent as one ``observed`` message. Nothing trains.

The search makes the setup it reads its baseline, trial #0: "what you run today", against
which every speed-up is stated (:func:`tuner.trials.observe.observe_script`). What is read:

- the precision the model's layers compute in and keep their weights in
  (:func:`tuner.worker.as_trained.layer_policy`: a full ``bfloat16`` policy is its own),
  however the script set it (a literal, a variable, an argparse default, a config file, a
  ``dtype=``), and the line that set it where the script called Keras' setter;
- the batch size its ``fit`` gets (``batch_size=``, a batched tf.data.Dataset's element spec, a
  PyDataset's or a generator's first batch), at the line of its ``fit``;
- what it compiled with: ``jit_compile`` as Keras resolved it, ``steps_per_execution``, its
  optimizer's loss scaling and ``gradient_accumulation_steps``, float8 layers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tuner.policies import JAX, KNOWN_POLICIES
from tuner.setup import Setup
from tuner.trials.events import Phase
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    from tuner.worker.channel import Channel
    from tuner.worker.state import TrialContext


def run(spec: TrialSpec, source: ModelSource, channel: Channel, context: TrialContext) -> None:
    """Observe the script of ``source`` and send what it trains (``observed``)."""
    import keras

    from tuner import keras_setup
    from tuner.worker import script

    context.enter(Phase.BUILD, channel)
    keras_setup.set_seed(spec.seed)
    held: list[script.HeldSetting] = []
    with compile_noted() as compiled_at:
        call = script.take_fit(source, held, hold=False)
    batch = first_batch_size(call)
    setup, at, reason = setup_of(call, held, batch, keras.backend.backend())
    if id(call.model) in compiled_at:
        at["compile"] = compiled_at[id(call.model)]
    channel.emit("observed", setup=setup, at=at, reason=reason)


@contextmanager
def compile_noted() -> Iterator[dict[int, str]]:
    """While it lasts, where the script compiles each model (``train.py:31``), by the model's
    ``id``, so that its compile settings are named by their line."""
    import keras

    from tuner.worker.script import _user_frame

    original = keras.Model.compile
    where: dict[int, str] = {}

    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        at = _user_frame()
        if at is not None:
            where[id(self)] = at
        return original(self, *args, **kwargs)

    keras.Model.compile = compile
    try:
        yield where
    finally:
        keras.Model.compile = original


def first_batch_size(call: Any) -> int | None:
    """The batch size ``call``'s fit gets: its ``batch_size`` for arrays, else its input's own
    (:func:`tuner.worker.script.script_batch`), and where that has no static size (a tf.data
    pipeline batched without ``drop_remainder``, a generator), its first batch's. Drawing it is
    harmless: nothing trains after this (a dataset is iterated afresh each epoch anyway)."""
    from tuner.worker import script
    from tuner.worker.structure import input_kind

    batch = script.script_batch(call)
    if batch is not None or input_kind(call.x) not in ("tf_data", "generator"):
        return batch
    first = next(iter(call.x), None)
    return script.samples_in(first) if first is not None else None


def setup_of(
    call: Any, held: list[Any], batch: int | None, backend: str
) -> tuple[dict[str, Any] | None, dict[str, str], str | None]:
    """The setup ``call``'s fit trains (``Setup.to_dict``), where each part is set, and why
    it is no setup mptune can run (None where it is one)."""
    from tuner.worker import as_trained

    model = call.model
    got = as_trained.read(model)
    at: dict[str, str] = {}
    if held and held[-1].at:
        at["policy"] = held[-1].at
    if call.at:
        at["batch_size"] = call.at
    policy = got["policy"]
    if policy not in KNOWN_POLICIES:
        return None, at, f"its model computes in {policy}, a policy mptune does not know"
    if batch is None:
        return None, at, "the batch size its fit gets cannot be read from its input"
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        return None, at, "its model is not compiled when it calls fit"
    optimizer = model.optimizer
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    accumulation = int(getattr(inner, "gradient_accumulation_steps", None) or 1)
    jit = bool(got.get("jit_compile"))
    try:
        setup = Setup(
            policy,
            batch,
            got.get("loss_scale") or "none",
            backend=backend,
            xla=jit and backend != JAX,  # JAX always compiles: its setups' xla is False
            float8=got.get("quantized") == "float8",
            steps_per_execution=int(got.get("steps_per_execution") or 1),
            gradient_accumulation_steps=accumulation,
        )
    except ValueError as exc:
        return None, at, f"its setup is none mptune runs: {exc}"
    return setup.to_dict(), at, None
