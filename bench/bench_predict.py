"""The peak memory a JAX trial predicts before its first step against the peak it then
measured, on the CPU: XLA's ``memory_analysis()`` of the compiled train step plus what the
worker held before it (docs/trials.md, "Memory known before a trial runs").

    python bench/bench_predict.py [--write]

Each setup runs in a fresh worker (``mptune trial``'s path), on the CPU, for a few steps, twice:
with the compile cache off (the step compiled afresh) and on, as users run it (the cache filled
by a run before, not reported: the step loaded from it). The measured peak is the worker's peak
resident memory (``VmHWM``); the error is predicted over measured, less one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine_line, write_section

from tuner.setup import Setup
from tuner.trials.environment import COMPILE_CACHE_ENV
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

MODELS = Path(__file__).resolve().parent / "models"
#: (model, policy, batch sizes): built-ins and Keras' own MobileNetV2 from a model file.
SETUPS = (
    ("builtin:mlp", "float32", (64, 1024)),
    ("builtin:cnn", "float32", (32, 256, 1024)),
    ("builtin:cnn", "mixed_bfloat16", (256,)),
    ("builtin:transformer", "float32", (32, 128)),
    (str(MODELS / "mobilenet.py"), "float32", (16, 64)),
)


def measure(model: str, policy: str, batch: int, cache: str) -> dict[str, float | str]:
    """One trial of the setup in a fresh worker, the compile cache at ``cache`` (a directory,
    or ``off``)."""
    os.environ[COMPILE_CACHE_ENV] = cache
    spec = TrialSpec(
        model=model,
        setup=Setup(policy, batch, backend="jax"),
        steps=4,
        warmup_steps=1,
        device="cpu",
        timeout_s=600.0,
        probe=False,
    )
    result = run_trial(spec)
    prediction = result.memory_prediction
    if not result.ok or prediction is None or not result.peak_memory_mb:
        return {"status": f"{result.status.value}: {result.error.message if result.error else ''}"}
    measured = float(result.peak_memory_mb)
    live = prediction.live_mb or 0.0
    parts = prediction.parts_mb
    temp = parts.get("temp", 0.0)
    # How many times the prediction counted the temporary bytes (training.CPU_SCRATCH, which
    # this process does not import: it would load Keras here).
    rest = max(0.0, parts.get("output", 0.0) - parts.get("alias", 0.0)) + parts.get("code", 0.0)
    return {
        "status": "ok",
        "live": live,
        "step": prediction.step_mb or 0.0,
        "temp": temp,
        "predicted": prediction.peak_mb,
        "measured": measured,
        "error": prediction.peak_mb / measured - 1,
        "rose": (measured - live) / temp if temp else float("nan"),
        "scratch": ((prediction.step_mb or 0.0) - rest) / temp if temp else float("nan"),
        "compile": prediction.compile_s or 0.0,
    }


HEADER = (
    "| model | policy | batch | compile cache | held MB | step MB (temp) | predicted MB "
    "| measured MB | error | rose / temp | compile s |\n"
    "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)
    rows, errors, scratch = [], [], []
    with tempfile.TemporaryDirectory() as cache:
        for model, policy, batches in SETUPS:
            mobilenet = f"MobileNetV2 (`{Path(model).name}`)"
            name = f"`{model}`" if model.startswith("builtin:") else mobilenet
            for batch in batches:
                measure(model, policy, batch, cache)  # fills the cache, as a first run would
                for label, where in (("off", "off"), ("on", cache)):
                    m = measure(model, policy, batch, where)
                    if m["status"] != "ok":
                        rows.append(
                            f"| {name} | {policy} | {batch} | {label} | {m['status']} |" + " |" * 6
                        )
                    else:
                        errors.append(abs(float(m["error"])))
                        scratch.append(float(m["scratch"]))
                        rows.append(
                            f"| {name} | {policy} | {batch} | {label} | {m['live']:,.0f} "
                            f"| {m['step']:,.0f} ({m['temp']:,.0f}) | {m['predicted']:,.0f} "
                            f"| {m['measured']:,.0f} | {float(m['error']):+.1%} "
                            f"| {float(m['rose']):.2f} | {m['compile']:.1f} |"
                        )
                    print(rows[-1], flush=True)
    counted = f"{statistics.median(scratch):.2g}" if scratch else "?"
    worst = max(errors) if errors else float("nan")
    body = f"""## Peak memory predicted before a JAX trial's first step (bench/bench_predict.py)

Measured {__import__("datetime").date.today():%Y-%m-%d} on {machine_line()}, by
`python bench/bench_predict.py --write`: each setup in a fresh worker on the CPU (Keras on JAX),
its peak predicted from XLA's `memory_analysis()` of the compiled train step plus what the
worker held before it, against the peak resident memory (`VmHWM`) it then measured; each setup
with the compile cache off (the step compiled afresh) and on, as users run it (filled by a run
before, not reported: the step loaded from it). "held" is the worker's resident memory before
the first step, "step" what one step is predicted to add (XLA's temporary bytes, in brackets,
counted {counted} times on a CPU: `training.CPU_SCRATCH`, for the scratch XLA:CPU's kernels
take outside the step's buffers), "rose / temp" what the peak rose above "held" over the
temporary bytes, "compile" the ahead-of-time compile (or the load from the cache), which the
warm-up then skips.

{HEADER}
{chr(10).join(rows)}

The worst error is {worst:.1%} (issue 34 asks for 15%). Where the peak rose above what the
worker held, it rose by 1.2-1.3x the step's temporary bytes on the built-in models at the
larger batches (more at small batches, where those bytes are few) and by 1.7-1.9x on
MobileNetV2's depthwise convolutions: scratch that XLA's CPU kernels take outside the step's
buffer assignment, which `CPU_SCRATCH` allows for. On a GPU that scratch (cuDNN's and cuBLAS's
workspaces) is part of XLA's buffer assignment, and what is held before the step is the
allocator's live bytes rather than a process's resident memory: there the temporary bytes count
once. A GPU's figures are still to be measured (no GPU in this session).
"""
    print(body)
    if args.write:
        write_section("predict", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
