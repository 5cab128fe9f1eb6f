"""What a training script trains today, observed before its search (issue 70).

:func:`observe_script` runs the script in a trial worker as its user runs it (its own
precision let through), up to its ``fit``, and reads back what that ``fit`` would train
(:mod:`tuner.worker.observe`): the precision its layers compute in, the batch its input
gives, its compile settings. Nothing is inferred from the script's text. The search runs that
setup unchanged as its baseline, trial #0, and states every speed-up against it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tuner.record import from_data, to_data
from tuner.setup import KNOBS, LossScale, Setup
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec

#: How long reading a script may take: its imports, its data and its model's build.
OBSERVE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ScriptSetup:
    """What a script's ``fit`` trains today, as read back from it.

    Attributes:
        setup: the setup it trains, in mptune's terms; None where it is none mptune runs.
        at: where the script sets each part (``policy``, ``batch_size``, ``compile``), as
            ``file:line``.
        reason: why ``setup`` is None: the script's own setup cannot run as a trial.
    """

    setup: Setup | None = None
    at: dict[str, str] = field(default_factory=dict)
    reason: str | None = None

    def words(self) -> str:
        """``mixed_bfloat16 (set at train.py:12), batch size 32 (fit at train.py:40), XLA, 8
        steps per execution (compile at train.py:31)``: the setup, each part with the line
        that sets it (a loss scale only where it is not the policy's default)."""
        if self.setup is None:
            return f"not run as a trial: {self.reason}"
        s = self.setup
        parts = [
            _at(s.precision, "set at", self.at.get("policy")),
            _at(f"batch size {s.batch_size}", "fit at", self.at.get("batch_size")),
        ]
        # What its compile sets: a loss scale other than the policy's own, and the knobs (not
        # the backend, which the whole search is on).
        default = LossScale.default_for(s.policy)
        scale = (f"loss scale {s.loss_scale}",) if s.loss_scale != default else ()
        compiled = [*scale, *(w for knob in KNOBS if (w := knob.say(s)) is not None)]
        if compiled:
            parts.append(_at(", ".join(compiled), "compile at", self.at.get("compile")))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Its declared fields (:mod:`tuner.record`), the setup as ``Setup.to_dict`` writes it."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptSetup:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a stored setup that is not valid.
        """
        return from_data(cls, data)


def _at(what: str, how: str, where: str | None) -> str:
    return f"{what} ({how} {where})" if where else what


class ObserveFailed(Exception):
    """The script could not be read: it failed or hung before its ``fit`` (the message
    says how, as a trial's error would)."""


def observe_script(
    source: ModelSource,
    backend: str,
    device: str = "auto",
    seed: int = 0,
    cancel: threading.Event | None = None,
) -> ScriptSetup:
    """Run the script of ``source`` up to its ``fit`` in a trial worker and read back what
    that ``fit`` trains.

    Raises:
        ObserveFailed: the script failed, hung or exited before its ``fit``.
        TrialCancelled: ``cancel`` was set.
    """
    from tuner.trials.runner import observe_in_worker

    spec = TrialSpec(
        model=source.spec,
        setup=Setup("float32", 1, backend=backend),  # not run: the worker reads, never trains
        timeout_s=OBSERVE_TIMEOUT_S,
        device=device,
        seed=seed,
        probe=False,
        observe=True,
    )
    message, result = observe_in_worker(spec, source, cancel)
    if message is None:
        error = result.error
        where = f"{error.location}: " if error is not None and error.location else ""
        what = error.message if error is not None else f"the worker ended {result.status.value}"
        raise ObserveFailed(f"{where}{what}")
    setup = Setup.from_dict(message.setup) if message.setup else None
    return ScriptSetup(setup, dict(message.at), message.reason)
