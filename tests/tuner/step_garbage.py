"""Run a tiny model's steps as a worker runs them (automatic collection off) and print, as
JSON, how many unreachable objects a collection finds after 10 steps and after 40 more, for
each policy in turn: run by tests/tuner/test_step_memory.py with KERAS_BACKEND set, one process
per backend."""

from __future__ import annotations

import gc
import json
import sys

from tuner import keras_setup, workloads
from tuner.setup import LossScale, Setup
from tuner.worker import backends, training

PARAMS = {"features": 16, "width": 32, "depth": 2}


POLICIES = ("float32", "mixed_float16")


def count(policy: str) -> dict[str, object]:
    backend = backends.current().name
    scale = LossScale("dynamic" if policy == "mixed_float16" else "none")
    setup = Setup(policy, 16, scale, backend=backend)
    keras_setup.set_seed(0)
    keras_setup.apply_policy(setup)
    model = workloads.build("mlp", PARAMS)
    batches = workloads.make_batches("mlp", PARAMS, 16, 4, 0)
    keras_setup.compile_model(model, setup, None, workloads.LOSS)
    runner = training.StepRunner(model, batches, setup, lambda *args, **kwargs: None)
    runner.run("warmup", 2)
    gc.enable()
    gc.collect()
    gc.disable()  # as the worker's main() keeps it
    found = {}
    for steps in (10, 40):
        runner.run("measure", steps)
        found[steps] = gc.collect()
    return {"after_10": found[10], "after_40": found[40], "enabled": gc.isenabled()}


def main() -> None:
    policies = sys.argv[1:] or POLICIES
    print(json.dumps({policy: count(policy) for policy in policies}))


if __name__ == "__main__":
    main()
