"""Does a trial's figure predict ``model.fit``? And what does each knob do to throughput?

For each setup (built-in models and a model file with ``make_dataset``, with and without the
execution knobs) this runs, side by side and interleaved over ``--rounds`` rounds:

* a trial (``mptune trial``'s engine): the batch size over the median step time, and the
  wall-clock throughput of its measured window;
* ``model.fit`` on the same model, data and compile arguments (bench/_fit_run.py), timed by
  wall clock per epoch after a first epoch that traces and compiles.

It reports each figure as a ratio to fit's, how well each ranks the setups of a model the way fit
ranks them (Kendall's tau, pairs within 3% counted as ties), what each knob does against the
model's base setup, and the share of a trial's wall time that is measured steps.

    python bench/bench_fit.py [--rounds 5] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from tuner import api
from tuner.setup import Setup

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _report import machine_line, write_section

HERE = Path(__file__).resolve().parent
TEXT_MODEL = str(HERE / "models" / "text_dataset.py")
SLOW_MODEL = str(HERE / "models" / "slow_input.py")
MEASURE_S = 1.5
TIE = 0.03


def setups() -> list[tuple[str, Setup, str]]:
    """(model, setup, what it shows)."""
    rows = []
    for model in ("builtin:mlp", "builtin:cnn", TEXT_MODEL):
        base = Setup("float32", 64)
        rows += [
            (model, base, "base"),
            (model, base.replace(batch_size=256), "batch 256"),
            (model, base.replace(xla=True), "XLA"),
            (model, base.replace(steps_per_execution=8), "8 steps per execution"),
        ]
    # An input slowed on purpose: the trial must say input-bound and predict fit by the input.
    base = Setup("float32", 64)
    rows += [(SLOW_MODEL, base, "base"), (SLOW_MODEL, base.replace(batch_size=256), "batch 256")]
    return rows


def trial(model: str, setup: Setup) -> api.TrialResult:
    spec = api.TrialSpec(
        model=model,
        setup=setup,
        measure_seconds=MEASURE_S,
        min_steps=16,
        probe=False,
        device="cpu",
    )
    return api.run_trial(spec)


def fit(model: str, setup: Setup, step_ms: float) -> float:
    multiple = setup.steps_per_execution
    steps = max(multiple, round(MEASURE_S * 1000 / max(step_ms, 0.1) / multiple) * multiple)
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "_fit_run.py"),
            model,
            json.dumps(setup.to_dict()),
            str(steps),
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "-1"},
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["samples_per_second"])


def kendall(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two figures over the same items; near-equal pairs count as ties."""
    concordant = discordant = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        da = 0 if abs(a[i] - a[j]) <= TIE * max(a[i], a[j]) else (1 if a[i] > a[j] else -1)
        db = 0 if abs(b[i] - b[j]) <= TIE * max(b[i], b[j]) else (1 if b[i] > b[j] else -1)
        if da == 0 and db == 0:
            continue
        if da == 0:
            ties_a += 1
        elif db == 0:
            ties_b += 1
        elif da == db:
            concordant += 1
        else:
            discordant += 1
    n0 = concordant + discordant
    denom = ((n0 + ties_a) * (n0 + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    rows = setups()
    figures: dict[int, dict[str, list[float]]] = {
        i: {"median": [], "wall": [], "device": [], "bound": [], "fit": [], "share": []}
        for i in range(len(rows))
    }
    t0 = time.monotonic()
    for r in range(args.rounds):
        order = list(range(len(rows)))
        if r % 2:
            order.reverse()  # interleaved, and neither end always first
        for i in order:
            model, setup, _ = rows[i]
            result = trial(model, setup)
            if not result.ok or not result.samples_per_second:
                print(f"round {r + 1}: {setup.label} on {model}: {result.status}", flush=True)
                continue
            f = figures[i]
            f["median"].append(result.median_samples_per_second or 0.0)
            f["wall"].append(result.samples_per_second)
            f["device"].append(result.device_samples_per_second or result.samples_per_second)
            f["bound"].append(1.0 if result.input_bound else 0.0)
            f["share"].append(result.timings.measured_share or 0.0)
            f["fit"].append(fit(model, setup, result.step_time_ms["p50"]))
            print(
                f"round {r + 1}: {Path(model).name:16s} {setup.label:28s} "
                f"median {f['median'][-1]:9.0f} device {f['device'][-1]:9.0f} "
                f"reach {f['wall'][-1]:9.0f} fit {f['fit'][-1]:9.0f}",
                flush=True,
            )
    minutes = (time.monotonic() - t0) / 60

    med = {
        i: {k: statistics.median(v) if v else 0.0 for k, v in f.items()} for i, f in figures.items()
    }
    lines = [
        "| model | setup | median / fit | device / fit | reach / fit | input-bound "
        "| vs base (fit) | vs base (trial, reach) | measured share |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    taus: dict[str, dict[str, float]] = {}
    errors: dict[str, list[float]] = {"median": [], "wall": []}
    for model in dict.fromkeys(m for m, _, _ in rows):
        idx = [i for i, (m, _, _) in enumerate(rows) if m == model and med[i]["fit"]]
        base = next(i for i in idx if rows[i][2] == "base")
        for i in idx:
            m = med[i]
            for k in errors:
                errors[k].append(abs(m[k] / m["fit"] - 1))
            bound = figures[i]["bound"]
            lines.append(
                f"| {Path(model).name} | {rows[i][2]} (`{rows[i][1].label}`) | "
                f"{m['median'] / m['fit']:.2f} | {m['device'] / m['fit']:.2f} | "
                f"{m['wall'] / m['fit']:.2f} | {int(sum(bound))} of {len(bound)} | "
                f"{m['fit'] / med[base]['fit']:.2f}x | {m['wall'] / med[base]['wall']:.2f}x | "
                f"{m['share']:.0%} |"
            )
        taus[model] = {
            k: kendall([med[i][k] for i in idx], [med[i]["fit"] for i in idx])
            for k in ("median", "wall")
        }
    tau_lines = [
        f"| {Path(m).name} | {t['median']:.2f} | {t['wall']:.2f} |" for m, t in taus.items()
    ]
    body = f"""## A trial's figure against `model.fit`, and what each knob does

`python bench/bench_fit.py --rounds {args.rounds} --write`, {date.today().isoformat()}, on
{machine_line()}. Each setup ran as a trial ({MEASURE_S:g} s measured) and as `model.fit` (same
model, data and compile arguments; epochs of about {MEASURE_S:g} s after one that traces), side
by side, interleaved over {args.rounds} rounds ({minutes:.0f} min); figures are medians over the
rounds. "median" is the batch size over the median step time; "device" is the measured
window's samples over its wall time, from batches in memory; "reach" is what the trial reports
as fit's rate: the device's, or lower where the user's input (timed alone, fed as fit feeds it)
cannot keep up. "input-bound" counts the rounds whose trial said so. `slow_input.py` waits 5 ms
a batch in its `make_dataset` on purpose. The knob columns compare a setup with its model's
float32 batch-64 base, by fit and by the trial's reach figure. "measured share" is the trial's
measured steps as a share of its wall time (start-up included).

{chr(10).join(lines)}

Rank agreement with `fit` over each model's setups (Kendall's tau-b, pairs within 3% as ties;
1 is the same order):

| model | median | reach |
|---|---:|---:|
{chr(10).join(tau_lines)}

Mean distance from fit's figure over all setups: median {statistics.fmean(errors["median"]):.1%},
reach {statistics.fmean(errors["wall"]):.1%}.
"""
    print(body)
    if args.write:
        write_section("fit", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
