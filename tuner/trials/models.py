"""Model sources, read without TensorFlow.

A model spec is one of:

* ``builtin:NAME`` or ``builtin:NAME:key=value,key=value``: a built-in workload with
  deterministic synthetic data (:data:`BUILTINS` lists them and their size parameters);
* a ``.py`` file defining ``build_model()`` (and optionally ``make_dataset(batch_size)``);
* a saved ``.keras`` model, rebuilt under each trial's policy;
* ``script:PATH [ARGS...]``: a training script as the user runs it (issue 37), its arguments
  after its path as a shell writes them (:class:`ScriptCommand`); each trial runs it, unmodified,
  up to its ``model.fit`` call and trains the model it built on the data it passes
  (:mod:`tuner.worker.script`).

:func:`parse_model_spec` catches what can be caught before a worker starts (a missing file, a
syntax error, no ``build_model``, an unknown built-in or parameter) so that bad input costs
milliseconds and gives one line naming the problem.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shlex
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tuner.errors import MptuneError

SourceKind = Literal["builtin", "python", "keras", "script"]

#: A training script's model spec starts with this.
SCRIPT_PREFIX = "script:"
#: ``mptune run`` hands the tuned setup's JSON to the script's process in this variable
#: (:mod:`tuner.worker.apply_script` reads it).
RUN_SETUP_VARIABLE = "MPTUNE_RUN_SETUP"
#: ...and what the run reports back to (issue 49): a JSON object with the ``session`` the
#: setup was tuned in, its ``storage`` and the figure it was ``tuned`` at (samples/s).
RUN_CONTEXT_VARIABLE = "MPTUNE_RUN_CONTEXT"


@dataclass(frozen=True)
class BuiltinWorkload:
    """A built-in model: what it is, and its size parameters with defaults."""

    name: str
    description: str
    params: dict[str, int]


#: The built-in workloads. Defaults are sized for a CPU trial to take seconds; raise them to
#: load a real GPU (e.g. ``builtin:cnn:image_size=128,filters=64``).
BUILTINS: dict[str, BuiltinWorkload] = {
    w.name: w
    for w in (
        BuiltinWorkload(
            "mlp",
            "A dense classifier on synthetic tabular data (matmul-bound).",
            {"features": 64, "width": 256, "depth": 3, "classes": 10},
        ),
        BuiltinWorkload(
            "cnn",
            "The MNIST-style convnet from the Keras and TensorFlow guides, on synthetic images.",
            {"image_size": 28, "channels": 1, "filters": 32, "dense": 128, "classes": 10},
        ),
        BuiltinWorkload(
            "transformer",
            "A small transformer text classifier (embedding, attention, feed-forward).",
            {
                "seq_len": 64,
                "vocab": 2000,
                "embed_dim": 64,
                "heads": 2,
                "ff_dim": 128,
                "layers": 1,
                "classes": 2,
            },
        ),
    )
}


def file_digest(path: str) -> str:
    """A short hash of a model file's or training script's bytes: a session records it, and
    a resumed search or a fleet worker compares its copy with it (trials of two versions of a
    model never mix); "" where the file cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


