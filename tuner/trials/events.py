"""The worker's event channel: JSON lines with a ``type`` field.

The worker writes one JSON object per line to a dedicated pipe (not stdout, where the user's
model code may print). :class:`EventReader` turns the bytes back into events; a line it cannot
parse is logged and counted, never fatal, and a partial last line is tried once at the end.

Event types, in the order a worker sends them:

* ``started``: ``pid``, ``import_s`` (interpreter start and TensorFlow import), ``versions``
* ``phase``: ``phase`` (``build``, ``prepare``, ``probe``, ``warmup``, ``measure``, ``input``:
  see :data:`PHASES`)
* ``hazard``: a :class:`~tuner.trials.hazards.Hazard` as its ``to_dict`` (the numerics probe and
  the model checks, before the first step)
* ``numerics``: the probe's measurements (``TrialResult.numerics``)
* ``warning``: ``code``, ``message`` (widths not multiples of 8 on Tensor Core GPUs, a probe
  that could not compare, a policy measured with the probe's fix applied)
* ``step``: ``phase``, ``step``, ``loss``, ``loss_scale``, ``skipped``, ``nonfinite``, ``time_ms``
* ``result``: the measured figures (see :mod:`tuner.trials.runner`)
* ``error``: ``exception``, ``message``, ``location``, ``phase``, ``oom``, ``user_code``,
  ``traceback``

Every line the worker writes carries the trial's secret token (:data:`TOKEN_FIELD`), which the
parent sent on the worker's stdin; the reader drops a line without it as foreign (the user's code
wrote to the inherited descriptor) and counts it, so a model cannot forge a result.

The parent adds ``memory`` events (``rss_mb`` of the worker, sampled) for live plots.

This module is the wire: the reader returns each line as a dict (:data:`Event`). The parent
reads them as typed records (:mod:`tuner.trials.messages`, one class per type above) and hands
only those to its listeners.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import signal
from typing import Any


class Phase(str, enum.Enum):
    """Where a trial's worker is: sent in ``phase`` messages and named in an ``error``'s
    facts. ``import`` is the worker's life before its first ``phase`` message; ``build`` runs
    only the model's own code (the user's module and its ``build_model()``), ``prepare`` the
    setup's (its data, compile); ``report`` follows the timing, and is never sent."""

    IMPORT = "import"
    BUILD = "build"
    PREPARE = "prepare"
    PROBE = "probe"
    WARMUP = "warmup"
    MEASURE = "measure"
    INPUT = "input"
    REPORT = "report"

    @property
    def words(self) -> str:
        """What the phase means, in the words both faces show."""
        return PHASES[self.value]


#: What a worker's phase means, in the words both faces show while a trial runs (and a trial's
#: error names where it was killed), by :class:`Phase` value.
PHASES = {
    Phase.IMPORT.value: "starting the worker (Python, its framework's import)",
    Phase.BUILD.value: "building the model",
    Phase.PREPARE.value: "making the data and compiling",
    Phase.PROBE.value: "probing numerics against float32",
    Phase.WARMUP.value: "warming up",
    Phase.MEASURE.value: "measuring",
    Phase.INPUT.value: "timing fit's own loop on the input",
    Phase.REPORT.value: "reporting what it measured",
}

logger = logging.getLogger(__name__)

#: One line of the channel, as JSON gave it (:func:`~tuner.trials.messages.parse_message` types it).
Event = dict[str, Any]

#: The field that carries the trial's token on every line the worker writes.
TOKEN_FIELD = "token"
#: The signal on which a worker writes every thread's Python stack to its log (faulthandler):
#: its parent sends it before it kills the worker at a time limit, so that the trial's record
#: says where the worker was stuck.
STACK_SIGNAL = signal.SIGUSR1


def encode_event(event: Event) -> bytes:
    """One event as a JSON line; NaN and infinity become strings JSON can carry."""
    if "type" not in event:
        raise ValueError("an event needs a 'type'")
    return (json.dumps(encode_floats(event), separators=(",", ":")) + "\n").encode()


def encode_floats(value: Any) -> Any:
    """``value`` with every non-finite float inside it spelled as a string JSON can carry."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: encode_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_floats(v) for v in value]
    return value


def as_float(value: Any) -> float | None:
    """Read a float an event carries, including the ``"nan"``/``"inf"`` spellings."""
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)  # "nan", "inf", "-inf"
    return float(value)


class EventReader:
    """Incremental decoder for the event channel.

    Feed it bytes as they arrive; it returns the complete events. Bad lines are logged at
    WARNING and counted in :attr:`bad_lines`. With a ``token``, only lines carrying it are
    events (the token is removed from them); the others are counted in :attr:`foreign_lines`.
    """

    def __init__(self, token: str | None = None) -> None:
        self._buffer = b""
        self._token = token
        self.bad_lines = 0
        self.foreign_lines = 0

    def feed(self, data: bytes) -> list[Event]:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [event for line in lines if (event := self._parse(line)) is not None]

    def close(self) -> list[Event]:
        """End of stream: parse a last line that had no newline, if it is whole."""
        rest, self._buffer = self._buffer, b""
        event = self._parse(rest) if rest.strip() else None
        return [event] if event is not None else []

    def _parse(self, line: bytes) -> Event | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError:
            self._reject(line, "not JSON")
            return None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._reject(line, "no 'type' field")
            return None
        if self._token is not None and event.pop(TOKEN_FIELD, None) != self._token:
            self.foreign_lines += 1
            logger.warning("ignored a line on the event channel not written by mptune")
            return None
        return event

    def _reject(self, line: bytes, why: str) -> None:
        self.bad_lines += 1
        logger.warning("ignored a worker event line (%s): %r", why, line[:200])
