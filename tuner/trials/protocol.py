"""What runs a trial, as the search and the faces call it: one :class:`TrialRunner` protocol
(issue 36), which the worker-process runner (:func:`tuner.trials.runner.run_trial`,
:meth:`tuner.trials.runner.WorkerPool.run`), the recorder and the replay of recorded searches
(:mod:`tuner.trials.replay`) and the GPU lookup (:mod:`tuner.trials.lookup`) implement."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from tuner.trials.messages import WorkerMessage
from tuner.trials.models import ModelSource
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec

#: A listener of a trial's worker: it gets each message as a typed record, on the runner's thread.
EventCallback = Callable[[WorkerMessage], None]


class TrialRunner(Protocol):
    """Runs one trial and returns its result; never raises for a trial that fails (the failure
    is the result's status), only :class:`~tuner.trials.process.TrialCancelled` when
    ``cancel`` is set. ``source`` is the model already parsed from ``spec.model`` (parsed once
    a search); ``on_event`` hears the worker's messages as they come."""

    def __call__(
        self,
        spec: TrialSpec,
        on_event: EventCallback | None = None,
        *,
        cancel: threading.Event | None = None,
        source: ModelSource | None = None,
    ) -> TrialResult: ...
