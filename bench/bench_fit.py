"""Is the figure a trial ranks by the one ``model.fit`` gives? (issue 35)

For each backend, each kind of input (NumPy arrays through Keras' data adapter, a ``tf.data``
dataset from ``make_dataset``, and a ``make_dataset`` slowed on purpose) and two batch sizes,
this runs side by side, interleaved over ``--rounds`` rounds (every other round in reverse, and
with fit before the trial):

* a trial (``mptune trial``'s engine, its worker process): the figure it ranks by (fit's own
  loop on the input, :mod:`tuner.worker.feeding`), and the device's rate from batches in
  memory beside it;
* a plain ``model.fit`` of the same model, data and compile arguments (bench/_fit_run.py), in a
  process of its own, timed by wall clock over whole epochs after a first that compiles.

It reports each figure as a ratio to fit's (medians over the rounds, with the rounds' range),
whether the trial ranks each model's two batch sizes as fit does, and whether it said
input-bound. Where a GPU is asked for (``--device gpu``) the rows without TensorFlow run.

    python bench/bench_fit.py [--rounds 5] [--backends tensorflow,jax,torch] [--write]

``--model SPEC`` (repeatable) runs those instead, e.g. a training script's rows (issue 37:
``--model script:bench/models/train_script.py``, its plain run being the script's own fit as
``mptune run`` runs it).
"""

from __future__ import annotations

import argparse
import json
import os
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
#: (model, the input it gives fit, in words)
INPUTS = (
    ("builtin:mlp", "NumPy arrays"),
    (str(HERE / "models" / "text_dataset.py"), "tf.data"),
    (str(HERE / "models" / "slow_input.py"), "tf.data, 5 ms a batch"),
)
BATCH_SIZES = (64, 256)
#: the trial's measured window; fit's timed epochs run for a long run's figure (the slow
#: epochs a tf.data pipeline has now and then, one in three or four here, averaged over more)
MEASURE_S = 3.0
FIT_S = 8.0
#: ... and at least this many timed epochs: an even number, so that an every-other-epoch
#: rhythm (TensorFlow's input autotuner holding an epoch's end, docs/trials.md) is counted as a
#: long run counts it, twice, where epochs last over FIT_S / 4.
FIT_EPOCHS = 4
#: within this of fit's figure; two setups within TIE of each other rank as a tie
WITHIN = 0.10
TIE = 0.03


def trial(model: str, setup: Setup, device: str) -> api.TrialResult:
    spec = api.TrialSpec(
        model=model,
        setup=setup,
        measure_seconds=MEASURE_S,
        min_steps=16,
        probe=False,
        device=device,
    )
    return api.run_trial(spec)


def fit(model: str, setup: Setup, device: str) -> float:
    env = {**os.environ, "KERAS_BACKEND": setup.backend}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = "-1"
        env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "_fit_run.py"),
            model,
            json.dumps(setup.to_dict()),
            str(FIT_S),
            str(FIT_EPOCHS),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["samples_per_second"])


def spread(figures: list[float]) -> float:
    """How far a figure's rounds lie apart, as a share of their median: the plain fit's own,
    process to process, is the resolution any ratio to it has on this machine."""
    return (max(figures) - min(figures)) / statistics.median(figures) if figures else 0.0


def order(a: float, b: float) -> int:
    """-1, 0 (within :data:`TIE`) or 1."""
    if abs(a - b) <= TIE * max(a, b):
        return 0
    return 1 if a > b else -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--device", default="cpu", help="cpu (default) or gpu")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="a model spec to run instead of the built-in list (repeatable): on a GPU, a model "
        "of ResNet50's size",
    )
    parser.add_argument(
        "--batch-sizes",
        default=",".join(str(b) for b in BATCH_SIZES),
        help="the two batch sizes of each model (issue 50's rows: 512,1024, where a trial's "
        "epoch of 64 batches outlasts its window)",
    )
    parser.add_argument("--section", help="the section of docs/benchmarks.md to write")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    args.batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    backends = args.backends.split(",")
    if args.model:
        inputs = [(spec, "as the model gives it") for spec in args.model]
    else:  # on a GPU machine without TensorFlow only the arrays
        inputs = [i for i in INPUTS if args.device == "cpu" or i[0].startswith("builtin:")]
    rows = [
        (backend, model, what, Setup("float32", b, backend=backend))
        for backend in backends
        for model, what in inputs
        for b in args.batch_sizes
    ]
    figures: dict[int, dict[str, list[float]]] = {
        i: {"trial": [], "device": [], "fit": [], "bound": []} for i in range(len(rows))
    }
    t0 = time.monotonic()
    for r in range(args.rounds):
        sequence = list(range(len(rows)))
        if r % 2:
            sequence.reverse()  # interleaved, and neither end always first
        for i in sequence:
            backend, model, _, setup = rows[i]
            # Within a row too, neither way always first: a machine that speeds up or slows
            # down over a minute favours neither.
            fit_first = fit(model, setup, args.device) if r % 2 else None
            result = trial(model, setup, args.device)
            if not result.ok or not result.samples_per_second:
                print(f"round {r + 1}: {setup.label} on {model}: {result.status}", flush=True)
                continue
            f = figures[i]
            f["trial"].append(result.samples_per_second)
            f["device"].append(result.device_samples_per_second or result.samples_per_second)
            f["bound"].append(1.0 if result.input_bound else 0.0)
            f["fit"].append(fit_first if fit_first is not None else fit(model, setup, args.device))
            print(
                f"round {r + 1}: {backend:10s} {Path(model).name:16s} {setup.label:24s} "
                f"trial {f['trial'][-1]:9.0f} device {f['device'][-1]:9.0f} "
                f"fit {f['fit'][-1]:9.0f}  {f['trial'][-1] / f['fit'][-1]:.2f}"
                f"{'  input-bound' if f['bound'][-1] else ''}",
                flush=True,
            )
    minutes = (time.monotonic() - t0) / 60
    print(report(rows, figures, args, minutes))
    if args.write:
        name = "fit" if args.device == "cpu" else "fit-gpu"
        if args.model and args.device == "cpu":
            name = "fit-models"  # the built-in list's table stays
        write_section(args.section or name, report(rows, figures, args, minutes))
    return 0


