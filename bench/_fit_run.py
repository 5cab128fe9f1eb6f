"""Run ``model.fit`` on one setup and print its throughput as JSON (used by bench_fit.py).

The model, its data, the policy and compile arguments come from the same code a trial uses
(tuner.workloads, tuner.worker.loading, tuner.keras_setup), so the only difference from a trial
is how the steps are driven: ``fit`` over a ``tf.data`` dataset, timed by wall clock per epoch.

    python bench/_fit_run.py MODEL SETUP_JSON STEPS EPOCHS
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    model_spec, setup_json, steps, epochs = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    import keras
    import tensorflow as tf

    from tuner import keras_setup, workloads
    from tuner.setup import Setup
    from tuner.trials.models import parse_model_spec
    from tuner.worker import loading

    setup = Setup.from_dict(json.loads(setup_json))
    source = parse_model_spec(model_spec)
    keras.utils.set_random_seed(0)
    keras_setup.apply_policy(setup)
    if source.kind == "builtin":
        model = workloads.build(source.name, source.params)
        optimizer, loss = None, workloads.LOSS
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), setup.batch_size
        )
        batches = workloads.make_batches(source.name, source.params, setup.batch_size, pool, 0)
        dataset = tf.data.Dataset.from_tensors(tuple(batches[0]))
        for batch in batches[1:]:
            dataset = dataset.concatenate(tf.data.Dataset.from_tensors(tuple(batch)))
    else:
        loaded = loading.load_user_model(source, setup.policy.name)
        model, optimizer, loss = loaded.model, loaded.optimizer, loaded.loss
        dataset = loaded.module.make_dataset(setup.batch_size)
    keras_setup.compile_model(model, setup, optimizer, loss)
    dataset = dataset.repeat().prefetch(tf.data.AUTOTUNE)

    class Clock(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            self.t = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            self.epochs.append(time.perf_counter() - self.t)

    clock = Clock()
    # The first epoch traces and compiles (the trial's warm-up); the rest are timed.
    model.fit(dataset, epochs=epochs + 1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    timed = clock.epochs[1:]
    samples = setup.batch_size * steps * len(timed)
    print(json.dumps({"samples_per_second": samples / sum(timed), "epochs_s": timed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
