"""The same models on Keras 3's three backends on this machine, side by side in one run.

    python bench/bench_backends.py [--models mlp,cnn,transformer]
        [--policies float32,mixed_bfloat16] [--batch-size 64] [--rounds 3] [--device cpu]
        [--write]

Each round runs one trial of every model x policy on every backend, in fresh workers, the
backends' order rotated each round (interleaved: a drift of the machine falls on all three
alike). Reported per model and policy: each backend's median samples per second over the
rounds (the window figure the search ranks by), its ratio to TensorFlow (the median of the
per-round ratios) and its median worker start-up time.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine_line, write_section

from tuner.setup import Setup
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

BACKENDS = ("tensorflow", "jax", "torch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn,transformer")
    parser.add_argument("--policies", default="float32,mixed_bfloat16")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure-seconds", type=float, default=2.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    backends = [b for b in BACKENDS if importlib.util.find_spec(b)]
    models = [f"builtin:{m}" for m in args.models.split(",")]
    policies = args.policies.split(",")
    speed: dict[tuple[str, str, str], list[float]] = {}
    startup: dict[tuple[str, str, str], list[float]] = {}
    versions: dict[str, str] = {}
    for r in range(args.rounds):
        order = backends[r % len(backends) :] + backends[: r % len(backends)]
        for model in models:
            for policy in policies:
                for backend in order:
                    spec = TrialSpec(
                        model=model,
                        setup=Setup(policy, args.batch_size, backend=backend),
                        measure_seconds=args.measure_seconds,
                        device=args.device,
                    )
                    result = run_trial(spec)
                    key = (model, policy, backend)
                    figure = result.samples_per_second if result.ok else None
                    print(
                        f"round {r + 1} {model:22s} {policy:15s} {backend:10s} "
                        f"{result.status.value:6s} {figure or 0:10,.0f} samples/s",
                        flush=True,
                    )
                    if figure:
                        speed.setdefault(key, []).append(figure)
                        startup.setdefault(key, []).append(result.timings.startup_s)
                        versions[backend] = result.versions.get(backend, "")
    lines = [
        "## Keras 3 backends side by side (bench/bench_backends.py)",
        "",
        f"Machine: {machine_line()}.",
        "Backends: " + ", ".join(f"{b} {versions.get(b, '?')}" for b in backends) + "; batch size "
        f"{args.batch_size}, {args.measure_seconds:g} s measured per trial, {args.rounds} rounds "
        "interleaved (the backends' order rotated each round), fresh workers.",
        "",
        "| model | policy | "
        + " | ".join(f"{b} samples/s" for b in backends)
        + " | "
        + " | ".join(f"{b} / tensorflow" for b in backends[1:])
        + " | start-up s ("
        + ", ".join(backends)
        + ") |",
        "|---|---|" + "---:|" * (2 * len(backends)),
    ]
    for model in models:
        for policy in policies:
            cells = []
            for b in backends:
                runs = speed.get((model, policy, b))
                cells.append(f"{statistics.median(runs):,.0f}" if runs else "failed")
            ratios = []
            for b in backends[1:]:
                base, mine = speed.get((model, policy, "tensorflow")), speed.get((model, policy, b))
                if base and mine and len(base) == len(mine):
                    ratios.append(
                        f"{statistics.median(m / t for m, t in zip(mine, base, strict=True)):.2f}x"
                    )
                else:
                    ratios.append("n/a")
            starts = ", ".join(
                f"{statistics.median(startup[(model, policy, b)]):.1f}"
                if (model, policy, b) in startup
                else "-"
                for b in backends
            )
            lines.append(
                f"| {model} | {policy} | {' | '.join(cells)} | {' | '.join(ratios)} | {starts} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("backends", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
