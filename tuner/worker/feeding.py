"""The input counted: how fast the user's input reaches the device the way ``fit`` feeds it.

A trial's steps train from a pool of batches kept in memory (on the device, on JAX and
PyTorch), so its figure is what the device can do. ``fit`` gets its batches from the user's
input: their ``make_dataset(batch_size)`` dataset, or arrays sliced, shuffled and copied by
Keras' own data adapter. When the input cannot keep up, mixed precision that doubles the
device's rate gains nothing. After the measured steps a trial times the input alone, as
``fit``'s iterator on this backend delivers it (:meth:`Backend.deliver
<tuner.worker.backends.Backend.deliver>` puts each batch where the step reads it), and the
parent reports the lower of the two rates as the one ``fit`` can reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from tuner.worker import backends, loading
from tuner.worker.usercode import UserCodeError, call_user, first_line

#: The input is timed for at most this long (or the trial's measured window, if shorter)...
INPUT_SECONDS = 1.0
#: ... and at least this many batches after the first (which starts the pipeline, untimed).
MIN_BATCHES = 3
#: It stops early once it delivers this many times the device's rate: then it cannot be the
#: bound where fit makes batches while the device trains (overlapped), and costs under 5% of
#: the time where fit makes them between steps (serial).
CLEARLY_FASTER = {True: 3.0, False: 20.0}


@dataclass(frozen=True)
class Feed:
    """What ``fit`` would be given: ``x`` (and ``y`` for arrays), what kind of input it is
    (``tf_data``: the user's ``tf.data.Dataset``; ``arrays``: the user's arrays;
    ``synthetic``: mptune's own arrays, where the user's pipeline is not known), and in
    words."""

    x: Any
    y: Any
    kind: str
    fed_by: str


def fit_feed(source: Any, loaded: loading.LoadedModel, batch_size: int, batches: list[Any]) -> Feed:
    """The input ``fit`` would train from at ``batch_size``: the user's ``make_dataset``
    again (a fresh dataset, as their script makes it), else the trial's batches as arrays."""
    make = getattr(loaded.module, "make_dataset", None) if loaded.module else None
    if callable(make):
        what = f"make_dataset({batch_size})"
        data = call_user(lambda: make(batch_size), what, source.path, source.spec)
        if loading._is_tf_dataset(data):
            return Feed(data, None, "tf_data", f"{what}, a tf.data.Dataset, as fit iterates it")
        x, y = loading.fit_structure((data[0], data[1]))
        return Feed(
            x, y, "arrays", f"{what}'s arrays through Keras' data adapter, as fit slices them"
        )
    if source.kind == "builtin":
        fed_by = "the built-in workload's arrays through Keras' data adapter, as fit slices them"
    else:
        fed_by = (
            "arrays in memory through Keras' data adapter (mptune's synthetic data: your own "
            "input is not known to it; define make_dataset(batch_size) to have it counted)"
        )
    xs = [batch[0] for batch in batches]
    ys = [batch[1] for batch in batches]
    x = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *xs)
    y = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *ys)
    return Feed(x, y, "arrays" if source.kind == "builtin" else "synthetic", fed_by)


def input_rate(
    feed: Feed, batch_size: int, seconds: float, device_rate: float | None, on_gpu: bool
) -> dict[str, Any]:
    """Time ``feed`` delivered to the device in batches of ``batch_size``, epoch after epoch
    as ``fit`` runs them, for up to ``seconds`` (stopping early once it is
    :data:`CLEARLY_FASTER` than ``device_rate``): the ``input`` part of the trial's result,
    with whether ``fit`` overlaps making batches with training on this backend and device."""
    from keras.src.trainers.data_adapters import get_data_adapter

    backend = backends.current()
    overlapped = backend.overlaps_input(on_gpu)
    adapter = get_data_adapter(feed.x, feed.y, batch_size=batch_size, shuffle=True)
    batches = _epochs(adapter, backend.fit_epochs(adapter))
    _deliver(backend, batches, on_gpu)  # the first batch starts the pipeline: not timed
    count = samples = 0
    start = time.perf_counter()
    elapsed = 0.0
    while count < MIN_BATCHES or elapsed < seconds:
        samples += _deliver(backend, batches, on_gpu)
        count += 1
        elapsed = time.perf_counter() - start
        rate = samples / elapsed if elapsed > 0 else float("inf")
        if (
            count >= MIN_BATCHES
            and device_rate
            and rate >= CLEARLY_FASTER[overlapped] * device_rate
        ):
            break
    return {
        "samples_per_second": samples / elapsed if elapsed > 0 else None,
        "overlapped": overlapped,
        "kind": feed.kind,
        "fed_by": feed.fed_by,
        "batches": count,
        "seconds": elapsed,
    }


def _epochs(adapter: Any, epoch: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """The adapter's batches, epoch after epoch (each epoch's iterator made anew, as in
    ``fit``)."""
    while True:
        adapter.on_epoch_begin()
        empty = True
        for batch in epoch():
            empty = False
            yield batch
        adapter.on_epoch_end()
        if empty:
            raise UserCodeError("the input yields no batches")


def _deliver(backend: backends.Backend, batches: Iterator[Any], on_gpu: bool) -> int:
    """The next batch, on the device and ready; its sample count."""
    batch = next(batches)
    batch = backend.deliver(batch, on_gpu)
    return loading._leading_dim(batch[0] if isinstance(batch, (tuple, list)) else batch) or 0


def measure(
    feed: Callable[[], Feed],
    batch_size: int,
    seconds: float,
    device_rate: float | None,
    on_gpu: bool,
) -> tuple[dict[str, Any] | None, str | None]:
    """The input's figures, or None and why they could not be had (said as a warning: the
    trial's own figures stand)."""
    seconds = min(seconds, INPUT_SECONDS)
    try:
        return input_rate(feed(), batch_size, seconds, device_rate, on_gpu), None
    except Exception as exc:  # noqa: BLE001 - the device's figure stands without it
        why = str(exc) if isinstance(exc, UserCodeError) else first_line(exc)
        return None, f"the input's rate could not be measured: {why}"
