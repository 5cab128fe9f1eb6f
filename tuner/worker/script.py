"""A training script as its user runs it, up to its ``model.fit`` (issue 37).

A trial of ``script:train.py ARGS`` runs the script unmodified in the trial's worker, with the
trial's policy already set (so the script builds its model under it) and ``sys.argv`` as the
user would give it, and takes over its ``model.fit(...)`` call (the ``fit_call``-th: earlier
calls train as in the script): the model as the script built and compiled it and the data
exactly as the script passes it. Nothing after that ``fit`` runs. What the trial then does
with them is what it does with a model file's ``build_model()`` and ``make_dataset``: the data
becomes the trial's input at each batch size (:func:`input_at`), so the ranking and the
input-bound verdict are about the script's own pipeline.

:func:`run_script` is also how ``mptune run`` applies a tuned config to the script for real
(:mod:`tuner.worker.apply_script`): the same hook, which lets ``fit`` go on with the setup
applied (:meth:`FitCall.go_on`).
"""

from __future__ import annotations

import inspect
import itertools
import os
import runpy
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import keras

from tuner import keras_private
from tuner.trials.models import ModelSource
from tuner.worker.structure import input_kind, leading_dim
from tuner.worker.usercode import UserCodeError, call_user


@dataclass
class FitCall:
    """A script's ``model.fit(...)`` as it called it: the model and every argument, bound to
    fit's own parameters (``x``, ``y``, ``batch_size``, ``epochs``, ``callbacks``...)."""

    model: keras.Model
    arguments: dict[str, Any] = field(default_factory=dict)
    #: Keras' own ``fit``, to go on with (``mptune run``)
    fit: Callable[..., Any] | None = None
    #: where the script calls it (``train.py:40``), or the innermost line of the user's that led
    #: there (a fit in a module it imports)
    at: str | None = None
    #: the library's ``fit`` that called Keras' own with an input it made (``GemmaCausalLM.fit``:
    #: a KerasHub task batches the script's arrays into a tf.data pipeline); None where the
    #: script called Keras' ``fit`` itself
    made_by: str | None = None
    #: the size of the first batch its batched input gives, once drawn (:func:`first_batch`)
    drawn: list[int] = field(default_factory=list, repr=False)

    def go_on(self, **changed: Any) -> Any:
        """Keras' own ``fit`` on the script's model and arguments, ``changed`` ones replaced."""
        assert self.fit is not None
        return self.fit(self.model, **{**self.arguments, **changed})

    @property
    def x(self) -> Any:
        return self.arguments.get("x")

    @property
    def y(self) -> Any:
        return self.arguments.get("y")


@dataclass(frozen=True)
class HeldSetting:
    """A precision the script set itself (``set_global_policy``, ``keras.config.
    set_dtype_policy``), held off while a trial or ``mptune run`` runs it (issue 49): the
    policy it asked for, and where (``train.py:9``)."""

    policy: str
    at: str | None


class SetupOverridden(Exception):
    """The script's model is not built in the precision the trial names, whatever the trial
    set (its layers carry their own ``dtype=``): the trial cannot train that setup, and says
    which line of the script decides it instead of reporting a figure for it."""


#: Where mptune and the frameworks live: a frame outside them is the user's.
_NOT_USER = (
    os.path.dirname(os.path.dirname(os.path.abspath(keras.__file__ or ""))),
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
)


