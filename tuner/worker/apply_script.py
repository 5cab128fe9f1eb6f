"""``mptune run train.py --config tuned.json [-- ARGS]``: the user's training script, run for
real with a tuned setup applied, unedited (issue 37).

``python -m tuner.worker.apply_script FIT_CALL SCRIPT [ARGS...]``, the tuned setup's JSON in
the environment (:data:`tuner.trials.models.RUN_SETUP_VARIABLE`), is what ``mptune run``
becomes (it replaces its own process with this one, so the script owns the terminal and its
signals; it has read the config and said what it notes). The setup is applied first (the
backend checked, the precision policy set before the script's first line, as
:func:`tuner.export.apply.apply_config` does), then the script runs as
``__main__`` with its own arguments, and at its ``fit`` (the ``FIT_CALL``-th) the rest of the
setup is applied the way a trial applied it: the model compiled again with the script's own
optimizer (wrapped for the loss scale), loss and metrics and the setup's knobs, and the data
fed at the setup's batch size (arrays: ``batch_size``; a tf.data.Dataset: rebatched; a
PyDataset: its batches joined or split). Every other argument of the script's ``fit`` (epochs,
callbacks, validation data) stays as the script wrote it, and what follows ``fit`` runs too.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

#: Exit status when the setup cannot be applied (bad config, a script that never calls fit).
EXIT_BAD_INPUT = 2


def main(argv: list[str]) -> int:
    fit_call, script_path, *args = argv
    import json

    import keras

    from tuner import keras_setup
    from tuner.errors import MptuneError
    from tuner.setup import Setup
    from tuner.trials.models import RUN_SETUP_VARIABLE, ScriptCommand, parse_model_spec

    try:
        source = parse_model_spec(ScriptCommand(script_path, tuple(args), int(fit_call)).spec)
        setup = Setup.from_dict(json.loads(os.environ.pop(RUN_SETUP_VARIABLE, "{}")))
    except (MptuneError, ValueError, TypeError) as exc:
        print(f"mptune: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if keras.backend.backend() != setup.backend:
        print(
            f"mptune: the setup was tuned on {setup.backend}, Keras runs on "
            f"{keras.backend.backend()} here: set KERAS_BACKEND={setup.backend}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    keras_setup.apply_policy(setup)
    return _run(source, setup)


def _run(source: Any, setup: Any) -> int:
    from tuner import keras_setup
    from tuner.worker import loading, script
    from tuner.worker.usercode import UserCodeError

    name = script.shown_name(source)
    reached = [False]
    held: list[script.HeldSetting] = []
    from tuner.worker.fit_timer import FitTimer

    timer = FitTimer()

    def fit(call: script.FitCall) -> Any:
        reached[0] = True
        optimizer, loss, _ = loading.compiled_with(call.model)
        keras_setup.compile_model(
            call.model, setup, optimizer, loss, **loading.compile_extras(call.model)
        )
        changed = script.fit_arguments_at(call, setup.batch_size)
        print(f"mptune: {name}'s fit {trains_words(call.model, setup, held)}", file=sys.stderr)
        sys.stderr.flush()
        # First, so that each epoch's time starts before the script's own callbacks' work.
        callbacks = list(call.arguments.get("callbacks") or [])
        timer.attach(call.model)
        return call.go_on(**changed, callbacks=[timer, *callbacks])

    try:
        script.run_script(source, fit, held)
    except UserCodeError as exc:
        where = f"{exc.location}: " if exc.location else ""
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, UserCodeError):
            # The script's own failure: its traceback, as Python would print it.
            import traceback

            traceback.print_exception(type(cause), cause, cause.__traceback__)
            return 1
        print(f"mptune: {where}{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        if reached[0]:
            _report(name, setup, timer)
    if not reached[0]:
        print(
            f"mptune: {name} ended without calling model.fit: nothing was tuned",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return 0


def trains_words(model: Any, setup: Any, held: list[Any]) -> str:
    """What the script's fit trains under, read back from its compiled model (issue 49), and
    the precision the script set itself, held off, where it did: ``runs mixed_float16 (read
    from the model: dynamic loss scale from 32768), batch size 128; train.py:9 sets float32,
    held off``."""
    from tuner.worker import as_trained

    got = as_trained.read(model)
    words = f"runs {got['policy']}"
    scale = got.get("loss_scale")
    if scale and scale != "none":
        words += f", loss scale {scale}"
    if got.get("jit_compile") and setup.backend != "jax":
        words += ", XLA"
    if got.get("quantized"):
        words += f", {got['quantized']} layers ({got['quantized']}_from_{got['policy']})"
    if (got.get("steps_per_execution") or 1) > 1:
        words += f", {got['steps_per_execution']} steps per execution"
    words += f", batch size {setup.batch_size}"
    if got.get("replicas", 1) > 1:
        share = setup.batch_size // got["replicas"]
        words += f" ({share} on each of {got['replicas']} devices, {got['distribution']})"
    words += " (read back from the model)"
    if held:
        at = f"{held[-1].at} " if held[-1].at else ""
        words += f"; {at}sets {held[-1].policy} itself: held off for the tuned setup"
    if got["policy"] != setup.policy.name:
        words += f"; NOT the tuned {setup.policy.name}: the script's layers set their own dtype"
    return words


def _report(name: str, setup: Any, timer: Any) -> None:
    """Say what the real fit achieved (the batches it consumed over the time of its whole
    epochs after the first, or of its one epoch from its second execution on) beside what the
    setup was tuned at, and keep it in the session it was tuned in (``mptune show`` lists it,
    with what the figure covered)."""
    import datetime
    import json

    from tuner.trials.models import RUN_CONTEXT_VARIABLE

    context = json.loads(os.environ.pop(RUN_CONTEXT_VARIABLE, "{}") or "{}")
    got = timer.achieved()
    tuned = context.get("tuned")
    validation = statistics.median(timer.validation) if timer.validation else None
    against = f"; tuned at {tuned:,.0f} samples/s" if tuned else ""
    if got is None:
        words = f"mptune: {name}'s fit: {timer.untimed()}{against}"
    else:
        words = (
            f"mptune: {name}'s fit trained at {got.samples_per_second:,.0f} samples/s over "
            f"{got.how}: {got.steps:,} steps, {got.samples:,} samples in {got.seconds:.2f} s"
        )
        if validation is not None:
            words += f" (validation {validation:.2f} s an epoch, apart)"
        if tuned:
            words += f"{against} ({got.samples_per_second / tuned:.2f}x)"
    print(words, file=sys.stderr, flush=True)
    session = context.get("session")
    if not session:
        return
    run = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "setup": setup.label,
        "script": name,
        "tuned_samples_per_second": tuned,
        "samples_per_second": got.samples_per_second if got else None,
        "covered": got.covered() if got else None,
        "epochs_timed": got.epochs if got else 0,
        "untimed": None if got else timer.untimed(),
        "validation_s": validation,
    }
    try:
        from tuner import api

        api.record_run(session, context.get("storage"), run)
    except Exception as exc:  # noqa: BLE001 - the user's run went through: say, never fail it
        print(f"mptune: note: could not keep this run in session {session}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1:]))
