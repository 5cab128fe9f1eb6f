"""Issue 50's GPU check in one command, for a lent machine with one NVIDIA GPU and no network
(the wheels carried as README's "On an NVIDIA GPU" says):

    python bench/gpu_check.py [--device auto|cpu] [--budget-minutes 6] [--write]

1. a search of Keras' ResNet50 (224x224, bench/models/resnet50_224.py) on JAX, with the trials
   it ran, the stages it reached, where its time went by part, and each JAX trial's peak memory
   predicted before its first step against the one measured;
2. a plain ``model.fit`` (bench/_fit_run.py, whole epochs after two untimed ones) of its pick
   and of its two neighbours on the batch-size ladder, beside the trial's figure for each;
3. one PyTorch trial of the pick's precision and batch size.

The search runs under ``--budget-minutes`` (6 by default, so that the whole check fits in ten
minutes on a card like the H200 of ``../shared/gpu/``; the search's own default GPU budget is
longer, 48 of its median trials: bench/bench_gpu_search.py says what that reaches). It writes
the section ``gpu-check`` of docs/benchmarks.md with ``--write``. ``--device cpu`` runs the
same steps on the CPU with ``builtin:mlp`` (the test suite runs it so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine_line, write_section

from tuner import api
from tuner.search.events import TrialFinished, TrialStarted
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import tune
from tuner.setup import Setup
from tuner.trials.result import TrialResult

HERE = Path(__file__).resolve().parent
MODELS = {"gpu": str(HERE / "models" / "resnet50_224.py"), "cpu": "builtin:mlp"}
LADDER = (16, 32, 64, 128, 256, 512, 1024)
#: A trial's parts as its timings name them, in the order a trial meets them.
PARTS = (
    ("startup_s", "start-up"),
    ("build_s", "build"),
    ("probe_s", "probe"),
    ("compile_s", "compile"),
    ("warmup_s", "warm-up"),
    ("measure_s", "device window"),
    ("input_s", "fit's loop"),
)
FIT_SECONDS = {"gpu": 20.0, "cpu": 2.0}


def search(
    args: argparse.Namespace, model: str
) -> tuple[list[tuple[str, TrialResult]], Any, float]:
    """The search: its trials (stage, result) in the order they ended, its recommendation and
    its wall time."""
    trials: list[tuple[str, TrialResult]] = []

    def on_event(event: Any) -> None:
        if isinstance(event, TrialStarted):
            print(f"  #{event.number} {event.stage}: {event.spec.setup.label}", flush=True)
        elif isinstance(event, TrialFinished):
            r = event.result
            trials.append((event.stage, r))
            print(f"     {r.status.value} {r.samples_per_second or 0:,.0f} samples/s", flush=True)

    settings = SearchSettings(
        device=args.device,
        backend="jax",
        budget_minutes=args.budget_minutes,
        measure_seconds=args.measure_seconds,
        timeout_s=600,
    )
    storage = f"sqlite:///{Path(tempfile.mkdtemp()) / 'check.db'}"
    space = SearchSpace(batch_sizes=LADDER) if args.size == "cpu" else None
    t0 = time.monotonic()
    result = tune(
        TuneRequest(model, space=space, settings=settings, storage=storage, study="gpu-check"),
        on_event=on_event,
    )
    return trials, result.recommendation, time.monotonic() - t0


def run_program(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python *argv`` in a process of its own, its output captured: how each plain fit runs
    (a test serves it from an interpreter that imported the backend once instead)."""
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)


def plain_fit(model: str, setup: Setup, args: argparse.Namespace) -> float | None:
    """A plain fit's samples a second (bench/_fit_run.py), or None where it failed."""
    env = {**os.environ, "KERAS_BACKEND": setup.backend}
    if args.device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="-1", JAX_PLATFORMS="cpu")
    seconds = str(args.fit_seconds or FIT_SECONDS[args.size])
    done = run_program(
        [str(HERE / "_fit_run.py"), model, json.dumps(setup.to_dict()), seconds], env
    )
    if done.returncode != 0:
        print(done.stderr[-1500:], file=sys.stderr)
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_second"])


def neighbours(pick: Setup) -> list[Setup]:
    """The pick and its neighbours on the ladder (half and double its batch size)."""
    at = LADDER.index(pick.batch_size) if pick.batch_size in LADDER else None
    found = [pick]
    for step in (-1, 1):
        if at is not None and 0 <= at + step < len(LADDER):
            found.append(pick.replace(batch_size=LADDER[at + step]))
    return found


