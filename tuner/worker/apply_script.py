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

    def fit(call: script.FitCall) -> Any:
        reached[0] = True
        optimizer, loss, _ = loading.compiled_with(call.model)
        keras_setup.compile_model(
            call.model, setup, optimizer, loss, **loading.compile_extras(call.model)
        )
        changed = script.fit_arguments_at(call, setup.batch_size)
        print(f"mptune: {name}'s fit runs {setup.in_words()}", file=sys.stderr, flush=True)
        return call.go_on(**changed)

    try:
        script.run_script(source, fit)
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
    if not reached[0]:
        print(
            f"mptune: {name} ended without calling model.fit: nothing was tuned",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1:]))
