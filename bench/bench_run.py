"""Does ``mptune run`` reach what ``tune --script`` tuned at? (issue 70)

For each training script in bench/scripts/ (five styles of feeding fit: a repeating tf.data
pipeline with ``steps_per_epoch``, a ``keras.utils.PyDataset``, NumPy arrays with
``validation_split``, a Python generator, and a small convnet whose epoch takes 5 s or more on
a 2-core CPU), this runs, side by side and interleaved over ``--rounds`` rounds (round 1:
script A tuned then run, script B tuned then run, ...; every other round in reverse):

* ``mptune tune --script`` (a short search: ``--max-trials 6 --measure-seconds 1``), its
  session in a SQLite store of the bench's own;
* ``mptune export SESSION --format json``, then ``mptune run SCRIPT --config FILE`` for a few
  epochs: the script for real, the tuned setup applied;
* ``mptune show SESSION --json``: the run the session kept (its ``samples_per_second``, the
  ``tuned_samples_per_second`` beside it, what it ``covered`` and its ``validation_s``).

It reports achieved / tuned per script (median over the rounds and their range), each
script's epoch in seconds (run's timed training), and what a whole epoch costs beyond it: each
script prints the wall clock at each epoch's end, so an epoch's whole time (training,
validation, the epoch's start and end, the callbacks) is the gap between two of them; the
figure a trial ranks by and run's count both leave the rest out.

    python bench/bench_run.py [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _report import machine_line, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MPTUNE = [sys.executable, "-m", "tuner.cli"]
#: (script, its style in words, its arguments for ``run``)
SCRIPTS = (
    ("tfdata_steps.py", "tf.data, repeated, `steps_per_epoch=200` at batch 32", ["--epochs", "8"]),
    ("pydataset.py", "`keras.utils.PyDataset`, batch 64, a short last batch", ["--epochs", "8"]),
    ("arrays_validation.py", "NumPy arrays, `validation_split=0.2`", ["--epochs", "8"]),
    ("generator.py", "a Python generator, `steps_per_epoch=128`", ["--epochs", "8"]),
    ("cifar_convnet.py", "NumPy arrays, a convnet on 32x32x3 (16,000 samples)", ["--epochs", "3"]),
)
TUNE_FLAGS = [
    "--max-trials",
    "6",
    "--measure-seconds",
    "1",
    "--device",
    "cpu",
    "--backend",
    "tensorflow",
]
#: the Done-means: within this on every script whose epoch takes LONG_EPOCH_S or more
WITHIN = 0.15
LONG_EPOCH_S = 5.0
EPOCH_END = re.compile(r"^epoch (\d+) ended at ([0-9.]+)$", re.M)


def mptune(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MPTUNE, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )


def one(script: str, run_args: list[str], storage: str, tmp: Path, env: dict[str, str]) -> dict:
    """Tune the script, export its session, run it with the config, and read back the run."""
    path = str(HERE / "scripts" / script)
    t0 = time.monotonic()
    tuned = mptune("tune", "--script", path, *TUNE_FLAGS, "--storage", storage, "--json", env=env)
    tune_s = time.monotonic() - t0
    if tuned.returncode != 0:
        raise RuntimeError(f"tune {script}: {tuned.returncode}: {tuned.stderr[-2000:]}")
    rec = json.loads(tuned.stdout)
    session = rec["session"]
    config = tmp / f"{session}.json"
    exported = mptune(
        "export", session, "--format", "json", "-o", str(config), "--storage", storage, env=env
    )
    if exported.returncode != 0:
        raise RuntimeError(f"export {session}: {exported.stderr[-2000:]}")
    t0 = time.monotonic()
    ran = mptune(
        "run", path, "--config", str(config), "--storage", storage, "--", *run_args, env=env
    )
    run_s = time.monotonic() - t0
    if ran.returncode != 0:
        raise RuntimeError(f"run {script}: {ran.returncode}: {ran.stderr[-3000:]}")
    shown = mptune("show", session, "--storage", storage, "--json", env=env)
    runs = json.loads(shown.stdout).get("runs") or []
    if not runs:
        raise RuntimeError(f"show {session}: no run kept: {ran.stderr[-2000:]}")
    kept = runs[-1]
    ends = [float(t) for _, t in EPOCH_END.findall(ran.stdout)]
    # the epochs after the first, as run's figure counts them: their mean, as its figure is
    whole = [b - a for a, b in itertools.pairwise(ends)]
    said = [line for line in ran.stderr.splitlines() if "trained at" in line or "fit: " in line]
    return {
        "setup": kept["setup"],
        "tuned": kept["tuned_samples_per_second"] or rec["samples_per_second"],
        "achieved": kept["samples_per_second"],
        "covered": kept["covered"],
        "untimed": kept.get("untimed"),
        "validation_s": kept.get("validation_s"),
        "whole_epoch_s": sum(whole) / len(whole) if whole else None,
        "left_out": rec.get("left_out"),
        "tune_s": tune_s,
        "run_s": run_s,
        "said": said[-1] if said else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scripts", help="a comma-separated subset of bench/scripts/")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    rows = [s for s in SCRIPTS if not args.scripts or s[0] in args.scripts.split(",")]
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "CUDA_VISIBLE_DEVICES": "-1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    results: dict[str, list[dict]] = {s[0]: [] for s in rows}
    loads: list[float] = [os.getloadavg()[0]]
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench_run_") as tmp:
        storage = f"sqlite:///{tmp}/sessions.db"
        for r in range(args.rounds):
            sequence = list(rows) if r % 2 == 0 else list(reversed(rows))
            for script, _, run_args in sequence:
                try:
                    got = one(script, run_args, storage, Path(tmp), env)
                except RuntimeError as exc:
                    print(f"round {r + 1}: {script}: {exc}", flush=True)
                    continue
                results[script].append(got)
                loads.append(os.getloadavg()[0])
                ratio = got["achieved"] / got["tuned"] if got["achieved"] else float("nan")
                cov = got["covered"] or {}
                print(
                    f"round {r + 1}: {script:22s} {got['setup']:28s} tuned {got['tuned']:9.0f} "
                    f"achieved {got['achieved'] or 0:9.0f} ({ratio:.2f}) "
                    f"epoch {cov.get('seconds', 0) / max(cov.get('epochs', 1), 1):.2f} s "
                    f"whole {got['whole_epoch_s'] or 0:.2f} s val {got['validation_s'] or 0:.2f} s "
                    f"[tune {got['tune_s']:.0f} s, run {got['run_s']:.0f} s; load {loads[-1]:.1f}]"
                    f"\n    {got['said']}",
                    flush=True,
                )
    minutes = (time.monotonic() - t_start) / 60
    text = report(rows, results, args, minutes, loads)
    print(text)
    if args.write:
        write_section("run", text)
    return 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    rows: tuple | list,
    results: dict[str, list[dict]],
    args: argparse.Namespace,
    minutes: float,
    loads: list[float],
) -> str:
    lines = [
        "| script | what fit is fed | tuned setup | achieved / tuned | rounds' range "
        "| epoch (s) | whole epoch (s) | validation (s) | rest of the epoch (s) "
        "| whole epoch's rate / tuned | samples an epoch | run's process (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    long_ok = long_n = rounds_ok = rounds_n = 0
    for script, what, _ in rows:
        got = [g for g in results[script] if g["achieved"]]
        if not got:
            lines.append(f"| `{script}` | {what} | not timed | | | | | | | | | |")
            continue
        ratios = [g["achieved"] / g["tuned"] for g in got]
        epoch = [g["covered"]["seconds"] / g["covered"]["epochs"] for g in got]
        samples = [g["covered"]["samples"] / g["covered"]["epochs"] for g in got]
        whole = [g["whole_epoch_s"] for g in got if g["whole_epoch_s"]]
        val = [g["validation_s"] or 0.0 for g in got]
        rest = [
            g["whole_epoch_s"] - e - (g["validation_s"] or 0.0)
            for g, e in zip(got, epoch, strict=True)
            if g["whole_epoch_s"]
        ]
        whole_rate = [
            (s / g["whole_epoch_s"]) / g["tuned"]
            for g, s in zip(got, samples, strict=True)
            if g["whole_epoch_s"]
        ]
        setups = Counter(g["setup"] for g in got).most_common()
        setup = ", ".join(
            f"`{s}`" + (f" ({n} of {len(got)})" if n < len(got) else "") for s, n in setups
        )
        ratio = _median(ratios)
        if _median(epoch) >= LONG_EPOCH_S:
            long_n += 1
            long_ok += abs(ratio - 1) <= WITHIN
            rounds_n += len(ratios)
            rounds_ok += sum(abs(x - 1) <= WITHIN for x in ratios)
        lines.append(
            f"| `{script}` | {what} | {setup} | {ratio:.2f} | {min(ratios):.2f}-{max(ratios):.2f} "
            f"| {_median(epoch):.2f} | {_median(whole):.2f} | {_median(val):.2f} "
            f"| {_median(rest):.2f} | {_median(whole_rate):.2f} | {_median(samples):,.0f} "
            f"| {_median([g['run_s'] for g in got]):.0f} |"
        )
    done = sum(len([g for g in v if g["achieved"]]) for v in results.values())
    return f"""## tune --script then run, side by side (bench_run.py)