@dataclass(frozen=True)
class ModelSource:
    """A parsed model spec.

    Attributes:
        spec: the text the user gave.
        kind: ``builtin``, ``python`` or ``keras``.
        name: the built-in's name, or the file's name.
        path: the absolute file path (files only).
        params: a built-in's parameters, defaults filled in.
        has_make_dataset: a Python file defines ``make_dataset``.
        user_batch: the batch size a Python file trains with, from its top-level
            ``BATCH_SIZE = <whole number>`` (read, not run); None when it has none.
        args: a training script's command-line arguments.
        fit_call: which of a training script's ``model.fit`` calls a trial takes (1: its
            first).
        user_policy: the precision a training script sets itself (read, not run), and
            ``user_policy_at`` where.
        distributed: the script names a distribution strategy.
    """

    spec: str
    kind: SourceKind
    name: str
    path: str | None = None
    params: dict[str, int] = field(default_factory=dict)
    has_make_dataset: bool = False
    user_batch: int | None = None
    args: tuple[str, ...] = ()
    fit_call: int = 1
    #: the precision a training script sets itself, and where (``train.py:9``), read, not run
    user_policy: str | None = None
    user_policy_at: str | None = None
    #: the script names a distribution strategy (its trials take every device it sees)
    distributed: bool = False

    @property
    def is_user_code(self) -> bool:
        return self.kind != "builtin"

    @property
    def digest(self) -> str:
        """The file's content as a session knows it (:func:`file_digest`); "" for a built-in
        or a file that cannot be read now."""
        return file_digest(self.path) if self.path else ""

    @property
    def data_bytes_per_sample(self) -> int | None:
        """Bytes of one sample of the synthetic data a trial's worker makes for a built-in
        (its input and its int32 label): what each sample of a batch costs before the model
        runs. None for a user's model, whose inputs are known only once it is built."""
        if self.kind != "builtin":
            return None
        return builtin_sample_bytes(self.name, self.params) + 4


def builtin_sample_bytes(name: str, params: dict[str, int]) -> int:
    """Bytes of one input sample of the built-in workload ``name`` (float32 features or pixels,
    int32 token ids), to size its data."""
    p = {**BUILTINS[name].params, **params}
    if name == "mlp":
        return 4 * p["features"]
    if name == "cnn":
        return 4 * p["image_size"] ** 2 * p["channels"]
    return 4 * p["seq_len"]


def parse_model_spec(spec: str) -> ModelSource:
    """Check a model spec and say what it is.

    Raises:
        MptuneError: naming the problem (and ``file:line`` for a syntax error).
    """
    spec = spec.strip()
    if spec.startswith("builtin:"):
        return _parse_builtin(spec)
    if spec.startswith((SCRIPT_PREFIX, "script#")):
        return _parse_script(spec)
    path = Path(spec).expanduser()
    if not path.exists():
        raise MptuneError(f"model file not found: {spec}")
    if path.is_dir():
        raise MptuneError(
            f"{spec} is a directory: give a .py file with build_model(), a .keras file, "
            f"or builtin:{{{','.join(BUILTINS)}}}"
        )
    if not os.access(path, os.R_OK):
        raise MptuneError(f"cannot read model file {spec}: permission denied")
    suffix = path.suffix.lower()
    if suffix == ".py":
        return _parse_python(spec, path.resolve())
    if suffix == ".keras":
        if not zipfile.is_zipfile(path):
            raise MptuneError(f"{spec} is not a saved Keras model (a .keras file is a zip archive)")
        return ModelSource(spec, "keras", path.name, path=str(path.resolve()))
    if suffix in (".h5", ".hdf5"):
        raise MptuneError(
            f"{spec}: legacy HDF5 models are not supported; save it with model.save('m.keras')"
        )
    raise MptuneError(
        f"unsupported model file {spec}: give a .py file with build_model() or a .keras file"
    )


