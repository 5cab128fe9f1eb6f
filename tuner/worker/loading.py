"""Loading the user's model (a ``.py`` file or a ``.keras`` file) and their data."""

from __future__ import annotations

import collections
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import keras
import numpy as np

from tuner import keras_private, keras_setup
from tuner.trials.models import ModelSource
from tuner.worker.structure import input_kind, leading_dim
from tuner.worker.usercode import UserCodeError, call_user, first_line

#: The name the user's model file is imported under.
USER_MODULE = "mptune_user_model"
#: Upper bound for the synthetic/cached data pool held in memory.
_POOL_BYTES = 256 * 2**20
_POOL_BATCHES = 8

#: One batch: inputs and targets, and their sample weights where the user's input gives them
#: (``(x, y, sample_weight)``, as ``fit`` takes a dataset's elements)
Batch = tuple[Any, ...]


@dataclass
class LoadedModel:
    """A model ready for the trial, what the user compiled it with (if they did), and their
    input at a batch size where they give one (a model file's ``make_dataset``, a training
    script's data as it passes it to ``fit``), named in words by ``input_words`` (its
    ``{batch}`` the batch size)."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer | None
    loss: Any
    jit_compile: Any = "auto"
    module: ModuleType | None = None
    make_dataset: Callable[[int], Any] | None = None
    input_words: str = "make_dataset({batch})"
    #: what else the trial compiles the model with (a script's metrics: :func:`compile_extras`)
    compile_extras: dict[str, Any] = field(default_factory=dict)
    #: a training script's model as the script handed it to fit, read back (what the user runs
    #: today: :class:`tuner.trials.result.AsTrained`), and the data its fit validates on
    script: Any = None
    validation: tuple[Any, Any] | None = None
    #: the library's ``fit`` that makes the input Keras' fit iterates (``GemmaCausalLM.fit``),
    #: where one does (:attr:`tuner.worker.script.FitCall.made_by`)
    input_made_by: str | None = None


def load_user_model(source: ModelSource, policy: str) -> LoadedModel:
    """Load a user model under ``policy`` (already set as the global policy)."""
    if source.kind == "python":
        return _load_python(source)
    if source.kind == "script":
        return _load_script(source, policy)
    return _load_keras_file(source, policy)


def _load_script(source: ModelSource, policy: str) -> LoadedModel:
    """A training script's model and data, as it hands them to ``fit``
    (:mod:`tuner.worker.script`), built under ``policy`` whatever precision the script sets
    itself (held off, and read back: :class:`~tuner.worker.script.SetupOverridden` where its
    layers are not built in ``policy`` all the same)."""
    from tuner.trials.result import AsTrained
    from tuner.worker import as_trained, script

    held: list[script.HeldSetting] = []
    call = script.take_fit(source, held)
    name = script.shown_name(source)
    if held:
        _refuse_quantized(keras.dtype_policies.get(held[-1].policy), held[-1].at)
    _check_is_model(call.model, f"the model {name} passes to fit")
    optimizer, loss, jit = compiled_with(call.model)
    if loss is None and keras_setup.own_step(call.model) is None:
        raise UserCodeError(f"{name} calls fit on a model it did not compile with a loss")
    built = as_trained.layer_policy(call.model)
    own = as_trained.read(call.model)
    if held:
        # What the script runs as written: the precision it asked for, where it asked.
        own.update(policy=held[-1].policy, policy_at=held[-1].at)
    elif built != policy:
        own["policy_at"] = _line_naming(source, built)
    else:
        # Built under the trial's policy, the script sets none itself: it runs under Keras'
        # default as the user runs it.
        own["policy"] = "float32"
    own["loss_scale"] = _scripts_loss_scale(call.model, own["policy"], own.get("loss_scale"))
    if built != policy:
        at = own.get("policy_at")
        raise script.SetupOverridden(
            f"{name} builds its model's layers in {built}"
            + (f" (dtype set on them, {at})" if at else " (dtype set on its layers)")
            + f": a trial cannot train it in {policy}, and reports no figure for it"
        )
    return LoadedModel(
        call.model,
        optimizer,
        loss,
        jit,
        compile_extras=compile_extras(call.model),
        make_dataset=lambda batch_size: script.input_at(call, batch_size),
        input_words=f"{name}'s own fit data at batch {{batch}}"
        + (f" as {call.made_by} makes it" if call.made_by else ""),
        input_made_by=call.made_by,
        script=AsTrained(
            **own, batch_size=script.script_batch(call), left_out=script.left_out(call)
        ),
        validation=script.validation_of(call),
    )


def _scripts_loss_scale(model: keras.Model, policy: str, read: str | None) -> str | None:
    """The loss scaling the script's own run has, under its own ``policy``, where ``read`` is
    what the model compiled under the trial's policy has. Keras' ``compile()`` wraps the
    optimizer by itself (``auto_scale_loss``) only under mixed_float16: a wrap the trial's
    mixed_float16 made is not the script's (a KerasHub task compiled in its constructor, or any
    script, under a trial of mixed_float16 beside its own mixed_bfloat16), and under its own
    mixed_float16 the script has one although the trial's policy made none. A
    ``LossScaleOptimizer`` or a ``loss_scale_factor`` the script passed is its own."""
    asked = keras_private.compile_arguments(model)
    optimizer = asked.get("optimizer")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or not str(read or "").startswith(
        "dynamic"
    ):
        own_scale = read
    else:
        own_scale = "none"  # the trial's auto wrap
    if policy == "mixed_float16" and own_scale == "none" and asked.get("auto_scale_loss", True):
        return "dynamic"
    return own_scale


def _refuse_quantized(policy: Any, at: str | None) -> None:
    """A global dtype policy that quantizes (``float8_from_mixed_bfloat16``, set by the
    user's code) is refused in one line: Keras builds the layers' quantized variables with the
    layers, and cannot then build the model to train it (keras-team/keras#23479: fit fails with
    "Unable to automatically build the model"). Keras quantizes a built model instead."""
    mode = getattr(policy, "quantization_mode", None)
    if mode is None:
        return
    name = str(policy.name)
    base = name.split("_from_", 1)[1] if "_from_" in name else "a float policy"
    raise UserCodeError(
        f"the global dtype policy {name} set here leaves Keras unable to build the model to "
        f"train it (keras-team/keras#23479): set {base} instead, and quantize the built model "
        f'with model.quantize("{mode}")',
        at,
    )


def _line_naming(source: ModelSource, policy: str, whole_path: bool = False) -> str | None:
    """The first line of the file that names ``policy`` (a layer's ``dtype=``, a global
    policy), as ``file:line`` (the file's whole path where ``whole_path``, as a model file's
    errors are located); None where none does (it is set in a module the file imports)."""
    path = source.path or ""
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if policy in line or (policy == "float32" and "dtype" in line):
                    return f"{path if whole_path else os.path.basename(path)}:{number}"
    except OSError:
        pass
    return None


def _load_python(source: ModelSource) -> LoadedModel:
    assert source.path is not None
    directory = os.path.dirname(source.path)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # let the file import its neighbours
    spec = importlib.util.spec_from_file_location(USER_MODULE, source.path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    loader = spec.loader
    call_user(
        lambda: loader.exec_module(module), f"importing {source.spec}", source.path, source.spec
    )
    build = getattr(module, "build_model", None)
    if not callable(build):
        raise UserCodeError(f"{source.spec}: build_model is not a function")
    model = call_user(build, "build_model()", source.path, source.spec)
    _check_is_model(model, "build_model()")
    own = keras.config.dtype_policy()
    _refuse_quantized(own, _line_naming(source, own.name, whole_path=True))
    optimizer, loss, jit = compiled_with(model)
    make = getattr(module, "make_dataset", None)
    return LoadedModel(model, optimizer, loss, jit, module, make if callable(make) else None)


def compile_extras(model: keras.Model) -> dict[str, Any]:
    """What else the user compiled ``model`` with that ``fit`` computes each step (metrics,
    weighted metrics, loss weights), to compile it again with: a script's trial times the
    fit it calls."""
    config = keras_private.compile_arguments(model)
    keys = ("metrics", "weighted_metrics", "loss_weights")
    return {k: config[k] for k in keys if config.get(k) is not None}


def _check_is_model(model: Any, what: str) -> None:
    if isinstance(model, keras.Model):
        return
    module = type(model).__module__
    if module.startswith(keras_private.LEGACY_MODULES):
        raise UserCodeError(
            f"{what} returned a tf_keras (Keras 2) model: mptune needs a "
            "Keras 3 model (import keras, not tf.keras with TF_USE_LEGACY_KERAS)"
        )
    raise UserCodeError(f"{what} returned {type(model).__name__}, not a keras.Model")


def fresh_optimizer(optimizer: Any) -> Any:
    """A new optimizer from ``optimizer``'s config (no variables, no steps taken), for a model
    compiled again; a name or None is passed on as it is."""
    if optimizer is None or isinstance(optimizer, str):
        return optimizer
    return type(optimizer).from_config(optimizer.get_config())


def compiled_with(model: keras.Model) -> tuple[Any, Any, Any]:
    """The user's optimizer (a fresh copy, loss scaling unwrapped) and loss, if compiled."""
    optimizer = getattr(model, "optimizer", None)
    if not getattr(model, "compiled", False) or optimizer is None:
        return None, None, "auto"
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    config = optimizer.get_config()
    config["loss_scale_factor"] = None  # the trial decides loss scaling
    fresh = type(optimizer).from_config(config)
    return fresh, model.loss, getattr(model, "jit_compile", "auto")


def _load_keras_file(source: ModelSource, policy: str) -> LoadedModel:
    original = call_user(
        lambda: keras.saving.load_model(source.path), f"loading {source.spec}", None
    )
    _check_is_model(original, f"loading {source.spec}")
    optimizer, loss, jit = compiled_with(original)
    config = keras.saving.serialize_keras_object(original)
    _retarget_dtype_policies(config, policy)
    model = call_user(
        lambda: keras.saving.deserialize_keras_object(config),
        f"rebuilding {source.spec} under {policy}",
        None,
    )
    model.set_weights(original.get_weights())
    return LoadedModel(model, optimizer, loss, jit)


def _retarget_dtype_policies(config: Any, policy: str) -> None:
    """Point every layer that used the model's usual dtype policy at ``policy``.

    A saved model records a policy per layer. Layers on the model's most common policy get the
    trial's; a layer the author pinned to another (a float32 softmax) keeps its own.
    """
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            dtype = node.get("dtype")
            if isinstance(dtype, dict) and "Policy" in str(dtype.get("class_name", "")):
                found.append(dtype)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    names = [d.get("config", {}).get("name") for d in found]
    if not names:
        return
    usual = collections.Counter(names).most_common(1)[0][0]
    for dtype in found:
        if dtype.get("config", {}).get("name") == usual:
            dtype["config"]["name"] = policy


def user_batches(
    source: ModelSource, loaded: LoadedModel, batch_size: int, n_batches: int, seed: int
) -> list[Batch]:
    """Batches from the user's input (``make_dataset(batch_size)``, a script's data), or
    synthesised from the model."""
    make = loaded.make_dataset
    if make is not None:
        what = loaded.input_words.format(batch=batch_size)
        data = call_user(lambda: make(batch_size), what, source.path, source.spec)
        batches = _batches_from_user_data(data, batch_size, n_batches, source, what)
    else:
        batches = synthesise_batches(loaded.model, loaded.loss, batch_size, n_batches, seed)
    return [fit_structure(batch) for batch in batches]


def fit_structure(batch: Batch) -> Batch:
    """A batch as Keras' data adapters hand it to the model in ``fit``: lists made tuples
    (``tree.lists_to_tuples``), so that a list of inputs is a structure of its own and not one
    tensor (which inputs of different shapes cannot be). Sample weights stay (in the
    structure of the targets: a dict of them per named output), as ``fit`` keeps them."""
    weighted = len(batch) > 2 and batch[2] is not None
    return tuple(keras.tree.lists_to_tuples(tuple(batch[:3] if weighted else batch[:2])))


def _batches_from_user_data(
    data: Any, batch_size: int, n_batches: int, source: ModelSource, named: str
) -> list[Batch]:
    what = f"{named} in {source.spec}" if source.kind == "python" else named
    kind = input_kind(data)
    if kind in ("py_dataset", "generator"):
        # A PyDataset's batches by index, a generator's in turn: what fit's adapter reads.
        elements = (data[i] for i in range(len(data))) if kind == "py_dataset" else data
        return _first_batches(elements, n_batches, batch_size, what, source, "an input")
    if kind == "tf_data":
        # On every backend: a tf.data.Dataset's elements as NumPy arrays (its own
        # as_numpy_iterator), which Keras takes on JAX and PyTorch as it takes arrays.
        try:
            iterator = data.as_numpy_iterator()
        except (TypeError, ValueError) as exc:
            raise UserCodeError(
                f"{what} returned a tf.data.Dataset whose elements are not all tensors, so it "
                f"cannot feed the {os.environ.get('KERAS_BACKEND', 'tensorflow')} backend: "
                f"{first_line(exc)}; return a tuple (x, y) of arrays instead"
            ) from exc
        return _first_batches(iterator, n_batches, batch_size, what, source, "a dataset")
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        x, y = data[0], data[1]
        n = leading_dim(x)
        if y is None:  # inputs alone: a model whose own train_step needs no targets
            data = (x,)
        elif n is None or n != leading_dim(y):
            raise UserCodeError(f"{what} returned x and y with different sample counts")
        if n is None:
            raise UserCodeError(f"{what} returned inputs with no sample count")
        count = max(1, min(n_batches, n // batch_size))
        if n < batch_size:
            raise UserCodeError(
                f"{what} returned {n} samples, fewer than one batch of {batch_size}"
            )
        parts = data if len(data) == 3 and data[2] is not None else data[:2]
        return [
            tuple(_slice(part, i * batch_size, batch_size) for part in parts) for i in range(count)
        ]
    raise UserCodeError(
        f"{what} returned {type(data).__name__}: return a tf.data.Dataset, a "
        "keras.utils.PyDataset or a generator of (x, y) batches, or a tuple (x, y) of arrays"
    )


def _first_batches(
    elements: Iterator[Any],
    n_batches: int,
    batch_size: int,
    what: str,
    source: ModelSource,
    called: str,
) -> list[Batch]:
    """The first ``n_batches`` (x, y) batches of the user's input (fewer where it ends), each
    drawn as the user's code (its errors theirs); ``called``: the input in words, for one that
    yields none."""
    batches = []
    for _ in range(n_batches):
        try:
            element = call_user(lambda: next(elements), what, source.path, source.spec)
        except UserCodeError as exc:
            if isinstance(exc.__cause__, StopIteration):
                break
            raise
        batches.append(_as_batch(element, what))
    if not batches:
        raise UserCodeError(f"{what} returned {called} that yields no batches")
    _check_batch_size(batches[0], batch_size, what)
    return batches


def _as_batch(element: Any, what: str) -> Batch:
    if isinstance(element, (tuple, list)) and len(element) >= 2:
        return tuple(element[:3])  # with its sample weights, where it has them
    if not isinstance(element, (tuple, list)):
        return (element,)  # inputs alone, as a model with its own train_step is fed
    raise UserCodeError(f"{what} yields {type(element).__name__}: yield (x, y) pairs")


def _check_batch_size(batch: Batch, batch_size: int, what: str) -> None:
    n = leading_dim(batch[0])
    if n is not None and n != batch_size:
        raise UserCodeError(
            f"{what} yields batches of {n} samples, not {batch_size}: "
            "batch the dataset with the batch_size argument"
        )


def _slice(value: Any, start: int, size: int) -> Any:
    """Samples ``start`` to ``start + size`` of every array in ``value``, its structure kept."""
    return keras.tree.map_structure(lambda v: v[start : start + size], value)


def pool_size(sample_bytes: int, batch_size: int) -> int:
    """How many distinct batches to keep: up to 8, within a 256 MB pool."""
    return max(1, min(_POOL_BATCHES, _POOL_BYTES // max(1, sample_bytes * batch_size)))


#: What a sample is taken to weigh when the model's inputs do not say (a model without known
#: input shapes, whose data comes from its make_dataset).
_SAMPLE_BYTES_UNKNOWN = 4 * 1024


def model_sample_bytes(model: Any) -> int:
    """What one sample of the model's inputs weighs (its inputs' shapes and dtypes, unknown
    dimensions taken as 1), so that a pool of large samples (ResNet50's 224x224x3 images: 588
    KiB) stays within the pool's bytes; 4 KiB where the inputs are not known."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return _SAMPLE_BYTES_UNKNOWN
    total = 0
    for tensor in inputs:
        dims = [int(d) if d else 1 for d in tuple(tensor.shape)[1:]]
        try:
            itemsize = np.dtype(str(getattr(tensor, "dtype", "float32"))).itemsize
        except TypeError:
            itemsize = 4  # a string input: its words, about a word's size
        total += int(np.prod(dims, dtype=np.int64)) * itemsize
    return max(1, total)


def synthesise_batches(
    model: keras.Model, loss: Any, batch_size: int, n_batches: int, seed: int
) -> list[Batch]:
    """Random inputs shaped like the model's inputs, targets shaped for its loss."""
    inputs = getattr(model, "inputs", None)
    outputs = getattr(model, "outputs", None)
    if not inputs or not outputs:
        raise UserCodeError(
            "the model has no known input shape, so mptune cannot make data for "
            "it: start it with keras.Input(...) or define make_dataset(batch_size)"
        )
    rng = np.random.default_rng(seed)
    vocab = _smallest_vocabulary(model)
    loss_name = _loss_name(loss)
    # In the structure the model was built with (a dict of named inputs is fed a dict), as the
    # user would pass it to fit; a single input is its array.
    x_struct = _structure(keras_private.input_structure(model), inputs)
    y_struct = _structure(keras_private.output_structure(model), outputs)
    ids = float_token_inputs(model, x_struct)
    words = string_vocabularies(model)

    def input_like(i: int, tensor: Any) -> np.ndarray:
        shape = _shape(tensor, batch_size)
        if i in ids:  # whole numbers, as the user's ids are, in a float array
            return rng.integers(0, ids[i], size=shape).astype(np.float32)
        if i in words:
            return rng.choice(words[i], size=shape)
        return _random_like(tensor, batch_size, rng, vocab)

    batches = []
    for _ in range(n_batches):
        xs = [input_like(i, t) for i, t in enumerate(inputs)]
        ys = [_target_like(t, batch_size, rng, loss_name) for t in outputs]
        batches.append(
            (keras.tree.pack_sequence_as(x_struct, xs), keras.tree.pack_sequence_as(y_struct, ys))
        )
    return batches


def _structure(struct: Any, tensors: list[Any]) -> Any:
    """The structure of a functional model's inputs or outputs (``tensors`` is it flattened);
    one tensor stands alone, and a model that keeps no structure gets a tuple."""
    if struct is None or len(keras.tree.flatten(struct)) != len(tensors):
        struct = tuple(tensors)
    if isinstance(struct, (list, tuple)) and len(struct) == 1:
        return struct[0]
    return struct


def _shape(tensor: Any, batch_size: int) -> tuple[int, ...]:
    dims = tuple(tensor.shape)[1:]
    if any(d is None for d in dims):
        raise UserCodeError(
            f"input {getattr(tensor, 'name', '')!r} has a variable dimension "
            f"{tuple(tensor.shape)}: define make_dataset(batch_size)"
        )
    return (batch_size, *dims)


def string_vocabularies(model: keras.Model) -> dict[int, np.ndarray]:
    """The string inputs (by position in ``model.inputs``) and the words to feed them: the
    vocabulary of the ``StringLookup`` they go into (or one held by the layer they go into),
    its out-of-vocabulary token left out. A string input with none is the user's to feed:
    :class:`UserCodeError` naming it and ``make_dataset``."""
    found: dict[int, np.ndarray] = {}
    for i, tensor in enumerate(getattr(model, "inputs", None) or []):
        if "string" not in str(tensor.dtype):
            continue
        words = [
            str(word)
            for layer in _consumers(model, tensor)
            for inner in all_layers(layer, include_self=True)
            if isinstance(inner, keras.layers.StringLookup)
            for word in inner.get_vocabulary(include_special_tokens=False)
        ]
        if not words:
            raise UserCodeError(
                f"input {getattr(tensor, 'name', '')!r} takes strings, and mptune finds no "
                "StringLookup vocabulary to make them from: define make_dataset(batch_size)"
            )
        found[i] = np.array(words)
    return found


def _random_like(tensor: Any, batch_size: int, rng: np.random.Generator, vocab: int) -> np.ndarray:
    shape = _shape(tensor, batch_size)
    if "int" in str(tensor.dtype):
        return rng.integers(0, vocab, size=shape).astype(str(tensor.dtype))
    return rng.standard_normal(shape, dtype=np.float32)


def _target_like(
    tensor: Any, batch_size: int, rng: np.random.Generator, loss_name: str
) -> np.ndarray:
    shape = _shape(tensor, batch_size)
    classes = shape[-1] if len(shape) > 1 else 1
    if "sparse_categorical" in loss_name:
        return rng.integers(0, max(classes, 1), size=shape[:-1]).astype(np.int32)
    if "categorical" in loss_name:
        labels = rng.integers(0, max(classes, 1), size=shape[:-1])
        return np.eye(classes, dtype=np.float32)[labels]
    if "binary" in loss_name or "hinge" in loss_name:
        return rng.integers(0, 2, size=shape).astype(np.float32)
    return rng.standard_normal(shape, dtype=np.float32)


def _loss_name(loss: Any) -> str:
    if loss is None:
        return "mean_squared_error"
    if isinstance(loss, str):
        return loss.lower()
    name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__
    return str(name).lower()


def _smallest_vocabulary(model: keras.Model) -> int:
    """Integer inputs get ids below the smallest embedding table anywhere in the model (inside
    custom layers too), so that every id is in range whichever table it reaches."""
    return min(_table_sizes(model), default=100)


def _table_sizes(layer: Any) -> list[int]:
    """The rows of every embedding table in ``layer`` (itself included), smallest first."""
    return sorted(
        {
            int(inner.input_dim)
            for inner in all_layers(layer, include_self=True)
            if isinstance(inner, keras.layers.Embedding)
        }
    )


def all_layers(layer: Any, include_self: bool = False) -> list[Any]:
    """Every layer ``layer`` holds, at any depth (and itself, with ``include_self``): the
    layers of nested models, and those a custom layer keeps in its attributes (Keras tracks
    them: ``Layer._flatten_layers``), which ``Model.layers`` does not show."""
    found = keras_private.tracked_layers(layer, include_self)
    if found is None:
        return [layer] if include_self else []
    return found


def float_token_inputs(model: keras.Model, x_struct: Any = None) -> dict[int, int]:
    """The model inputs (by position in ``model.inputs``) of a float dtype that carry token
    ids, with the ids' range: those that go straight into an ``Embedding``, or into a layer
    that holds one (the published ``TokenAndPositionEmbedding`` pattern, ``keras.Input((maxlen,))``
    being float32). Real data there are whole numbers, which a custom layer's autocast to
    bfloat16 or float16 rounds: synthetic data must be whole numbers too, or the numerics probe
    cannot see it (normal noise rounds harmlessly).

    The range is the largest table in the consumer taken alone, as its token table is (a
    position table is fed ``arange``); a consumer that takes several model inputs (ids and
    segments, say) gives its smallest, and an input with several consumers the smallest of
    theirs, every id in range whichever table it reaches. A range the model refuses (the ids
    reach a smaller table than thought) is halved until a forward pass of one sample takes it
    (``x_struct``: the inputs' structure, to run that pass; None skips it)."""
    inputs = list(getattr(model, "inputs", None) or [])
    found: dict[int, int] = {}
    for i, tensor in enumerate(inputs):
        if "float" not in str(tensor.dtype):
            continue
        sizes: list[int] = []
        for layer in _consumers(model, tensor):
            tables = _table_sizes(layer)
            if not tables:
                continue
            several = sum(any(t is x for x in inputs) for t in _layer_inputs(layer)) > 1
            sizes.append(tables[0] if several else tables[-1])
        if sizes:
            found[i] = min(sizes)
    if found and x_struct is not None:
        return _ranges_the_model_takes(model, inputs, x_struct, found)
    return found


def _consumers(model: Any, tensor: Any) -> list[Any]:
    """The model's layers that take ``tensor`` as an input (a functional model's graph)."""
    return [
        layer
        for layer in getattr(model, "layers", [])
        if any(t is tensor for t in _layer_inputs(layer))
    ]


def _layer_inputs(layer: Any) -> list[Any]:
    return keras_private.inbound_tensors(layer)


def _ranges_the_model_takes(
    model: Any, inputs: list[Any], x_struct: Any, ids: dict[int, int]
) -> dict[int, int]:
    """``ids`` with each range one the model takes: one sample whose ids are the range's
    largest value exact in bfloat16 (so that no policy rounds it up out of the table) goes
    through the model; on an error the ranges shrink. Other inputs are zeros. Where an
    out-of-range id raises no error (TensorFlow on a GPU gives zeros, JAX clamps), the range
    stays as found."""
    ranges = dict(ids)
    while True:
        xs = [
            np.full(_shape(t, 1), _exact_in_bfloat16(ranges[i] - 1), np.float32)
            if i in ranges
            else np.zeros(_shape(t, 1), dtype=str(t.dtype))
            for i, t in enumerate(inputs)
        ]
        try:
            model(keras.tree.pack_sequence_as(x_struct, xs), training=False)
            return ranges
        except Exception:  # noqa: BLE001 - any refusal shrinks the ranges; the trial reports errors
            if all(r <= 1 for r in ranges.values()):
                return {}
            ranges = {i: max(1, r // 2) for i, r in ranges.items()}


def _exact_in_bfloat16(value: int) -> int:
    """The largest whole number at most ``value`` that bfloat16 (8 significant bits) holds."""
    if value < 256:
        return max(0, value)
    step = 2 ** (value.bit_length() - 8)
    return int(value // step * step)
