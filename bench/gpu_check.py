"""Issue 50's GPU check in one command, for a lent machine with one NVIDIA GPU and no network
(the wheels carried as docs/benchmarks.md's "On an NVIDIA GPU" says):

    python bench/gpu_check.py [--device auto|cpu] [--budget-minutes 6] [--write]

1. a search of Keras' ResNet50 (224x224, bench/models/resnet50_224.py) on JAX, with the trials
   it ran, the stages it reached, where its time went by part, and each JAX trial's peak memory
   predicted before its first step against the one measured;
2. plain ``model.fit`` runs (bench/_fit_run.py, whole epochs after two untimed ones) of its
   pick and of its two neighbours on the batch-size ladder, like with like: each setup is fit
   as many times as the search ran it (once where it did not), the setups in turn round by
   round, every fit of a setup over the same number of epochs (the first fit's, which
   ``--fit-seconds`` sets); the median of those fits beside the median of the search's runs,
   each run named by its trial number;
3. one PyTorch trial of the pick's precision and batch size.

The search runs under ``--budget-minutes`` (6 by default; the search's own default GPU budget is
longer, 48 of its median trials: bench/bench_gpu_search.py says what that reaches). The check
is not yet run on a GPU, so how long it takes there is not known. It writes the section
``gpu-check`` of docs/benchmarks.md with ``--write``. ``--device cpu`` runs the same steps on
the CPU with ``builtin:mlp`` (the test suite runs it so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Trial:
    """One trial of the search: its own number in the session, its stage and its result."""

    number: int
    stage: str
    result: TrialResult


@dataclass
class Fits:
    """A setup's plain fits beside the search's runs of it (the trials' numbers and figures)."""

    setup: Setup
    runs: list[tuple[int, float]]
    fits: list[float | None] = field(default_factory=list)
    epochs: int = 0  #: the epochs each fit times, the first fit's; 0 before it ran

    @property
    def wanted(self) -> int:
        """As many fits as the search ran the setup, one where it did not."""
        return max(1, len(self.runs))

    @property
    def fit(self) -> float | None:
        """The median of its fits; None where one failed or none ran."""
        if not self.fits or any(f is None for f in self.fits):
            return None
        return statistics.median(f for f in self.fits if f is not None)

    @property
    def trial(self) -> float | None:
        """The median of the search's runs of the setup; None where it ran none."""
        return statistics.median(s for _, s in self.runs) if self.runs else None


def search(args: argparse.Namespace, model: str) -> tuple[list[Trial], Any, float]:
    """The search: its trials in the order they ended, its recommendation and its wall time."""
    trials: list[Trial] = []

    def on_event(event: Any) -> None:
        if isinstance(event, TrialStarted):
            print(f"  #{event.number} {event.stage}: {event.spec.setup.label}", flush=True)
        elif isinstance(event, TrialFinished):
            r = event.result
            trials.append(Trial(event.number, event.stage, r))
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


def plain_fit(
    model: str, setup: Setup, args: argparse.Namespace, epochs: int = 0
) -> tuple[float, int] | None:
    """A plain fit's samples a second and the epochs it timed (bench/_fit_run.py): over
    ``--fit-seconds`` of whole epochs, or exactly ``epochs`` of them where given; None where it
    failed."""
    env = {**os.environ, "KERAS_BACKEND": setup.backend}
    if args.device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="-1", JAX_PLATFORMS="cpu")
    seconds = "0" if epochs else str(args.fit_seconds or FIT_SECONDS[args.size])
    argv = [str(HERE / "_fit_run.py"), model, json.dumps(setup.to_dict()), seconds]
    done = run_program([*argv, str(epochs)] if epochs else argv, env)
    if done.returncode != 0:
        print(done.stderr[-1500:], file=sys.stderr)
        return None
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return float(line["samples_per_second"]), int(line["epochs"])