`python bench/bench_run.py --rounds {args.rounds} --write`, {time.strftime("%Y-%m-%d")}, on
{machine_line()}; the machine's 1-minute load average {min(loads):.1f}-{max(loads):.1f} over the
run (other work beside it). Each script in `bench/scripts/` was tuned (`mptune tune --script
... {" ".join(TUNE_FLAGS)}`, a SQLite store of the bench's own), its session exported
(`mptune export SESSION --format json`) and the script run with it (`mptune run SCRIPT --config
FILE -- --epochs N`), script after script, interleaved over {args.rounds} rounds ({done} tune and
run pairs, {minutes:.0f} min; every other round in reverse). "achieved / tuned" is the run that
`mptune show SESSION --json` kept (`samples_per_second` over `tuned_samples_per_second`): the
median of the rounds and their range. "epoch" is run's timed training an epoch (`covered`:
seconds over epochs); "whole epoch" is the gap between two epoch ends on the wall clock (each
script prints it), after the first; "validation" is run's `validation_s`; "rest" is the whole
epoch less both (the epoch's start and end, the callbacks, the progress log); "whole epoch's
rate / tuned" is an epoch's samples over its whole time, against the tuned figure: what the user
sees; "run's process" is `mptune run`'s whole wall time (start-up, the script's data and model,
the first epoch that compiles, the timed ones). Medians over the rounds.

| {"|".join(lines[0].split("|")[1:-1])} |
{chr(10).join(lines[1:])}

**{long_ok} of {long_n} scripts whose epoch takes {LONG_EPOCH_S:g} s or more within
{WITHIN:.0%} of the tuned figure by their median; {rounds_ok} of {rounds_n} of their rounds.**
"""


if __name__ == "__main__":
    sys.exit(main())
