"""A setting the engine's words are about, carried as data (issue 36, item 4).

The engine's hints, notes, errors and "not tried" reasons name the settings a user can change:
the time budget, XLA, the session to resume. It does not word them in any face's terms - a
command-line flag means nothing in the window, a control's label nothing on a server - but
writes a :class:`Setting` into its text: the setting's name (the field of
:class:`tuner.api.TuneRequest`, or the CLI's own name for what it sets), and the value it is
said with, as ``[[name value]]``. Each face words them where it shows the text, with
:func:`render` and its own words: the CLI as its flags (``--xla off``), the window as its
controls (``XLA: off in the Search panel``). Texts stay plain strings, so what the engine
stores (notes, evidence, errors in a session) keeps its settings for whichever face reads it
later.

    >>> text = f"not tried ({setting('xla', 'auto')} tries XLA on a GPU only)"
    >>> render(text, lambda s: f"--{s.name} {s.value}")
    'not tried (--xla auto tries XLA on a GPU only)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

OPEN, CLOSE = "[[", "]]"

#: The settings the engine names: TuneRequest's fields, and ``resume`` (a stored session
#: continued), ``workers`` (a search shared with joining workers), ``format`` and ``keras``
#: (how a config is exported); and each knob whose search the user switches (``xla``: its
#: ``Knob.switch``), named by the knobs' rows (:func:`name_switches`). A name outside them is
#: refused where a text is written, and left as written where one is read.
_FIELDS = frozenset(
    {
        "backend",
        "budget_minutes",
        "device",
        "format",
        "global_batch",
        "keras",
        "max_trials",
        "measure_seconds",
        "memory_limit",
        "model",
        "parallel",
        "policies",
        "resume",
        "storage",
        "study",
        "timeout",
        "workers",
    }
)


#: The knobs whose search the user switches, by name: :mod:`tuner.knobs` names them here
#: (:func:`name_switches`), as this floor may not import it.
_SWITCHES: set[str] = set()


def name_switches(names: Iterable[str]) -> None:
    """Make each of ``names`` (a switched knob: ``xla``) a setting the engine may name."""
    _SWITCHES.update(names)


def known() -> frozenset[str]:
    """Every setting the engine may name: :data:`_FIELDS` and the switched knobs."""
    return _FIELDS | _SWITCHES


@dataclass(frozen=True)
class Setting:
    """One setting named in a text: its name (one of :func:`known`) and the value it is said
    with, if any (``xla`` with ``off``; ``resume`` with the session's name)."""

    name: str
    value: str | None = None

    def __post_init__(self) -> None:
        if self.name not in known():
            raise ValueError(f"unknown setting {self.name!r}: one of {', '.join(sorted(known()))}")
        if self.value is not None and (CLOSE in self.value or not self.value.strip()):
            raise ValueError(f"a setting's value cannot be empty or hold {CLOSE!r}: {self.value!r}")

    def __str__(self) -> str:
        return f"{OPEN}{self.name}{'' if self.value is None else ' ' + self.value}{CLOSE}"


def setting(name: str, value: object = None) -> str:
    """``name`` (with ``value``) as the engine writes it into a text."""
    return str(Setting(name, None if value is None else str(value)))


def parts(text: str) -> Iterator[str | Setting]:
    """``text`` as its plain runs and the settings it names, in order. Brackets that do not hold
    a known setting (a shape ``[[1, 2]]`` in a user's error) stay text."""
    rest = text
    while OPEN in rest:
        before, _, after = rest.partition(OPEN)
        inner, closed, tail = after.partition(CLOSE)
        name, _, value = inner.partition(" ")
        if not closed or name not in known():
            yield before + OPEN
            rest = after
            continue
        if before:
            yield before
        yield Setting(name, value or None)
        rest = tail
    if rest:
        yield rest


def render(text: str, word: Callable[[Setting], str]) -> str:
    """``text`` with each setting it names in a face's words."""
    return "".join(p if isinstance(p, str) else word(p) for p in parts(text))


def names(text: str) -> list[Setting]:
    """The settings ``text`` names."""
    return [p for p in parts(text) if isinstance(p, Setting)]
