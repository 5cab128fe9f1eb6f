"""Frozen records to JSON-ready data and back, read off their fields' declared types.

A trial's records (:class:`~tuner.trials.result.Measured`, the worker's
:class:`~tuner.trials.messages.ResultMessage`, :class:`~tuner.trials.result.TrialResult`) are
dataclasses; what each field is, is said once, in its annotation. :func:`to_data` and
:func:`from_data` follow those annotations, so a field added to a record is written, stored and
read back without a second list of names (issue 36: before, each record had a hand-written
``to_dict`` and ``from_dict`` that restated its fields).

The types understood: ``None``, ``bool``, ``int``, ``float``, ``str``, an :class:`enum.Enum`,
``X | None``, ``tuple[X, ...]``, ``list[X]``, ``dict[str, X]``, ``Any`` (kept as it is), a value
with a written form of one line (a ``parse`` classmethod and its own ``__str__``: a loss scale, a
policy), and a nested record (its own ``to_dict``/``from_dict`` where it has them, else this
module's). Every record of the engine is written so, from the trial's figures to the search's
space, its recommendation and the hardware profile (issue 52): this module is on the lowest
floor, below everything that stores a record. A missing key takes
the field's default, and so does a ``null`` where the field cannot be None. JSON has no NaN:
a ``null`` or ``"nan"`` where a plain ``float`` is declared reads as NaN, where
``float | None`` is declared ``null`` reads as None.

A field declared with :func:`added` is written only when it differs from its default, so that
records stored before the field existed still compare equal to the same records written now.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, TypeVar

R = TypeVar("R")

_ADDED = "mptune_added"
_CODED = "mptune_coded"


def added(default: Any = None) -> Any:
    """A field added after records of its class were first stored: its ``default`` is left out
    of :func:`to_data`'s output (see the module's docstring)."""
    return dataclasses.field(default=default, metadata={_ADDED: True})


def coded(write: Callable[[Any], Any], read: Callable[[Any], Any], default: Any = None) -> Any:
    """A field with a stored form of its own: ``write`` turns its value into JSON-ready data,
    ``read`` turns that back (a GPU's compute capability ``(8, 0)`` stored as ``"8.0"``); a
    ``null`` stored reads as ``default``."""
    return dataclasses.field(default=default, metadata={_CODED: (write, read)})


def names(record_type: type) -> tuple[str, ...]:
    """The fields ``record_type`` declares, in order."""
    return tuple(f.name for f in dataclasses.fields(record_type))


def part(record: Any, record_type: type) -> dict[str, Any]:
    """``record``'s values of the fields ``record_type`` declares (a record's share of a wider
    one, e.g. the :class:`~tuner.trials.result.Measured` figures of a result message)."""
    return {name: getattr(record, name) for name in names(record_type)}


def to_data(record: Any, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """``record``'s fields as JSON-ready values (nested records as dicts, tuples as lists,
    enums as their values), in declaration order; non-finite floats are left as they are for
    the caller's encoding (the event channel spells them, storage writes ``null``)."""
    skip = set(exclude)
    data: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in skip:
            continue
        value = getattr(record, f.name)
        if f.metadata.get(_ADDED) and value == f.default:
            continue
        codec = f.metadata.get(_CODED)
        data[f.name] = codec[0](value) if codec and value is not None else _encode(value)
    return data


def from_data(record_type: Callable[..., R], data: dict[str, Any], **given: Any) -> R:
    """A ``record_type`` of ``data`` (as :func:`to_data` wrote it; keys it does not declare are
    ignored), ``given`` values taking the place of what ``data`` says.

    Raises:
        ValueError: a field's value cannot be read, naming the field.
        TypeError: a field without a default is missing.
    """
    hints = _hints(record_type)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(record_type):  # type: ignore[arg-type]
        if not f.init or f.name in given or f.name not in data:
            continue
        if data[f.name] is None and not _nullable(hints[f.name]):
            continue  # null where a value must be: the field's default (NaN for a float)
        codec = f.metadata.get(_CODED)
        try:
            if codec is not None:
                values[f.name] = None if data[f.name] is None else codec[1](data[f.name])
                continue
            values[f.name] = _decode(hints[f.name], data[f.name])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed {f.name}: {exc}") from None
    return record_type(**values, **given)


def _nullable(hint: Any) -> bool:
    """``hint`` admits None (or NaN, which JSON writes as null)."""
    if hint is float or hint is Any:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


@cache
def _hints(record_type: Any) -> dict[str, Any]:
    return typing.get_type_hints(record_type)


def _written(kind: Any) -> bool:
    """``kind`` is a value with a written form of one line (``parse`` and its own ``__str__``)."""
    return (
        isinstance(kind, type)
        and callable(getattr(kind, "parse", None))
        and ("__str__" in vars(kind))
    )


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if _written(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        return to_dict() if to_dict is not None else to_data(value)
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _decode(options[0], value)
    if hint is Any:
        return value
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return tuple(_decode(item, v) for v in value or ())
    if origin is list:
        item = typing.get_args(hint)[0]
        return [_decode(item, v) for v in value or ()]
    if origin is dict:
        item = typing.get_args(hint)[1]
        return {str(k): _decode(item, v) for k, v in (value or {}).items()}
    if hint is float:
        return math.nan if value is None else float(value)  # "nan", "inf" as the wire spells
    if value is None:
        return None
    if hint is bool:
        return bool(value)
    if hint is int:
        return int(value)
    if hint is str:
        return str(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if _written(hint):
        return hint.parse(str(value))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        from_dict = getattr(hint, "from_dict", None)
        return from_dict(value) if from_dict is not None else from_data(hint, value)
    return value