def _user_frame() -> str | None:
    """The innermost frame of the running stack in the user's code, as ``file:line``."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _not_users(frame.f_code.co_filename):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


@contextmanager
def policy_held(held: list[HeldSetting], hold: bool = True) -> Iterator[None]:
    """While it lasts, the global precision policy stays what mptune set: a call of the
    script's that sets it (every public name Keras has for it ends in the one global
    attribute ``dtype_policy``) is recorded in ``held`` and changes nothing. With ``hold``
    false the call is recorded and goes through: the script as it runs today (issue 70)."""

    def holding(original: keras_private.SetGlobalAttribute) -> keras_private.SetGlobalAttribute:
        def set_global_attribute(name: str, value: Any) -> None:
            if name == keras_private.GLOBAL_POLICY_ATTRIBUTE and not _keras_default():
                held.append(HeldSetting(str(getattr(value, "name", value)), _user_frame()))
                if hold:
                    return
            original(name, value)

        return set_global_attribute

    with keras_private.global_attribute_setter(holding):
        yield


def _keras_default() -> bool:
    """Whether the policy being set is Keras' own default, set by its getter the first time a
    layer asks for the global policy and none is set (``keras.config.dtype_policy()``): not a
    setting of the script's, so neither recorded nor held off (a KerasHub backbone's first
    layer met it; it read "float32 (set at train.py:18)", the line that built the backbone)."""
    getter = keras_private.policy_getter_code()
    frame = sys._getframe(2)  # Keras setter that called the hook, then its callers
    for _ in range(3):
        if frame is None:
            return False
        if frame.f_code is getter:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _FitReached(BaseException):
    """Stops the script at the ``fit`` a trial takes over (a BaseException, so that the
    script's own ``except Exception`` cannot swallow it)."""

    def __init__(self, call: FitCall) -> None:
        super().__init__("the script reached model.fit")
        self.call = call


def shown_name(source: ModelSource) -> str:
    """The script as the user named it, for messages."""
    return os.path.basename(source.path or source.name)


@contextmanager
def _as_the_user_runs_it(source: ModelSource) -> Iterator[None]:
    """``sys.argv`` as the user's command line, the script's folder first on ``sys.path``
    (its neighbours import as when it runs), both restored afterwards."""
    assert source.path is not None
    argv, path = sys.argv, list(sys.path)
    sys.argv = [source.path, *source.args]
    sys.path.insert(0, os.path.dirname(source.path))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = argv, path


@contextmanager
def fit_hook(on_fit: Callable[[FitCall], Any], fit_call: int) -> Iterator[list[int]]:
    """Route the ``fit_call``-th call of ``keras.Model.fit`` (every model's) to ``on_fit``;
    the other calls train as the script wrote them. Yields the count of calls so far."""
    original = keras.Model.fit
    signature = inspect.signature(original)
    calls = [0]

    def fit(self: keras.Model, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] != fit_call:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
        arguments.update(arguments.pop("kwargs", {}))
        return on_fit(FitCall(self, arguments, original, _user_frame(), _made_by(self)))

    keras.Model.fit = fit
    try:
        yield calls
    finally:
        keras.Model.fit = original


def _made_by(model: Any) -> str | None:
    """``Cls.fit`` where Keras' ``fit`` is called from a ``fit`` of a library's class between it
    and the script (a KerasHub task's ``PipelineModel.fit``), which hands it an input of its
    own making; None where the script's own code called it."""
    caller = sys._getframe(2)  # the hook's caller
    if caller.f_code.co_name != "fit" or not _not_users(caller.f_code.co_filename):
        return None
    return f"{type(model).__name__}.fit"


def _not_users(filename: str) -> bool:
    """Whether ``filename`` is mptune's, a framework's or a library's, not the user's."""
    name = os.path.abspath(filename)
    return name.startswith(_NOT_USER) or "site-packages" in name or "<" in name


def run_script(
    source: ModelSource,
    on_fit: Callable[[FitCall], Any],
    held: list[HeldSetting] | None = None,
    hold: bool = True,
) -> None:
    """Run the script as ``__main__``, its ``fit`` (the ``source.fit_call``-th) handed to
    ``on_fit``, the precision mptune set held against the script's own (recorded in ``held``;
    with ``hold`` false, recorded and let through: :func:`policy_held`).

    Raises:
        UserCodeError: the script failed (its own line named), or exited on its own before
            that ``fit`` (``sys.exit``).
        SystemExit: the script exited on its own after that ``fit``.
    """
    assert source.path is not None
    name = shown_name(source)
    holding = policy_held(held if held is not None else [], hold)
    with _as_the_user_runs_it(source), holding, fit_hook(on_fit, source.fit_call) as calls:
        try:
            call_user(
                lambda: runpy.run_path(source.path or "", run_name="__main__"),
                f"running {name}",
                source.path,
                name,
            )
        except SystemExit as exc:
            if calls[0] >= source.fit_call:
                raise  # after its fit: the script's own ending
            raise UserCodeError(
                f"{name} exited (sys.exit({exc.code!r})) before its {_which(source.fit_call)}: "
                "mptune tunes the script at that call"
            ) from None


def take_fit(
    source: ModelSource, held: list[HeldSetting] | None = None, hold: bool = True
) -> FitCall:
    """Run the script up to the ``fit`` the trial takes over, and stop it there; the
    precision the script set itself is recorded in ``held`` (:func:`policy_held`), and held
    off unless ``hold`` is false.

    Raises:
        UserCodeError: the script failed or exited first, ended without that ``fit``, or
            caught the stop at it (a bare ``except:``, named by its line).
    """
    stops: list[_FitReached] = []

    def stop(call: FitCall) -> Any:
        stops.append(_FitReached(call))
        raise stops[-1]

    try:
        run_script(source, stop, held, hold)
    except _FitReached as reached:
        return reached.call
    except UserCodeError:
        if not stops:
            raise
    if stops:
        at = catching_line(stops[-1])
        raise UserCodeError(
            f"{shown_name(source)} caught mptune's stop at its {_which(source.fit_call)}"
            + (f" in the except at {at}" if at else "")
            + ": a bare except (or except BaseException) catches it; catch Exception there, "
            "so that a trial can take over fit",
            location=at,
        )
    raise UserCodeError(
        f"{shown_name(source)} ended without calling its {_which(source.fit_call)}: "
        "mptune tunes a script at that call"
    )


def catching_line(exc: BaseException) -> str | None:
    """Where the user's code caught ``exc`` (``file:line`` of the ``except`` that did): the
    innermost ``try`` around a frame of its traceback, in a file of the user's, whose handler
    takes a BaseException (a bare ``except:``, ``except BaseException``)."""
    import ast
    import traceback

    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    for frame in reversed(frames):
        name = os.path.abspath(frame.filename)
        if name.startswith(_NOT_USER) or "site-packages" in name or frame.lineno is None:
            continue
        try:
            with open(name, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        found = None
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try) or not node.body:
                continue
            start, end = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            if not start <= frame.lineno <= end:
                continue
            for handler in node.handlers:
                kind = handler.type
                catches_all = kind is None or (
                    isinstance(kind, ast.Name) and kind.id == "BaseException"
                )
                if catches_all and (found is None or handler.lineno > found):
                    found = handler.lineno  # the innermost try's
        if found is not None:
            return f"{os.path.basename(name)}:{found}"
    return None


#: fit's arguments whose work a trial's timed steps leave out, in words.
_LEFT_OUT = ("validation_split", "validation_data", "callbacks", "class_weight", "sample_weight")


def left_out(call: FitCall) -> tuple[str, ...]:
    """What the script's fit does besides training that a trial's figure leaves out:
    validation (``validation_split=0.1``, ``validation_data``), its callbacks (by class), class
    or sample weights."""
    said = []
    for name in _LEFT_OUT:
        value = call.arguments.get(name)
        if value is None or (name == "validation_split" and not value):
            continue
        if name == "callbacks":
            kinds = [type(c).__name__ for c in value] if isinstance(value, (list, tuple)) else []
            if kinds:
                said.append(f"callbacks ({', '.join(kinds)})")
        elif name == "validation_split":
            said.append(f"validation_split={value}")
        else:
            said.append(name)
    return tuple(said)


def validation_of(call: FitCall) -> tuple[Any, Any] | None:
    """The data the script's fit validates on each epoch, as ``(x, y)`` or ``(dataset,
    None)``: its ``validation_data``, or the last ``validation_split`` of its arrays (as
    Keras takes it); None where it validates nothing."""
    data = call.arguments.get("validation_data")
    if data is not None:
        if isinstance(data, (tuple, list)):
            return (data[0], data[1] if len(data) > 1 else None)
        return (data, None)
    split = call.arguments.get("validation_split") or 0.0
    if not split or input_kind(call.x) != "arrays":
        return None
    samples = leading_dim(keras.tree.flatten(call.x)[0]) or 0
    first = int(samples * (1.0 - float(split)))
    if first >= samples:
        return None
    cut = keras.tree.map_structure(lambda a: a[first:], call.x)
    labels = None if call.y is None else keras.tree.map_structure(lambda a: a[first:], call.y)
    return (cut, labels)


def script_batch(call: FitCall) -> int | None:
    """The batch size the script's fit trains at: its ``batch_size`` for arrays (Keras' 32
    when it gives none), its input's own batch otherwise, where it can be read."""
    if input_kind(call.x) == "arrays":
        return int(call.arguments.get("batch_size") or 32)
    return batch_of(call.x)


def _which(n: int) -> str:
    """The ``fit`` a trial takes, in words."""
    return "model.fit" if n == 1 else f"model.fit call #{n}"


def batch_of(data: Any) -> int | None:
    """A batched input's own batch size: a tf.data.Dataset's static one, a PyDataset's first
    batch's; None where it cannot be read without drawing from it."""
    kind = input_kind(data)
    if kind == "tf_data":
        import tensorflow as tf

        leaves = tf.nest.flatten(data.element_spec)
        dims = [leaf.shape[0] if leaf.shape.rank else None for leaf in leaves]
        return int(dims[0]) if dims and dims[0] is not None else None
    if kind == "py_dataset":
        return samples_in(data[0]) if len(data) else None
    return None


def input_at(call: FitCall, batch_size: int) -> Any:
    """The script's data at ``batch_size``, as a model file's ``make_dataset(batch_size)``
    returns it: arrays as ``(x, y)`` (fit slices them); a tf.data.Dataset rebatched (as it is
    at the script's own batch); a PyDataset's samples regrouped (:class:`Rebatched`); a
    generator's stream regrouped as it goes (:func:`regrouped`: a generator is read once, so
    the trial's batches and fit's timed loop take turns on the one stream)."""
    kind = input_kind(call.x)
    if kind == "arrays":
        return (call.x, call.y)
    if kind == "generator":
        return regrouped(call.x, batch_size)
    own = batch_of(call.x)
    if own == batch_size or (kind == "tf_data" and own is None and first_batch(call) == batch_size):
        # Its own batching: a pipeline with no static batch, rebatched at the same size, would
        # lose its known length and add a step of mptune's to each batch.
        return call.x
    if kind == "tf_data":
        # A remainder batch kept or dropped as the script's own batching does (a static batch
        # dimension: it dropped it).
        return call.x.rebatch(batch_size, drop_remainder=own is not None)
    return Rebatched(call.x, batch_size)


def fit_arguments_at(call: FitCall, batch_size: int) -> dict[str, Any]:
    """What changes in the script's ``fit`` arguments for it to train at ``batch_size``
    (``mptune run``), every other as the script wrote them: arrays get ``batch_size``, a
    batched input is regrouped (:func:`input_at`) where its batch is another, and a
    ``steps_per_epoch`` the script gave is scaled so that an epoch still covers as many
    samples."""
    kind = input_kind(call.x)
    changed: dict[str, Any]
    if kind == "arrays":
        own = int(call.arguments.get("batch_size") or 32)  # Keras' default
        changed = {"batch_size": batch_size}
    elif kind == "generator":
        first = next(call.x, None)  # a generator is read once: its first batch goes back in
        if first is None:
            return {}
        own = samples_in(first)
        changed = {"x": regrouped(itertools.chain([first], call.x), batch_size)}
    else:
        own = batch_of(call.x) or first_batch(call)
        # At its own batch, the input stays the script's: a tf.data pipeline with no static
        # batch (a KerasHub task's fit batches arrays so) rebatched at the same size loses its
        # known length, and Keras then warns at the first epoch's end that it "ran out of data".
        changed = {} if own == batch_size else {"x": input_at(call, batch_size)}
    steps = call.arguments.get("steps_per_epoch")
    if steps and own and own != batch_size:
        changed["steps_per_epoch"] = max(1, -(-int(steps) * own // batch_size))
    return changed


def first_batch(call: FitCall) -> int:
    """How many samples the first batch of the script's batched input (a tf.data pipeline, a
    PyDataset: one fit iterates afresh each epoch) holds, drawn once and kept on ``call``."""
    if not call.drawn:
        call.drawn.append(samples_in(next(iter(call.x))))
    return call.drawn[0]


def regrouped(stream: Iterator[Any], batch_size: int) -> Iterator[Any]:
    """A stream of ``(x, y)`` batches of any size as batches of ``batch_size`` (the last may be
    short), every sample once and in order; the same batches where they already are."""
    held: Any = None
    for batch in stream:
        held = (
            batch if held is None else keras.tree.map_structure(lambda *a: _concat(a), held, batch)
        )
        while (leading_dim(held[0]) or 0) >= batch_size:
            yield keras.tree.map_structure(lambda a: a[:batch_size], held)
            held = keras.tree.map_structure(lambda a: a[batch_size:], held)
            if not leading_dim(held[0]):
                held = None
                break
    if held is not None and leading_dim(held[0]):
        yield held


class Rebatched(keras.utils.PyDataset):  # type: ignore[misc]
    """A user's PyDataset at another batch size: sample ``i * batch_size`` onwards, from the
    user's batches that hold them (joined, or cut), every sample once and in order, a short
    last batch kept. Each of the user's batches is drawn as fit would draw it (its workers and
    multiprocessing kept) and once where fit reads in order (the last one drawn is kept for
    the next), so the input's cost per sample stays the user's."""

    def __init__(self, inner: Any, batch_size: int) -> None:
        super().__init__(
            workers=getattr(inner, "workers", 1),
            use_multiprocessing=getattr(inner, "use_multiprocessing", False),
            max_queue_size=getattr(inner, "max_queue_size", 10),
        )
        self.inner, self.size = inner, batch_size
        count = len(inner)
        self.own = samples_in(inner[0]) if count else 0
        self.samples = (count - 1) * self.own + samples_in(inner[count - 1]) if count else 0
        self._last: tuple[int, Any] | None = None

    def __len__(self) -> int:
        return -(-self.samples // self.size)

    def _batch(self, j: int) -> Any:
        if self._last is None or self._last[0] != j:
            self._last = (j, self.inner[j])
        return self._last[1]

    def __getitem__(self, index: int) -> Any:
        start = index * self.size
        stop = min(start + self.size, self.samples)
        first, last = start // self.own, (stop - 1) // self.own
        parts = [self._batch(j) for j in range(first, last + 1)]
        joined = (
            parts[0] if len(parts) == 1 else keras.tree.map_structure(lambda *a: _concat(a), *parts)
        )
        offset = start - first * self.own
        return keras.tree.map_structure(lambda a: a[offset : offset + stop - start], joined)

    def on_epoch_end(self) -> None:
        hook = getattr(self.inner, "on_epoch_end", None)
        if callable(hook):
            hook()


def samples_in(batch: Any) -> int:
    """How many samples an ``(x, y)`` batch (or an ``x``) holds."""
    return leading_dim(batch[0] if isinstance(batch, (tuple, list)) else batch) or 0


def _concat(arrays: tuple[Any, ...]) -> Any:
    import numpy as np

    return np.concatenate([np.asarray(a) for a in arrays])
