"""The worker's pipeline: import, build, warm up, measure, report.

Every exception ends up in one ``error`` event carrying facts (its class, whether it is an
out-of-memory error, whether it came from the user's code, the phase); the parent's
:func:`tuner.trials.outcome.classify` decides the status from them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from typing import Any

from tuner.trials.models import ModelSource
from tuner.trials.spec import TrialSpec
from tuner.worker.channel import Channel, hold_lifeline
from tuner.worker.usercode import UserCodeError, first_line, user_location


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    args = parser.parse_args(argv)
    # The payload is one line; stdin then stays open as the lifeline (see hold_lifeline).
    payload = json.loads(sys.stdin.buffer.readline())
    hold_lifeline(0)
    channel = Channel(args.channel_fd, str(payload.get("token") or ""))
    spec = TrialSpec.from_dict(payload["spec"])
    source = ModelSource(**payload["source"])
    phase = ["import"]
    try:
        _run(spec, source, channel, phase)
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an error event
        channel.emit("error", **_describe(exc, phase[0], source))
        return 1
    finally:
        channel.close()


def _run(spec: TrialSpec, source: ModelSource, channel: Channel, phase: list[str]) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from tuner import keras_setup, workloads
    from tuner.worker import checks, loading, training

    device = _configure_device(tf, spec)
    channel.emit(
        "started",
        pid=os.getpid(),
        device=device,
        versions={
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        },
    )

    phase[0] = "build"
    t_build = time.perf_counter()
    channel.emit("phase", phase="build")
    keras.utils.set_random_seed(spec.seed)
    keras_setup.apply_policy(spec.setup)
    if source.kind == "builtin":
        model = workloads.build(source.name, source.params)
        loaded = loading.LoadedModel(model, None, workloads.LOSS)
        pool = loading.pool_size(
            workloads.sample_bytes(source.name, source.params), spec.batch_size
        )
        batches = workloads.make_batches(
            source.name, source.params, spec.batch_size, pool, spec.seed
        )
    else:
        loaded = loading.load_user_model(source, spec.policy.name)
        pool = loading.pool_size(4 * 1024, spec.batch_size)
        batches = loading.user_batches(source, loaded, spec.batch_size, pool, spec.seed)
    model, warnings = checks.check_model(
        loaded.model, spec.policy.name, spec.batch_size, batches[0][0]
    )
    for code, message in warnings:
        channel.emit("warning", code=code, message=message)
    keras_setup.compile_model(
        model, spec.setup, loaded.optimizer, loaded.loss, jit_compile=loaded.jit_compile
    )
    build_s = time.perf_counter() - t_build

    on_cpu = device.startswith("cpu")
    runner = training.StepRunner(
        model, batches, spec.loss_scale, channel.emit, spec.memory_limit_mb if on_cpu else None
    )
    phase[0] = "warmup"
    channel.emit("phase", phase="warmup")
    warm = runner.run("warmup", spec.warmup_steps)
    if not on_cpu:
        tf.config.experimental.reset_memory_stats("GPU:0")

    phase[0] = "measure"
    channel.emit("phase", phase="measure")
    log = runner.run("measure", spec.steps, spec.measure_seconds, spec.min_steps, spec.max_steps)

    phase[0] = "report"
    if on_cpu:
        peak, memory_kind = training.peak_rss_mb(), "cpu_rss"
    else:
        peak, memory_kind = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20, "gpu"
    times = np.asarray(log.times_s)
    p50 = float(np.percentile(times, 50))
    channel.emit(
        "result",
        samples_per_second=spec.batch_size / p50 if p50 > 0 else None,
        step_time_ms={
            "p50": p50 * 1000,
            "p90": float(np.percentile(times, 90)) * 1000,
            "mean": float(times.mean()) * 1000,
        },
        peak_memory_mb=peak,
        memory_kind=memory_kind,
        losses=log.losses,
        loss_scales=log.loss_scales,
        skipped_flags=log.skipped,
        skipped_steps=sum(log.skipped),
        nonfinite_steps=sum(log.nonfinite),
        weights_finite=all(bool(np.isfinite(w).all()) for w in model.get_weights()),
        build_s=build_s,
        warmup_s=warm.elapsed_s,
        measure_s=log.elapsed_s,
    )


def _configure_device(tf: Any, spec: TrialSpec) -> str:
    """Pick the device and set GPU memory behaviour before TensorFlow touches it."""
    gpus = [] if spec.device == "cpu" else tf.config.list_physical_devices("GPU")
    if spec.device.startswith("gpu:") and not gpus:
        raise UserCodeError(f"device {spec.device} was asked for, but TensorFlow sees no GPU")
    if not gpus:
        return "cpu"
    gpu = gpus[0]  # the runner narrowed CUDA_VISIBLE_DEVICES to the chosen GPU
    if spec.memory_limit_mb is not None:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(spec.memory_limit_mb))]
        )
    else:
        # Without growth TensorFlow reserves the whole card and the peak means nothing.
        tf.config.experimental.set_memory_growth(gpu, True)
    name = tf.config.experimental.get_device_details(gpu).get("device_name", "GPU")
    index = spec.device.split(":")[1] if spec.device.startswith("gpu:") else "0"
    return f"gpu:{index} ({name})"


def _describe(exc: BaseException, phase: str, source: ModelSource) -> dict[str, Any]:
    """Facts about a failure, for the parent's classifier."""
    oom = isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError"
    user_code = isinstance(exc, UserCodeError)
    root = exc.__cause__ if user_code and exc.__cause__ is not None else exc
    location = getattr(exc, "location", None) or user_location(root, source.path, source.spec)
    message = str(exc) if user_code else first_line(exc)
    return {
        "exception": type(root).__name__,
        "message": message,
        "location": location,
        "phase": phase,
        "oom": oom,
        "user_code": user_code,
        "traceback": "".join(traceback.format_exception(type(root), root, root.__traceback__)),
    }
