"""The peak memory a JAX trial predicts before its first step against the peak it then
measured, on the CPU: XLA's ``memory_analysis()`` of the compiled train step plus what the
worker held before it (docs/trials.md, "Memory known before a trial runs").

    python bench/bench_predict.py [--rounds 3] [--write]

Each setup runs in a fresh worker (``mptune trial``'s path), on the CPU, for a few steps, twice:
with the compile cache off (the step compiled afresh) and on, as users run it (the cache filled
by a run before, not reported: the step loaded from it). The measured peak is the worker's peak
resident memory (``VmHWM``); the error is predicted over measured, less one. Every setup runs
once a round, ``--rounds`` times; the table gives the medians and the error's range.
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
    "| measured MB | error (range) | rose / temp | compile s |\n"
    "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs of every setup, interleaved (default 3)"
    )
    args = parser.parse_args(argv)
    results: dict[tuple[str, str, int, str], list[dict[str, float | str]]] = {}
    names: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as cache:
        for model, policy, batches in SETUPS:
            for batch in batches:
                measure(model, policy, batch, cache)  # fills the cache, as a first run would
        for round_ in range(args.rounds):
            for model, policy, batches in SETUPS:
                mobilenet = f"MobileNetV2 (`{Path(model).name}`)"
                names[model] = f"`{model}`" if model.startswith("builtin:") else mobilenet
                for batch in batches:
                    for label, where in (("off", "off"), ("on", cache)):
                        m = measure(model, policy, batch, where)
                        results.setdefault((model, policy, batch, label), []).append(m)
                        print(f"round {round_ + 1}", model, policy, batch, label, m, flush=True)
    rows, errors, scratch = [], [], []
    for (model, policy, batch, label), found in results.items():
        ok = [m for m in found if m["status"] == "ok"]
        head = f"| {names[model]} | {policy} | {batch} | {label} |"
        if len(ok) < len(found):
            failed = next(m for m in found if m["status"] != "ok")
            rows.append(f"{head} {failed['status']} |" + " |" * 6)
            continue

        def mid(key: str, runs: list[dict[str, float | str]] = ok) -> float:
            return statistics.median(float(m[key]) for m in runs)

        errs = [float(m["error"]) for m in ok]
        error = mid("error")
        errors.append(abs(error))
        scratch.append(mid("scratch"))
        rows.append(
            f"{head} {mid('live'):,.0f} | {mid('step'):,.0f} ({mid('temp'):,.0f}) "
            f"| {mid('predicted'):,.0f} | {mid('measured'):,.0f} | {error:+.1%} "
            f"({min(errs):+.1%} to {max(errs):+.1%}) | {mid('rose'):.2f} | {mid('compile'):.1f} |"
        )
    counted = f"{statistics.median(scratch):.2g}" if scratch else "?"
    worst = max(errors) if errors else float("nan")
    body = f"""## Peak memory predicted before a JAX trial's first step (bench/bench_predict.py)

Measured {__import__("datetime").date.today():%Y-%m-%d} on {machine_line()}, by `python
bench/bench_predict.py --write`: each setup in a fresh worker on the CPU (Keras on JAX), its
peak predicted from XLA's `memory_analysis()` of the compiled train step plus what the worker
held before it, against the peak resident memory (`VmHWM`) it then measured; each setup with
the compile cache off (the step compiled afresh) and on, as users run it (filled by a run
before, not reported: the step loaded from it), {args.rounds} rounds, every setup once a round;
each figure is the median of its rounds, the error's range beside it. "held" is the worker's
resident memory before the first step, "step" what one step is predicted to add (XLA's
temporary bytes, in brackets, counted {counted} times on a CPU: `training.CPU_SCRATCH`, for the
scratch XLA:CPU's kernels take outside the step's buffers), "rose / temp" what the peak rose
above "held" over the temporary bytes, "compile" the ahead-of-time compile (or the load from
the cache), which the warm-up then skips.

{HEADER}
{chr(10).join(rows)}

The worst median error is {worst:.1%} (issue 34 asks for 15%); a peak moves by several percent
from one run to the next here (the ranges), most on the small steps, where a few tens of MB
that are not the step's buffers are much of what the peak rose by. Where the peak rose above
what the worker held, it rose by 1.2-1.3x the step's temporary bytes on the built-in models at
the larger batches (more at small batches, where those bytes are few) and by 1.7-1.9x on
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
