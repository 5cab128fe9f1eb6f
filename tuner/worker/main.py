"""The worker process's loop: import, take a trial, run it, report; and, for a warm worker,
wait for the next trial of the same model and policy.

A trial runs through :mod:`tuner.worker.pipeline`; a warm worker keeps its model in
:mod:`tuner.worker.warm`; every exception ends up in one ``error`` event whose facts
:mod:`tuner.worker.blame` gathers (its class, whether it is an out-of-memory error, whose
failure it is, the phase), from which the parent's :func:`tuner.trials.outcome.classify`
decides the status.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
from typing import Any

from tuner.record import from_data
from tuner.trials.events import STACK_SIGNAL
from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec
from tuner.worker.channel import Channel, hold_lifeline
from tuner.worker.pipeline import timing_ends
from tuner.worker.state import TrialContext
from tuner.worker.usercode import UserCodeError, first_line
from tuner.worker.warm import WarmModel, between_trials


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument(
        "--announce-import",
        action="store_true",
        help="write one line to the channel once the imports are done (a worker started ahead)",
    )
    args = parser.parse_args(argv)
    # First, before the imports that may hang: on STACK_SIGNAL every thread's stack goes to
    # stderr (the log the parent keeps), from the signal handler itself, so that a worker
    # stuck anywhere, in C code too, can say where before the parent kills it at its limit.
    faulthandler.register(STACK_SIGNAL, all_threads=True, chain=False)
    # Each payload is one line on stdin, which stays open as the lifeline (see Lifeline): the
    # parent going away ends this process at once, even while it imports.
    lifeline = hold_lifeline(0)
    # The imports first, before the trial is known: a worker started ahead of its trial
    # (WorkerPool.start_ahead) spends them beside other workers', and then waits.
    import_error = import_frameworks()
    if args.announce_import:
        os.write(args.channel_fd, b'{"type": "imported"}\n')
    payload = json.loads(lifeline.next_line())
    channel = Channel(args.channel_fd, str(payload.get("token") or ""))
    warm: WarmModel | None = None
    gc.disable()  # collected between trials instead (warm.between_trials)
    try:
        while True:
            ok, warm = _one_trial(payload, channel, warm, import_error)
            import_error = None
            if not ok:
                return 1
            if warm is None or not payload.get("warm"):
                return 0
            # Ready for the next trial of the same model and policy; the garbage is collected
            # while the parent records this one.
            channel.emit("ready")
            between_trials(warm)
            payload = json.loads(lifeline.next_line())
            channel.next_trial(str(payload.get("token") or ""))
    finally:
        channel.close()


#: A file each worker adds its process id to when it starts, where set: the test suite's way to
#: see which tests start real workers (tests/conftest.py keeps them out of the fast lane).
WORKER_LOG_ENV = "MPTUNE_WORKER_LOG"


def note_start() -> None:
    """Add this worker's process id to :data:`WORKER_LOG_ENV`'s file, where it is set."""
    log = os.environ.get(WORKER_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")


def import_frameworks() -> BaseException | None:
    """Import the backend's framework (``KERAS_BACKEND``, set by the runner), Keras and the
    worker's own modules that use them (most of a fresh worker's start-up); what failed, to be
    reported as the first trial's import error."""
    try:
        from tuner.worker import backends

        backend = backends.current()
        try:
            backend.import_framework()
        except ImportError as exc:
            raise UserCodeError(
                f"the {backend.name} backend is not installed ({first_line(exc)}): "
                f"pip install 'mptune[{backend.name}]'"
            ) from exc
        import keras  # noqa: F401

        from tuner import keras_setup, workloads  # noqa: F401
        from tuner.worker import checks, loading, measuring, probe, training  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - reported by the trial, in its import phase
        return exc
    return None


def _one_trial(
    payload: dict[str, Any],
    channel: Channel,
    warm: WarmModel | None,
    import_error: BaseException | None = None,
) -> tuple[bool, WarmModel | None]:
    """Run the payload's trial: whether it reported a result (else an ``error`` event was
    sent), and what a warm worker keeps for the next trial (None: nothing to keep)."""
    from tuner.worker import pipeline

    spec = TrialSpec.from_dict(payload["spec"])
    source = from_data(ModelSource, payload["source"])
    context = TrialContext(timing_ends=timing_ends(payload.get("seconds_left")))
    try:
        if import_error is not None:
            raise import_error
        if spec.observe:
            from tuner.worker import observe

            observe.run(spec, source, channel, context)
            return True, None
        keep = bool(payload.get("warm"))
        return True, pipeline.run(spec, source, channel, context, warm, keep)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an error event
        from tuner.worker import blame

        facts = blame.failure_facts(exc, spec, source, context)
        for hazard in blame.trap_hazards(exc, facts, spec, source, context):
            channel.emit("hazard", **hazard.to_dict())  # the trap it fell in (issue 71)
        channel.emit("error", **facts)
        return False, None
