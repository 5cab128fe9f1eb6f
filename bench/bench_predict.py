"""The peak memory a JAX trial predicts before its first step against the peak it then
measured, on the CPU: XLA's ``memory_analysis()`` of the compiled train step plus what the
worker held before it (docs/trials.md, "Memory known before a trial runs").

    python bench/bench_predict.py [--write]

Each setup runs in a fresh worker (``mptune trial``'s path), on the CPU, for a few steps. The
measured peak is the worker's peak resident memory (``VmHWM``); the error is predicted over
measured, less one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine_line, write_section

from tuner.setup import Setup
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


def measure(model: str, policy: str, batch: int) -> dict[str, float | str]:
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
    return {
        "status": "ok",
        "live": prediction.live_mb or 0.0,
        "step": prediction.step_mb or 0.0,
        "temp": prediction.parts_mb.get("temp", 0.0),
        "predicted": prediction.peak_mb,
        "measured": measured,
        "error": prediction.peak_mb / measured - 1,
        "compile": prediction.compile_s or 0.0,
    }


HEADER = (
    "| model | policy | batch | held MB | step MB (temp) | predicted MB | measured MB | error "
    "| compile s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPTUNE_COMPILE_CACHE", "off")  # the compile timed as a user's first
    rows, errors = [], []
    for model, policy, batches in SETUPS:
        mobilenet = f"MobileNetV2 (`{Path(model).name}`)"
        name = f"`{model}`" if model.startswith("builtin:") else mobilenet
        for batch in batches:
            m = measure(model, policy, batch)
            if m["status"] != "ok":
                rows.append(f"| {name} | {policy} | {batch} | {m['status']} | | | | | |")
            else:
                errors.append(abs(float(m["error"])))
                rows.append(
                    f"| {name} | {policy} | {batch} | {m['live']:,.0f} | {m['step']:,.0f} "
                    f"({m['temp']:,.0f}) | {m['predicted']:,.0f} | {m['measured']:,.0f} | "
                    f"{float(m['error']):+.1%} | {m['compile']:.1f} |"
                )
            print(rows[-1], flush=True)
    worst = max(errors) if errors else float("nan")
    body = f"""## Peak memory predicted before a JAX trial's first step (bench/bench_predict.py)

Measured {__import__("datetime").date.today():%Y-%m-%d} on {machine_line()}, by
`python bench/bench_predict.py --write`: each setup in a fresh worker on the CPU (Keras on JAX),
its peak predicted from XLA's `memory_analysis()` of the compiled train step plus what the
worker held before it, against the peak resident memory (`VmHWM`) it then measured. "held" is
the worker's resident memory before the first step, "step" what one step adds (its temporary
buffers in brackets), "compile" the ahead-of-time compile (no persistent cache), which the
warm-up then skips.

{HEADER}
{chr(10).join(rows)}

The worst error is {worst:.1%} (issue 34 asks for 15%). The prediction falls short where XLA's
CPU kernels take scratch memory outside the step's buffers (convolutions and matrix products:
a quarter of the temporary bytes more on the built-in models, almost as much again on
MobileNetV2's depthwise convolutions, so the error grows with the batch); on a GPU
that scratch (cuDNN's and cuBLAS's workspaces) is part of XLA's buffer assignment, and what is
held before the step is the allocator's live bytes rather than a process's resident memory.
A GPU's figures are still to be measured (no GPU in this session).
"""
    print(body)
    if args.write:
        write_section("predict", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
