"""What a user's data is, as ``fit`` takes it: the kind of input (arrays, a ``tf.data``
dataset, a ``PyDataset``, a generator) and the sample count of a structure of arrays. Read by
the loader, by a training script's stand-in for ``fit`` and by fit's timed loop alike, below
all of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras


def input_kind(data: Any) -> str:
    """What the user's ``make_dataset`` returned, as ``fit`` takes it: ``tf_data``,
    ``py_dataset`` (a ``keras.utils.PyDataset``), ``generator`` (an iterator of batches) or
    ``arrays`` (a tuple ``(x, y)``, checked where it is read)."""
    if is_tf_dataset(data):
        return "tf_data"
    if isinstance(data, keras.utils.PyDataset):
        return "py_dataset"
    if isinstance(data, Iterator):
        return "generator"
    return "arrays"


def is_tf_dataset(data: Any) -> bool:
    """A ``tf.data.Dataset``, told without importing TensorFlow (under JAX or PyTorch it is
    imported only by the user's own code)."""
    return any(
        cls.__name__ == "DatasetV2" and cls.__module__.startswith("tensorflow")
        for cls in type(data).__mro__
    )


def leading_dim(value: Any) -> int | None:
    """The sample count of an array or of any structure of them (dicts, nested tuples and
    lists, as ``fit`` takes): its first array's leading dimension."""
    for leaf in keras.tree.flatten(value):
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape):
            return int(shape[0]) if shape[0] is not None else None
    return None