def like_with_like(
    model: str, pick: Setup, trials: list[Trial], args: argparse.Namespace
) -> list[Fits]:
    """The pick and its neighbours, each fit as many times as the search ran it, the setups in
    turn round by round (so that a slow spell of the machine falls on each alike), every fit of
    a setup over the epochs its first one timed."""
    found = [
        Fits(
            setup,
            [
                (t.number, rate)
                for t in trials
                if t.result.ok
                and t.result.spec.setup == setup
                and (rate := t.result.samples_per_second) is not None
            ],
        )
        for setup in neighbours(pick)
    ]
    for turn in range(max(f.wanted for f in found)):
        for f in found:
            if turn >= f.wanted or None in f.fits:
                continue  # its fits are done, or one failed: its median is not known
            print(f"plain fit {turn + 1} of {f.wanted}: {f.setup.label}", flush=True)
            done = plain_fit(model, f.setup, args, f.epochs)
            f.fits.append(done[0] if done else None)
            if done is not None and not f.epochs:
                f.epochs = done[1]
    return found


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
    trials: list[Trial],
    pick: Setup | None,
    wall_s: float,
    fits: list[Fits],
    torch_words: str,
) -> str:
    results = [t.result for t in trials]
    statuses = Counter(r.status.value for r in results)
    stages = list(dict.fromkeys(t.stage for t in trials))
    parts = {name: sum(getattr(r.timings, key) or 0.0 for r in results) for key, name in PARTS}
    total = sum(r.timings.total_s or 0.0 for r in results)
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
    for t in trials:
        r = t.result
        predicted = r.memory_prediction.peak_mb if r.memory_prediction else None
        lines.append(
            f"| {t.number} | `{r.spec.setup.label}` | {r.status.value} | "
            f"{r.samples_per_second or 0:,.0f} | "
            f"{f'{predicted:,.0f}' if predicted else '-'} | {r.peak_memory_mb or 0:,.0f} |"
        )
    lines += [
        "",
        "**Plain fits** of the pick and its neighbours (whole epochs after two untimed), as many "
        "as the search ran each setup, in turn: the median of the fits beside the median of the "
        "search's runs.",
        "",
        "| setup | plain fits samples/s (median) | fits x epochs | the search's runs (median) "
        "| trials | trial / fit |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for f in fits:
        fit, trial = f.fit, f.trial
        ratio = f"{trial / fit:.2f}" if fit and trial else "-"
        numbers = ", ".join(f"#{n}" for n, _ in f.runs) or "-"
        lines.append(
            f"| `{f.setup.label}` | {f'{fit:,.0f}' if fit else 'failed'} | "
            f"{len(f.fits)} x {f.epochs} | {f'{trial:,.0f}' if trial else 'not measured'} | "
            f"{numbers} | {ratio} |"
        )
    lines += ["", f"**A PyTorch trial**: {torch_words}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU) or cpu")
    parser.add_argument("--budget-minutes", type=float, default=6.0)
    parser.add_argument("--measure-seconds", type=float, default=2.0)
    parser.add_argument(
        "--fit-seconds",
        type=float,
        default=None,
        help="the timed seconds of a setup's first plain fit (its others time the same epochs)",
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--out", default=None, help="also write the section's text here")
    args = parser.parse_args(argv)
    args.size = "cpu" if args.device == "cpu" else "gpu"
    model = MODELS[args.size]
    print(f"search of {model} on JAX, {args.budget_minutes:g} min", flush=True)
    trials, recommendation, wall_s = search(args, model)
    pick = recommendation.setup if recommendation is not None else None
    fits = like_with_like(model, pick, trials, args) if pick is not None else []
    torch_words = torch_trial(model, pick, args) if pick is not None else "no pick to run"
    text = report(args, model, trials, pick, wall_s, fits, torch_words)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.write:
        write_section("gpu-check", text)
    return 0 if pick is not None and all(f.fit for f in fits) else 1


if __name__ == "__main__":
    sys.exit(main())
