"""The test suite's faults: a real trial worker that fails on purpose, started the product's way.

Two switches in a trial's environment, set by a test as a user sets any variable (on the pytest
process, or in the environment of an ``mptune`` it runs; the worker's environment carries it):

- ``MPTUNE_TEST_FAULT=KIND@K`` (:data:`FAULT_ENV`) fails the worker at step K (counting the
  warm-up's steps, from 1): ``oom`` raises the backend's own out-of-memory error
  (``tf.errors.ResourceExhaustedError``, JAX's ``RESOURCE_EXHAUSTED``, PyTorch's
  ``OutOfMemoryError``), ``crash`` kills the worker with SIGKILL, ``hang`` stops it answering
  (for the runner's time limit), ``bug`` hands mptune's step loop a loss it cannot read, so
  that mptune's own code raises (a bug of mptune's, never the user's). The steps before K are
  reported first, as a real hang or crash finds them reported up to its last chunk.
- ``MPTUNE_TEST_PROCESS_PEAK=1`` (:data:`PROCESS_PEAK_ENV`) makes a CPU worker keep one peak
  for its life (its resident memory's peak is never reset), as JAX's allocator does on a GPU,
  so that the GPU's path (a warm worker's trial whose peak is its own: measured where it rose,
  else predicted) runs on a CPU.

mptune knows neither: :func:`install` patches the worker's modules from outside (the step
driver's ``execute``, :func:`tuner.worker.training.process_peak_only`), in the worker's process
and before its first trial, and the product's worker then runs unchanged. A worker with a
switch set starts through the product's :class:`~tuner.trials.launcher.SpawnLauncher` with
this module as its entry (``python -m faults``, tests/ on ``PYTHONPATH``: :func:`main` installs,
then runs ``tuner.worker`` as ``python -m tuner.worker`` does); one forked by the suite's fork
server (tests/launchers/forkserver/server.py) installs after taking its environment. A test marked
``product_launcher`` runs with :func:`launcher` (``MPTUNE_LAUNCHER=faults:launcher``): the
product's own spawn launcher for every worker, but this entry for one with a switch set.
"""

from __future__ import annotations

import os
import runpy
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from tuner.trials import launcher as product
from tuner.trials.launcher import WORKER_MODULE, SpawnLauncher, WorkerHandle

FAULT_ENV = "MPTUNE_TEST_FAULT"
PROCESS_PEAK_ENV = "MPTUNE_TEST_PROCESS_PEAK"
KINDS = ("oom", "crash", "hang", "bug")
#: This module, as ``python -m`` runs it.
MODULE = "faults"
#: The value of ``MPTUNE_LAUNCHER`` that names :func:`launcher`.
NAME = "faults:launcher"


def parse(text: str) -> tuple[str, int] | None:
    """``KIND@K`` as (kind, step); None for nothing set. A misspelt fault is the test's bug:
    it raises, in the worker, where its log shows it."""
    if not text:
        return None
    kind, _, step = text.partition("@")
    if kind not in KINDS or not step.isdigit() or int(step) < 1:
        raise ValueError(f"{FAULT_ENV}={text!r}: not KIND@STEP with KIND one of {KINDS}")
    return kind, int(step)


def switched(env: Mapping[str, str]) -> bool:
    """Whether a worker of this environment runs with a switch set."""
    return bool(env.get(FAULT_ENV)) or env.get(PROCESS_PEAK_ENV) == "1"


def install(env: Mapping[str, str] = os.environ) -> None:
    """Patch this worker process's modules for the switches ``env`` sets (none: nothing),
    once the worker has done its imports (it imports the framework after it set up its stack
    dumps and lifeline, :func:`tuner.worker.main.main`; a forked one has them already)."""
    if not switched(env):
        return
    fault = parse(env.get(FAULT_ENV, ""))
    peak = env.get(PROCESS_PEAK_ENV) == "1"
    from tuner.worker import main as worker

    imports = worker.import_frameworks

    def import_frameworks() -> BaseException | None:
        error = imports()
        if error is None and fault is not None:
            _install_fault(*fault)
        if error is None and peak:
            _install_process_peak()
        return error

    worker.import_frameworks = import_frameworks


def _install_fault(kind: str, step: int) -> None:
    from tuner.worker import training

    # Each execution is reported as it ends, so that the steps before the fault are reported.
    training.REPORT_EVERY_S = 0.0
    init = training.StepRunner.__init__

    def init_and_patch(runner: training.StepRunner, *args: Any, **kwargs: Any) -> None:
        init(runner, *args, **kwargs)
        execute = runner.steps.execute

        def execute_or_fail() -> Any:
            # The fault's step falls in this execution (of ``spe`` steps).
            if runner.global_step < step <= runner.global_step + runner.spe:
                return _fail(kind, f"injected by {FAULT_ENV} at step {step}", runner.backend.name)
            return execute()

        runner.steps.execute = execute_or_fail  # type: ignore[method-assign]

    training.StepRunner.__init__ = init_and_patch  # type: ignore[method-assign,assignment]


def _fail(kind: str, message: str, backend: str) -> dict[str, Any]:
    if kind == "oom":
        _raise_oom(backend, message)
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        while True:
            signal.pause()  # the runner's time limit ends it
    # ``bug``: the step loop reads the loss with float(), in mptune's code (its innermost frame).
    return {"loss": message}


def _raise_oom(backend: str, message: str) -> NoReturn:
    """Raise the error this backend raises when the device's memory runs out."""
    if backend == "jax":
        from jax.errors import JaxRuntimeError

        raise JaxRuntimeError(f"RESOURCE_EXHAUSTED: Out of memory ({message})")
    if backend == "torch":
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate ({message})")
    import tensorflow as tf

    raise tf.errors.ResourceExhaustedError(None, None, f"OOM when allocating tensor ({message})")


def _install_process_peak() -> None:
    from tuner.worker import training

    measured = training.process_peak_only

    def process_peak_only(on_cpu: bool) -> bool:
        return on_cpu or measured(on_cpu)

    training.process_peak_only = process_peak_only


#: The product's spawn launcher, with this module as the worker's entry.
SPAWN = SpawnLauncher(MODULE)


def spawner(env: Mapping[str, str]) -> SpawnLauncher:
    """How a worker of this environment starts afresh: :data:`SPAWN` where a switch is set,
    else the product's own launcher (:data:`tuner.trials.launcher.SPAWN`)."""
    return SPAWN if switched(env) else product.SPAWN


class FaultLauncher:
    """The launcher of a test marked ``product_launcher``: the product's spawn launcher, with
    this module as the entry of a worker that has a switch set (:func:`spawner`)."""

    def launch(
        self, env: dict[str, str], args: list[str], log_fd: int, channel_fd: int
    ) -> WorkerHandle:
        return spawner(env).launch(env, args, log_fd, channel_fd)

    def prepare(
        self, envs: Sequence[dict[str, str]], deadline: float, cancel: threading.Event | None
    ) -> Callable[[], None]:
        return product.SPAWN.prepare(envs, deadline, cancel)


LAUNCHER = FaultLauncher()


def launcher() -> FaultLauncher:
    """The launcher ``MPTUNE_LAUNCHER=faults:launcher`` names (one for the process)."""
    return LAUNCHER


def main() -> None:
    """``python -m faults ARGS``: the switches installed, then ``python -m tuner.worker ARGS``."""
    install()
    runpy.run_module(WORKER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