def _parse_builtin(spec: str) -> ModelSource:
    _, _, rest = spec.partition(":")
    name, _, arg_text = rest.partition(":")
    workload = BUILTINS.get(name)
    if workload is None:
        raise MptuneError(
            f"unknown built-in model {name!r}: choose one of "
            + ", ".join(f"builtin:{n}" for n in BUILTINS)
        )
    params = dict(workload.params)
    for item in filter(None, (a.strip() for a in arg_text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise MptuneError(f"malformed parameter {item!r} in {spec}: write key=value")
        if key not in params:
            raise MptuneError(
                f"builtin:{name} has no parameter {key!r}: it takes " + ", ".join(params)
            )
        try:
            number = int(value)
        except ValueError:
            raise MptuneError(
                f"parameter {key} in {spec} must be a whole number, not {value!r}"
            ) from None
        if number < 1:
            raise MptuneError(f"parameter {key} in {spec} must be at least 1, not {number}")
        params[key] = number
    return ModelSource(spec, "builtin", name, params=params)


@dataclass(frozen=True)
class ScriptCommand:
    """A training script as the user runs it (issue 37): its path, its own arguments and which
    of its ``model.fit`` calls a trial takes (1: its first). One class reads and writes its
    model spec: ``script:PATH ARGS...``, quoted as a shell quotes them, ``script#N:...`` for
    the ``N``-th fit. Nothing is read from the disk (:func:`parse_model_spec` checks the
    file)."""

    path: str
    args: tuple[str, ...] = ()
    fit_call: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))  # a list given is kept as a tuple

    @property
    def spec(self) -> str:
        call = "" if self.fit_call == 1 else f"#{self.fit_call}"
        return f"script{call}:" + shlex.join([self.path, *self.args])

    @classmethod
    def parse(cls, spec: str) -> ScriptCommand | None:
        """The command a script spec names; None for a spec of another kind.

        Raises:
            MptuneError: its command line or fit call cannot be read, or it names no script.
        """
        if not spec.startswith((SCRIPT_PREFIX, "script#")):
            return None
        head, _, rest = spec.partition(":")
        call = head.partition("#")[2] or "1"
        if not call.isdigit() or int(call) < 1:
            raise MptuneError(
                f"{spec!r}: the fit call after # must be a whole number of at least 1"
            )
        try:
            words = shlex.split(rest)
        except ValueError as exc:
            raise MptuneError(f"cannot read the script's command line in {spec!r}: {exc}") from None
        if not words:
            raise MptuneError(f"{spec!r} names no script: write script:PATH [ARGS...]")
        return cls(words[0], tuple(words[1:]), int(call))


def _parse_script(spec: str) -> ModelSource:
    command = ScriptCommand.parse(spec)
    assert command is not None
    given, args, fit_call = command.path, command.args, command.fit_call
    path = Path(given).expanduser()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise MptuneError(f"training script {what}: {given}")
    if path.suffix.lower() != ".py":
        raise MptuneError(f"a training script is a .py file, not {given}")
    if not os.access(path, os.R_OK):
        raise MptuneError(f"cannot read training script {given}: permission denied")
    tree = _syntax_tree(given, path.resolve())
    # Whether the script reaches a fit is for running it to tell: its fit may be in a module
    # it imports (issue 49), so no static look refuses it.
    policy, line = script_policy(tree)
    return ModelSource(
        spec,
        "script",
        path.name,
        path=str(path.resolve()),
        user_batch=script_batch_size(tree, args),
        args=args,
        fit_call=fit_call,
        user_policy=policy,
        user_policy_at=f"{path.name}:{line}" if line else None,
        distributed=distributes(tree),
    )


#: The calls a script sets its precision with, as Keras names them.
_POLICY_SETTERS = ("set_global_policy", "set_dtype_policy")
#: What a script builds a distribution with: a tf.distribute strategy or keras.distribution.
_DISTRIBUTIONS = ("Strategy", "set_distribution", "DataParallel", "ModelParallel")


def script_policy(tree: ast.Module) -> tuple[str | None, int | None]:
    """The precision a training script sets itself, as far as reading it tells (it is not
    run): the last ``set_global_policy("...")`` or ``set_dtype_policy("...")`` with a literal
    policy name (or a ``Policy("...")``/``DTypePolicy("...")`` of one), and its line; ``(None,
    None)`` when it sets none that can be read. A trial reads the script's own call as it
    runs (:func:`tuner.worker.script.policy_held`); this is the search's plan before it."""
    found: tuple[str | None, int | None] = (None, None)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    for node in sorted(calls, key=lambda n: n.lineno):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in _POLICY_SETTERS or not node.args:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Call) and arg.args:
            arg = arg.args[0]  # Policy("mixed_float16")
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found = (arg.value, node.lineno)
    return found