def torch_trial(model: str, pick: Setup, args: argparse.Namespace) -> str:
    """One PyTorch trial of the pick's precision and batch size, in words."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed on this machine"
    setup = Setup(pick.policy, pick.batch_size, loss_scale=pick.loss_scale, backend="torch")
    spec = api.TrialSpec(
        model=model, setup=setup, measure_seconds=args.measure_seconds, device=args.device
    )
    r = api.run_trial(spec)
    if not r.ok:
        return f"`{setup.label}`: {r.status.value} ({r.error.message if r.error else ''})"
    return (
        f"`{setup.label}`: {r.samples_per_second:,.0f} samples/s in fit's loop, "
        f"{r.device_samples_per_second or 0:,.0f} on the device, peak "
        f"{r.peak_memory_mb or 0:,.0f} MB, {r.timings.total_s or 0:.1f} s"
    )


def report(
    args: argparse.Namespace,
    model: str,
    trials: list[tuple[str, TrialResult]],
    pick: Setup | None,
    wall_s: float,
    fits: list[tuple[Setup, float | None, float | None]],
    torch_words: str,
) -> str:
    statuses = Counter(r.status.value for _, r in trials)
    stages = list(dict.fromkeys(stage for stage, _ in trials))
    parts = {name: sum(getattr(r.timings, key) or 0.0 for _, r in trials) for key, name in PARTS}
    total = sum(r.timings.total_s or 0.0 for _, r in trials)
    lines = [
        "## The GPU check (bench/gpu_check.py, issue 50)",
        "",
        f"`python bench/gpu_check.py --device {args.device} --budget-minutes "
        f"{args.budget_minutes:g}`, {date.today().isoformat()}, on {machine_line()}. Model "
        f"`{Path(model).name if '/' in model else model}` on JAX.",
        "",
        f"**The search**: {len(trials)} trials ("
        + ", ".join(f"{n} {s}" for s, n in statuses.items())
        + f") in {wall_s / 60:.1f} min; stages reached: {', '.join(stages) or 'none'}; "
        f"recommended `{pick.label if pick else 'nothing'}`. Its trials' time by part: "
        + ", ".join(f"{name} {seconds:,.0f} s" for name, seconds in parts.items())
        + f", of {total:,.0f} s in all.",
        "",
        "| trial | setup | status | samples/s | peak MB predicted | peak MB measured |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for number, (_, r) in enumerate(trials):
        predicted = r.memory_prediction.peak_mb if r.memory_prediction else None
        lines.append(
            f"| {number} | `{r.spec.setup.label}` | {r.status.value} | "
            f"{r.samples_per_second or 0:,.0f} | "
            f"{f'{predicted:,.0f}' if predicted else '-'} | {r.peak_memory_mb or 0:,.0f} |"
        )
    lines += [
        "",
        "**A plain fit** of the pick and its neighbours (whole epochs after two untimed):",
        "",
        "| setup | plain fit samples/s | the search's trial | trial / fit |",
        "|---|---:|---:|---:|",
    ]
    for setup, fit, trial in fits:
        ratio = f"{trial / fit:.2f}" if fit and trial else "-"
        lines.append(
            f"| `{setup.label}` | {f'{fit:,.0f}' if fit else 'failed'} | "
            f"{f'{trial:,.0f}' if trial else 'not measured'} | {ratio} |"
        )
    lines += ["", f"**A PyTorch trial**: {torch_words}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU) or cpu")
    parser.add_argument("--budget-minutes", type=float, default=6.0)
    parser.add_argument("--measure-seconds", type=float, default=2.0)
    parser.add_argument(
        "--fit-seconds", type=float, default=None, help="each plain fit's timed seconds"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--out", default=None, help="also write the section's text here")
    args = parser.parse_args(argv)
    args.size = "cpu" if args.device == "cpu" else "gpu"
    model = MODELS[args.size]
    print(f"search of {model} on JAX, {args.budget_minutes:g} min", flush=True)
    trials, recommendation, wall_s = search(args, model)
    pick = recommendation.setup if recommendation is not None else None
    fits: list[tuple[Setup, float | None, float | None]] = []
    for setup in neighbours(pick) if pick is not None else []:
        measured = [r.samples_per_second for _, r in trials if r.ok and r.spec.setup == setup]
        print(f"plain fit of {setup.label}", flush=True)
        fits.append((setup, plain_fit(model, setup, args), max(measured, default=None)))
    torch_words = torch_trial(model, pick, args) if pick is not None else "no pick to run"
    text = report(args, model, trials, pick, wall_s, fits, torch_words)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.write:
        write_section("gpu-check", text)
    return 0 if pick is not None and all(fit for _, fit, _ in fits) else 1


if __name__ == "__main__":
    sys.exit(main())
