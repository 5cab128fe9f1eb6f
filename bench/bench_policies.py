"""Throughput of each precision policy on one workload, and where a trial's time goes.

Runs default trials (the CLI's defaults: 5 warm-up steps, 5 s of measured steps) of each policy,
interleaved over several rounds so that drift in the machine's speed hits every policy alike,
then reports throughput as ratios to float32 and the split of a trial's wall time.

    python bench/bench_policies.py [--model builtin:cnn] [--batch-size 64] [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import date

from tuner.policies import POLICIES
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _report import machine_line, write_section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:cnn")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    results: dict[str, list] = {p: [] for p in POLICIES}
    for round_ in range(args.rounds):
        order = POLICIES[round_ % 3 :] + POLICIES[: round_ % 3]  # rotate who goes first
        for policy in order:
            spec = TrialSpec.create(args.model, policy, args.batch_size, device=args.device)
            result = run_trial(spec)
            if not result.ok:
                print(f"{policy}: {result.status} {result.error}", file=sys.stderr)
                return 1
            results[policy].append(result)
            print(
                f"round {round_ + 1} {policy:15s} {result.samples_per_second:9.1f} samples/s "
                f"measured share {result.timings.measured_share:.0%}",
                flush=True,
            )

    base = statistics.median(r.samples_per_second for r in results["float32"])
    device = results["float32"][0].device
    lines = [
        f"## Precision policies on `{args.model}`, batch {args.batch_size}",
        "",
        f"`python bench/bench_policies.py --rounds {args.rounds}` on {date.today()}: "
        f"{machine_line()}; trials on `{device}`. {args.rounds} interleaved rounds of default "
        "trials (5 warm-up steps, 5 s measured); median of the rounds.",
        "",
        "| policy | samples/s (median) | spread (min-max) | vs float32 | peak memory (MB) |",
        "|---|---|---|---|---|",
    ]
    for policy in POLICIES:
        sps = [r.samples_per_second for r in results[policy]]
        mem = statistics.median(r.peak_memory_mb for r in results[policy])
        lines.append(
            f"| {policy} | {statistics.median(sps):,.0f} | {min(sps):,.0f}-{max(sps):,.0f}"
            f" | {statistics.median(sps) / base:.2f}x | {mem:,.0f} |"
        )
    every = [r for rs in results.values() for r in rs]
    parts = {
        "start-up (process, TensorFlow import)": [r.timings.startup_s for r in every],
        "build (model, data, compile)": [r.timings.build_s for r in every],
        "warm-up steps": [r.timings.warmup_s for r in every],
        "measured steps": [r.timings.measure_s for r in every],
    }
    total = statistics.median(r.timings.total_s for r in every)
    lines += [
        "",
        f"Where a default trial's wall time goes (median over all {len(every)} trials; "
        f"total {total:.1f} s):",
        "",
        "| part | seconds | share of wall time |",
        "|---|---|---|",
    ]
    for name, values in parts.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.2f} | {median / total:.0%} |")
    shares = [r.timings.measured_share for r in every]
    lines += [
        "",
        f"Measured share per trial: min {min(shares):.0%}, median "
        f"{statistics.median(shares):.0%}, max {max(shares):.0%}.",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.write:
        write_section("policies", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