def distributes(tree: ast.Module) -> bool:
    """Whether the script names a distribution strategy (``tf.distribute.*Strategy``,
    ``keras.distribution.set_distribution``...): its trials take every device it sees."""
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if isinstance(name, str) and name.endswith(_DISTRIBUTIONS):
            return True
    return False


#: The options a script's command line names its batch size with, as argparse spells them.
_BATCH_OPTIONS = ("--batch-size", "--batch_size", "--bs")


def script_batch_size(tree: ast.Module, args: Sequence[str]) -> int | None:
    """The batch size a training script trains with, as far as reading it tells (it is not
    run): ``--batch-size N`` on its command line, else the default of its own
    ``add_argument("--batch-size", default=N)``, a ``batch_size=N`` in a ``fit`` call, or a
    top-level ``BATCH_SIZE``/``batch_size = N``; None when none is a whole-number literal."""
    for i, word in enumerate(args):
        option, _, value = word.partition("=")
        if option in _BATCH_OPTIONS:
            text = value or (args[i + 1] if i + 1 < len(args) else "")
            return int(text) if text.isdigit() and int(text) >= 1 else None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        named = {k.arg: k.value for k in node.keywords if k.arg}
        if node.func.attr == "add_argument" and any(
            isinstance(a, ast.Constant) and a.value in _BATCH_OPTIONS for a in node.args
        ):
            return _whole_literal(named.get("default"))
        if node.func.attr == "fit" and "batch_size" in named:
            return _whole_literal(named["batch_size"])
    lowercase = ast.Module(
        body=[
            ast.Assign(targets=[ast.Name(BATCH_SIZE_NAME)], value=n.value)
            for n in tree.body
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "batch_size" for t in n.targets)
        ],
        type_ignores=[],
    )
    return declared_batch_size(tree) or declared_batch_size(lowercase)


def _whole_literal(node: ast.expr | None) -> int | None:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def _syntax_tree(spec: str, path: Path) -> ast.Module:
    """The file's syntax tree, read, not run.

    Raises:
        MptuneError: not UTF-8, or a syntax error (``file:line``).
    """
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MptuneError(f"{spec} is not UTF-8 text: {exc.reason}") from None
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise MptuneError(f"syntax error: {exc.msg}", location=f"{spec}:{exc.lineno}") from None


def _parse_python(spec: str, path: Path) -> ModelSource:
    tree = _syntax_tree(spec, path)
    names = _top_level_names(tree)
    if "build_model" not in names:
        raise MptuneError(
            f"{spec} defines no build_model(): mptune calls build_model() to "
            "get the model (and make_dataset(batch_size) for data, if defined)"
        )
    return ModelSource(
        spec,
        "python",
        path.name,
        path=str(path),
        has_make_dataset="make_dataset" in names,
        user_batch=declared_batch_size(tree),
    )


#: The top-level name a model file states its training batch size with.
BATCH_SIZE_NAME = "BATCH_SIZE"


def declared_batch_size(tree: ast.Module) -> int | None:
    """The model file's own batch size: the last top-level ``BATCH_SIZE = <int>`` (or
    ``BATCH_SIZE: int = <int>``) whose value is a whole-number literal of at least 1; None when
    there is none, or when it is computed (the file is read, never run)."""
    found: int | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == BATCH_SIZE_NAME for t in targets):
            continue
        literal = value.value if isinstance(value, ast.Constant) else None
        if isinstance(literal, int) and not isinstance(literal, bool) and literal >= 1:
            found = literal
        else:
            found = None  # assigned something mptune cannot read without running the file
    return found


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names bound at module level: functions, classes, assignments and imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return {"build_model", "make_dataset"} | names  # cannot tell: let it run
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            # Definitions behind a version check or an optional import still count, the
            # fallback in an `except ImportError:` handler included.
            body = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    body.extend(handler.body)
            names |= _top_level_names(ast.Module(body=body, type_ignores=[]))
    return names
