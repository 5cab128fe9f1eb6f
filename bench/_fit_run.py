"""Run a plain ``model.fit`` on one setup and print its throughput as JSON (bench_fit.py).

The model, its data, the policy and compile arguments come from the same code a trial uses
(tuner.workloads, tuner.worker.loading, tuner.keras_setup); the data is fed as a user's script
feeds it: a built-in workload's arrays as ``fit(x, y, batch_size=...)`` (shuffled, Keras'
default; its pool repeated to an epoch of 64 batches, as a trial gives them to fit), a model
file's ``make_dataset(batch_size)`` as it returns it (without one, the synthetic arrays a trial
makes from the model's shapes, as a built-in's), a training script's own fit (issue 37: the
script run up to it, then its fit compiled and fed as ``mptune run`` does). Epoch after epoch,
no callback on its batches; fit stops at the end of the epoch in which ``SECONDS`` of timed
epochs have passed, and at least ``MIN_EPOCHS`` timed epochs (1 unless given): on TensorFlow an
epoch of arrays can wait at its end for the input's autotuner every other epoch (docs/trials.md),
so a single timed epoch of a long one reads either the waiting or the other kind, not the rate a
long run alternates between (issue 50's rows: epochs of 8-18 s, one timed epoch, a spread of 44%
between runs of one setup). The figure is a long run's: the first epoch traces and compiles,
the second is where an input settles (tf.data's autotuning on JAX took 5.5-6.5 s there in one
process of three, where the others took 1.5-2.9 s, and never again in 25 s of epochs): a long
run pays both once, so neither is timed. The backend is ``KERAS_BACKEND``'s. It prints
``{"samples_per_second": ..., "epochs": ...}``, the epochs it timed; ``SECONDS`` 0 times exactly
``MIN_EPOCHS`` (how bench/gpu_check.py runs a setup's fits over the same epochs).

    python bench/_fit_run.py MODEL SETUP_JSON SECONDS [MIN_EPOCHS]
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: Epochs before the clock: the one that compiles, and the one where an input settles.
UNTIMED = 2


def main() -> int:
    model_spec, setup_json, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    min_epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    import keras

    from tuner import keras_setup, workloads
    from tuner.setup import Setup
    from tuner.trials.models import parse_model_spec
    from tuner.worker import feeding, loading

    setup = Setup.from_dict(json.loads(setup_json))
    source = parse_model_spec(model_spec)
    keras.utils.set_random_seed(0)
    keras_setup.apply_policy(setup)
    if source.kind == "script":
        figure, timed = script_fit(source, setup, seconds, min_epochs)
        print(json.dumps({"samples_per_second": figure, "epochs": timed}))
        return 0
    kwargs: dict[str, object] = {}
    if source.kind == "builtin":
        model = workloads.build(source.name, source.params)
        optimizer, loss = None, workloads.LOSS
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), setup.batch_size
        )
        batches = workloads.make_batches(source.name, source.params, setup.batch_size, pool, 0)
        # One epoch of arrays as a trial gives fit (its pool repeated to 64 batches).
        x, y = feeding.epoch_arrays(batches)
        kwargs = {"x": x, "y": y, "batch_size": setup.batch_size}
        per_epoch = len(x)
    else:
        loaded = loading.load_user_model(source, setup.policy.name)
        model, optimizer, loss = loaded.model, loaded.optimizer, loaded.loss
        if loaded.make_dataset is None:
            # No make_dataset: the synthetic data a trial makes from the model's shapes, as
            # arrays of an epoch of 64 batches, as a trial gives them to fit (issue 50).
            pool = loading.pool_size(loading.model_sample_bytes(model), setup.batch_size)
            batches = loading.user_batches(source, loaded, setup.batch_size, pool, 0)
            x, y = feeding.epoch_arrays(batches)
            kwargs = {"x": x, "y": y, "batch_size": setup.batch_size}
            per_epoch = len(keras.tree.flatten(x)[0])
        else:
            data = loaded.make_dataset(setup.batch_size)
            kwargs = {"x": data}
            per_epoch = setup.batch_size * sum(1 for _ in data)  # a finite dataset's batches
    keras_setup.compile_model(model, setup, optimizer, loss)

    clock = epoch_clock(seconds, min_epochs)
    model.fit(epochs=10**6, verbose=0, callbacks=[clock], **kwargs)  # type: ignore[arg-type]
    clock.ends[-1] = time.perf_counter()  # fit's return: its last step waited for
    print(json.dumps({"samples_per_second": clock.rate(per_epoch), "epochs": clock.timed}))
    return 0


def epoch_clock(seconds: float, min_epochs: int = 1) -> Any:
    """A callback on epoch ends only (fit dispatches its batches as it would without it) that
    stops fit once ``seconds`` of epochs after the UNTIMED ones have passed, and at least
    ``min_epochs`` of them."""
    import keras

    class EpochClock(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.ends: list[float] = []

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            self.ends.append(time.perf_counter())
            timed = len(self.ends) - UNTIMED
            if timed >= max(1, min_epochs) and self.ends[-1] - self.ends[UNTIMED - 1] >= seconds:
                self.model.stop_training = True

        @property
        def timed(self) -> int:
            """The whole epochs timed (after the UNTIMED ones)."""
            return len(self.ends) - UNTIMED

        def rate(self, per_epoch: int) -> float:
            """Samples a second over the timed epochs."""
            return per_epoch * self.timed / (self.ends[-1] - self.ends[UNTIMED - 1])

    return EpochClock()


def script_fit(
    source: object, setup: object, seconds: float, min_epochs: int = 1
) -> tuple[float, int]:
    """A training script's own fit, as ``mptune run`` runs it (the script up to its fit, the
    model compiled for the setup with the script's optimizer, loss and metrics, its data at the
    setup's batch size), timed over whole epochs as :func:`main` times the others: its samples
    a second and the epochs timed."""

    from tuner import keras_setup
    from tuner.worker import loading, script

    clock = epoch_clock(seconds, min_epochs)
    samples = [0]

    def fit(call: script.FitCall) -> object:
        optimizer, loss, _ = loading.compiled_with(call.model)
        extras = loading.compile_extras(call.model)
        keras_setup.compile_model(call.model, setup, optimizer, loss, **extras)
        changed = script.fit_arguments_at(call, setup.batch_size)  # type: ignore[attr-defined]
        data = changed.get("x", call.x)  # a finite input's samples an epoch
        samples[0] = (
            len(call.y) if "batch_size" in changed else sum(script.samples_in(b) for b in data)
        )
        return call.go_on(epochs=10**6, verbose=0, callbacks=[clock], **changed)

    script.run_script(source, fit)  # type: ignore[arg-type]
    # From the first timed epoch's start to the last one's end: what the script does after
    # its fit (an evaluate, a save) runs too, but is not fit's.
    return float(clock.rate(samples[0])), int(clock.timed)


if __name__ == "__main__":
    sys.exit(main())
