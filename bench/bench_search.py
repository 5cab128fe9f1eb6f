"""mptune's search against an exhaustive grid, the guides' naive setup and KerasTuner.

In one run on one machine, over the same space (policies x batch sizes 8-1024 x float16 loss
scales) with the same trial settings:

* mptune's search (``tune``), in a fresh session;
* an exhaustive grid: every setup of the space, one trial each;
* the naive setup the guides suggest: mixed_float16 at batch size 64 with Keras' default dynamic
  loss scale;
* KerasTuner's RandomSearch over the same setups, with as many trials as mptune's search used.

The throughput of each method's pick is read from the grid's measurements, so all are compared
on the same numbers. Needs ``pip install keras-tuner`` (the ``bench`` extra).

    python bench/bench_search.py [--model builtin:cnn] [--write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from tuner.hardware import detect
from tuner.policies import MIXED_FLOAT16
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.strategy import Evaluator
from tuner.search.tune import hardware_prior, tune
from tuner.trials.models import parse_model_spec
from tuner.trials.spec import LossScale

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

Setup = tuple[str, int, str]


def grid_setups(space: SearchSpace) -> list[Setup]:
    setups = []
    for policy in space.policies:
        scales = space.loss_scales if policy == MIXED_FLOAT16 else (LossScale("none"),)
        for batch in space.batch_sizes:
            for scale in scales:
                setups.append((policy, batch, str(scale)))
    return setups


def run_setups(
    setups: list[Setup], model: str, settings: SearchSettings, storage: str, name: str
) -> tuple[dict[Setup, float], float]:
    """Run each setup once through the same evaluator the search uses; samples/s per setup."""
    session = TuningSession.create(name, storage, {"model": model})
    evaluator = Evaluator(session, parse_model_spec(model), settings)
    t0 = time.monotonic()
    speeds: dict[Setup, float] = {}
    for i, (policy, batch, scale) in enumerate(setups, 1):
        m = evaluator.measure(policy, batch, LossScale.parse(scale), name)
        speeds[(policy, batch, scale)] = (
            m.speed if m.result.ok and m.result.nonfinite_steps == 0 else 0.0
        )
        print(
            f"  {name} {i}/{len(setups)} {policy} b{batch} {scale}: "
            f"{m.result.status.value} {m.speed:,.0f}",
            flush=True,
        )
    return speeds, time.monotonic() - t0


def keras_tuner_pick(
    setups: list[Setup],
    trials: int,
    model: str,
    settings: SearchSettings,
    storage: str,
    workdir: str,
) -> tuple[Setup, float]:
    import keras_tuner as kt

    session = TuningSession.create("kerastuner", storage, {"model": model})
    evaluator = Evaluator(session, parse_model_spec(model), settings)
    labels = [f"{p}|{b}|{s}" for p, b, s in setups]

    class TrialSearch(kt.RandomSearch):
        """RandomSearch whose trial is an mptune worker trial of the chosen setup."""

        def run_trial(self, trial, *args, **kwargs):
            policy, batch, scale = trial.hyperparameters.Choice("setup", labels).split("|")
            m = evaluator.measure(policy, int(batch), LossScale.parse(scale), "kerastuner")
            ok = m.result.ok and m.result.nonfinite_steps == 0
            print(f"  kerastuner {policy} b{batch} {scale}: {m.speed:,.0f}", flush=True)
            return {"samples_per_second": m.speed if ok else 0.0}

    t0 = time.monotonic()
    search = TrialSearch(
        objective=kt.Objective("samples_per_second", "max"),
        max_trials=trials,
        seed=1,
        directory=workdir,
        project_name="bench",
        overwrite=True,
    )
    search.search()
    best = search.get_best_hyperparameters(1)[0].get("setup").split("|")
    return (best[0], int(best[1]), best[2]), time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:cnn")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    profile = detect()
    space = SearchSpace(policies=hardware_prior(profile))
    settings = SearchSettings(device=args.device)
    setups = grid_setups(space)
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"sqlite:///{Path(tmp) / 'bench.db'}"
        print(f"mptune search over {len(setups)} setups", flush=True)
        t0 = time.monotonic()
        ours = tune(
            args.model,
            space=space,
            settings=settings,
            storage=storage,
            study="search",
            profile=profile,
        )
        ours_s = time.monotonic() - t0
        ours_trials = ours.ran
        rec = ours.recommendation
        ours_setup = (rec.setup.policy, rec.setup.batch_size, str(rec.setup.loss_scale))

        print("exhaustive grid", flush=True)
        grid, grid_s = run_setups(setups, args.model, settings, storage, "grid")
        naive_setup = (MIXED_FLOAT16, 64, "dynamic")

        print(f"KerasTuner RandomSearch, {ours_trials} trials", flush=True)
        kt_setup, kt_s = keras_tuner_pick(
            setups, ours_trials, args.model, settings, storage, str(Path(tmp) / "kt")
        )

    best_setup = max(grid, key=grid.__getitem__)
    best = grid[best_setup]

    def row(name: str, setup: Setup, trials: int | str, seconds: float | None) -> str:
        ratio = grid.get(setup, 0.0) / best if best else 0.0
        share_t = f"{trials / len(setups):.0%}" if isinstance(trials, int) else "-"
        share_s = f"{seconds / grid_s:.0%}" if seconds else "-"
        return (
            f"| {name} | {setup[0]} b{setup[1]} {setup[2]} | {grid.get(setup, 0):,.0f} | "
            f"{ratio:.3f} | {trials} ({share_t}) | "
            f"{'-' if seconds is None else f'{seconds:.0f} s'} ({share_s}) |"
        )

    lines = [
        f"## Search against a grid, the naive setup and KerasTuner on `{args.model}`",
        "",
        f"`python bench/bench_search.py` on {date.today()}: {machine_line()}; trials on "
        f"`{rec.device}`. Space: {', '.join(space.policies)} x batch sizes "
        f"{space.batch_sizes[0]}-{space.batch_sizes[-1]} (powers of two) x float16 loss scales "
        f"{', '.join(str(s) for s in space.loss_scales)}: {len(setups)} setups. Trials: 5 warm-up "
        "steps, 2 s measured (at least 40 steps). Each pick's throughput is the grid's "
        "measurement of that setup, so every row uses the same numbers.",
        "",
        "| method | pick | samples/s (grid) | vs grid best | trials (share of grid) | "
        "wall time (share of grid) |",
        "|---|---|---|---|---|---|",
        row("exhaustive grid", best_setup, len(setups), grid_s),
        row("mptune search", ours_setup, ours_trials, ours_s),
        row("KerasTuner RandomSearch, same trial budget", kt_setup, ours_trials, kt_s),
        row("naive: mixed_float16, batch 64, dynamic", naive_setup, "-", None),
        "",
        f"mptune's pick reaches {grid.get(ours_setup, 0) / best:.3f} of the grid's best "
        f"throughput with {ours_trials / len(setups):.0%} of its trials and "
        f"{ours_s / grid_s:.0%} of its wall time; the naive setup runs at "
        f"{grid.get(naive_setup, 0) / max(grid.get(ours_setup, 0), 1e-9):.2f}x the speed of "
        f"mptune's pick. mptune's own measurement of its pick: {rec.samples_per_second:,.0f} "
        f"samples/s ({rec.speedup_vs_float32:.2f}x float32).",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.write:
        write_section("search", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