def report(
    rows: list[tuple[str, str, str, Setup]],
    figures: dict[int, dict[str, list[float]]],
    args: argparse.Namespace,
    minutes: float,
) -> str:
    med = {
        i: {k: statistics.median(v) if v else 0.0 for k, v in f.items()} for i, f in figures.items()
    }
    lines = [
        "| backend | input | setup | trial / fit | rounds' range | device / fit | input-bound "
        "| trial | fit | fit's own spread |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    within = ranked = 0
    pairs: dict[tuple[str, str], list[int]] = {}
    for i, (backend, model, what, setup) in enumerate(rows):
        m, f = med[i], figures[i]
        if not m["fit"]:
            continue
        pairs.setdefault((backend, model), []).append(i)
        # Each round's trial against the fit run beside it, then the median over the rounds:
        # a round the machine ran slow in weighs on both figures of its pair alike.
        ratios = [t / x for t, x in zip(f["trial"], f["fit"], strict=True)]
        device = [d / x for d, x in zip(f["device"], f["fit"], strict=True)]
        ratio = statistics.median(ratios)
        within += abs(ratio - 1) <= WITHIN
        lines.append(
            f"| {backend} | {what} (`{Path(model).name}`) | `{setup.label}` | "
            f"{ratio:.2f} | {min(ratios):.2f}-{max(ratios):.2f} | "
            f"{statistics.median(device):.2f} | {int(sum(f['bound']))} of {len(f['bound'])} | "
            f"{m['trial']:,.0f} | {m['fit']:,.0f} | {spread(f['fit']):.0%} |"
        )
    rank_lines = []
    for (backend, model), idx in pairs.items():
        a, b = idx[0], idx[-1]
        by_trial = order(med[a]["trial"], med[b]["trial"])
        by_fit = order(med[a]["fit"], med[b]["fit"])
        by_device = order(med[a]["device"], med[b]["device"])
        ranked += by_trial == by_fit
        word = {1: "first faster", -1: "second faster", 0: "a tie"}
        rank_lines.append(
            f"| {backend} | `{Path(model).name}` | {word[by_fit]} | {word[by_trial]} | "
            f"{word[by_device]} |"
        )
    measured = sum(1 for i in med if med[i]["fit"])
    models = "".join(f" --model {m}" for m in args.model)
    if args.batch_sizes != BATCH_SIZES:
        models += f" --batch-sizes {','.join(str(b) for b in args.batch_sizes)}"
    if args.section:
        models += f" --section {args.section}"
    return f"""## A trial's figure against a plain `model.fit`

`python bench/bench_fit.py --rounds {args.rounds} --backends {args.backends} --device
{args.device}{models} --write`, {date.today().isoformat()}, on {machine_line()}. Each setup ran
as a trial ({MEASURE_S:g} s measured on batches in memory, then as long in fit's own loop on
the input) and as a plain `model.fit` in a process of its own (same model, data and compile
arguments; the input as a script gives it; whole epochs for at least {FIT_S:g} s, and at least
{FIT_EPOCHS} of them, after one that compiles and one where the input settles, each paid once
by a long run), side by side,
interleaved over {args.rounds} rounds ({minutes:.0f} min; every other
round in reverse, and with fit before the trial); a ratio is the median of the rounds' own
ratios (each trial against the fit run beside it), the range is theirs, "trial" and "fit" are
medians over the rounds; "fit's own spread" is how far the plain fit's own rounds lie apart
(highest less lowest, over their median). "trial" is the figure a
trial ranks by: fit's own loop on the input (issue 35); "device" is its rate from batches in
memory, shown beside it. `slow_input.py` waits 5 ms a batch in its `make_dataset` on purpose.

| {"|".join(lines[0].split("|")[1:-1])} |
{chr(10).join(lines[1:])}

**{within} of {measured} rows within {WITHIN:.0%} of fit's figure.** Ranking of each model's
two batch sizes ({", ".join(f"b{b}" for b in args.batch_sizes)}; within {TIE:.0%} is a tie):
**{ranked} of {len(pairs)} the same as fit's.**

| backend | model | fit | trial | device |
|---|---|---|---|---|
{chr(10).join(rank_lines)}
"""


if __name__ == "__main__":
    sys.exit(main())
