"""A warm worker letting its last trial's data go on a thread of its own, against letting it go
before the next trial (as before).

A tf.data iterator with prefetching waits for its threads to wind down when it is let go:
0.4-2.4 s on this project's CPU after trials with several steps per execution. Done in turn,
that wait falls on the next trial's start-up. On a thread of its own it waits beside the next
trial; this measures whether it then slows that trial's steps.

Interleaved rounds on one machine; in each, for each way, one warm worker (``WorkerPool``) runs
the same sequence of trials that change the knobs as a search's knob stages do. For each way:
the median start-up of the warm trials, and each setup's median samples/s; their ratios.

    python bench/bench_drop.py [--model builtin:mlp] [--rounds 5] [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import date
from pathlib import Path

from tuner.search.evaluator import trial_spec
from tuner.search.measures import Measured
from tuner.search.space import SearchSettings
from tuner.setup import Setup
from tuner.trials.models import parse_model_spec
from tuner.trials.runner import WorkerPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

WAYS = {"on a thread of its own": "0", "in turn (before)": "1"}


def sequence(policy: str, batch: int) -> list[Setup]:
    """A knob stage's order: steps per execution and XLA changing on one batch size."""
    base = Setup(policy, batch)
    return [
        base.replace(steps_per_execution=16),
        base.replace(xla=True),
        base.replace(steps_per_execution=4),
        base.replace(xla=True, steps_per_execution=4),
        base.replace(xla=True, steps_per_execution=16),
        base.replace(steps_per_execution=16),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:mlp")
    parser.add_argument("--policy", default="mixed_bfloat16")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    source = parse_model_spec(args.model)
    settings = SearchSettings(device="cpu")
    setups = sequence(args.policy, args.batch_size)
    startup: dict[str, list[float]] = {w: [] for w in WAYS}
    speed: dict[str, dict[int, list[float]]] = {w: {} for w in WAYS}
    for r in range(args.rounds):
        for way in WAYS if r % 2 == 0 else list(reversed(WAYS)):
            os.environ["MPTUNE_DROP_IN_TURN"] = WAYS[way]
            with WorkerPool() as pool:
                for i, setup in enumerate(setups):
                    result = pool.run(trial_spec(source, settings, setup, False), source=source)
                    if i:  # the first trial starts the worker
                        startup[way].append(result.timings.startup_s or 0.0)
                        figure = Measured(0, result).speed if result.ok else 0.0
                        speed[way].setdefault(i, []).append(figure)
                    print(
                        f"  round {r + 1}/{args.rounds} {way}: {setup.label} "
                        f"{result.status} start-up {result.timings.startup_s or 0:.2f} s"
                    )
    os.environ.pop("MPTUNE_DROP_IN_TURN", None)

    thread, turn = WAYS
    rows, ratios = [], []
    for i in range(1, len(setups)):
        a, b = statistics.median(speed[thread][i]), statistics.median(speed[turn][i])
        ratios.append(a / b if b else 0.0)
        rows.append(f"| `{setups[i].label}` | {a:,.0f} | {b:,.0f} | {ratios[-1]:.3f} |")
    mean = statistics.geometric_mean(r for r in ratios if r > 0)
    su = {w: statistics.median(v) for w, v in startup.items()}
    total = {w: sum(v) / args.rounds for w, v in startup.items()}
    body = f"""
## A warm worker letting its last trial's data go on a thread

`python bench/bench_drop.py --model {args.model} --rounds {args.rounds} --write` on
{date.today().isoformat()}: {machine_line()}. {args.rounds} interleaved rounds; in each, for
each way, one warm worker runs `{args.policy}` at batch size {args.batch_size} through
{len(setups)} trials that change XLA and the steps per execution as a search's knob stages do
(the first trial starts the worker and is left out).

| way | median start-up of a warm trial | start-up per round (sum) |
|---|---:|---:|
| {thread} | {su[thread]:.2f} s | {total[thread]:.2f} s |
| {turn} | {su[turn]:.2f} s | {total[turn]:.2f} s |

Samples/s of each warm trial, medians over the rounds (the trial after a drop is where a
thread still winding down would show):

| setup | {thread} | {turn} | ratio |
|---|---:|---:|---:|
{chr(10).join(rows)}

Geometric mean of the ratios: {mean:.3f} ({min(ratios):.3f}-{max(ratios):.3f}).
"""
    print(body)
    if args.write:
        write_section("drop", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
