"""What the numerics probe costs: seconds per low-precision policy, where they go, against the
trial's own compile and measuring, and as a share of a search.

Trials: for each backend and model, ``mptune trial`` of each low-precision policy (the trial
that runs the probe), in a fresh worker with an empty compilation cache, as a search's first
trial of that policy runs, at batch size 32 (the probe's 32 samples). From each trial:
``timings.probe_s``, ``numerics.probe_parts`` (where the probe's seconds went) and the trial's
warm-up (its compile) and measuring. With ``--baseline DIR`` (a directory that holds an earlier
``tuner`` package, e.g. ``git archive <commit> tuner | tar -x -C DIR``) every trial also runs
on that version, interleaved (A B A B ...), and the table gives both. The models: Keras'
ResNet50 shaped as on a GPU but small enough for a CPU (64x64x3, 100 classes, a ``.py`` model
file with synthetic data, nothing downloaded) and the built-in ones.

Searches: one default search (``mptune tune``, every policy) per built-in model in a throw-away
session, and the probe's seconds (in the first trial of each low-precision policy) as a share of
the search's wall time.

Everything runs one after another, never side by side.

    python bench/bench_probe.py [--backends jax,tensorflow] [--models resnet50,builtin:cnn]
        [--repeats 2] [--baseline DIR] [--search-models builtin:mlp,...|none] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from tuner import api
from tuner.policies import FLOAT32, POLICIES

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _report import machine_line, write_section

ROOT = Path(__file__).resolve().parents[1]
LOW = [p for p in POLICIES if p != FLOAT32]
BATCH_SIZE = 32
RESNET50 = """import keras


def build_model():
    model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=100)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy")
    return model
"""
NAMES = {"resnet50": "ResNet50 64x64x3, 100 classes"}


def trial(root: Path, model: str, backend: str, policy: str) -> dict[str, Any]:
    """One ``mptune trial`` with the probe, run by the ``tuner`` package under ``root``."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "MPTUNE_COMPILE_CACHE": cache, "JAX_PLATFORMS": "cpu"}
        env.pop("KERAS_BACKEND", None)
        proc = subprocess.run(
            [sys.executable, "-m", "tuner", "trial", "--model", model, "--backend", backend,
             "--policy", policy, "--batch-size", str(BATCH_SIZE), "--steps", "5",
             "--warmup", "2", "--device", "cpu", "--json"],
            capture_output=True, text=True, cwd=root, env=env, timeout=1800, check=False,
        )  # fmt: skip
    try:
        found: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"mptune trial under {root} failed:\n{proc.stderr[-3000:]}") from None
    return found


def compiled_and_measured(timings: dict[str, Any]) -> float:
    """The trial's own compile (ahead of its steps, on JAX), warm-up steps and measuring."""
    return sum(timings.get(k) or 0.0 for k in ("compile_s", "warmup_s", "measure_s"))


def grouped(parts: dict[str, float]) -> str:
    """The probe's parts in four groups: the twin, each model's pass, the comparison."""
    if not parts:
        return "-"

    def total(prefixes: tuple[str, ...]) -> float:
        return sum(s for k, s in parts.items() if k.startswith(prefixes))

    def one_pass(prefixes: tuple[str, ...]) -> str:
        compiled = sum(s for k, s in parts.items() if k.startswith(prefixes) and "compile" in k)
        text = f"{total(prefixes):.1f}"
        return text + (f" (compile {compiled:.1f})" if compiled else "")

    return (
        f"twin {total(('twin', 'weights')):.1f} · float32 {one_pass(('float32_',))} · "
        f"policy {one_pass(('policy_', 'fixed_'))} · compare {total(('compare', 'flush')):.1f}"
    )


def trials_table(args: argparse.Namespace, model_dir: Path) -> list[str]:
    roots = {"after": ROOT} | ({"before": Path(args.baseline)} if args.baseline else {})
    runs: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    cases = [
        (b, m, p) for b in args.backends.split(",") for m in args.models.split(",") for p in LOW
    ]
    for rep in range(args.repeats):
        for backend, model, policy in cases:
            spec = str(model_dir / f"{model}.py") if model in NAMES else model
            for label, root in roots.items():
                found = trial(root, spec, backend, policy)
                runs.setdefault((backend, model, policy, label), []).append(found)
                t = found["timings"]
                print(
                    f"[{rep + 1}/{args.repeats}] {backend} {model} {policy} {label} "
                    f"({found.get('status')}): probe {t.get('probe_s') or 0:.2f} s, compile and "
                    "measure "
                    f"{compiled_and_measured(t):.2f} s, "
                    f"{found.get('numerics', {}).get('probe_parts')}",
                    flush=True,
                )
    rows = []
    for backend, model, policy in cases:
        after = runs[(backend, model, policy, "after")]
        before = runs.get((backend, model, policy, "before"), [])
        probe = statistics.median(r["timings"]["probe_s"] or 0.0 for r in after)
        trial_s = statistics.median(compiled_and_measured(r["timings"]) for r in after)
        parts = {
            k: statistics.median(r["numerics"].get("probe_parts", {}).get(k, 0.0) for r in after)
            for k in after[0]["numerics"].get("probe_parts", {})
        }
        was = (
            f"{statistics.median(r['timings']['probe_s'] or 0.0 for r in before):.1f} s"
            if before
            else "-"
        )
        statuses = ", ".join(sorted({str(r.get("status")) for r in after}))
        measured = (
            f"{trial_s:.1f} s | {probe / trial_s:.2f}"
            if trial_s
            else f"- (not measured: the trial is {statuses}) | -"
        )
        rows.append(
            f"| {backend} | {NAMES.get(model, f'`{model}`')} | {policy} | {was} | "
            f"{probe:.1f} s | {grouped(parts)} | {measured} |"
        )
        print(rows[-1], flush=True)
    return rows


def search(model: str, storage: str) -> tuple[dict[str, float], float, int, str]:
    """Probe seconds per policy, the search's wall time, its trial count and its pick."""
    t0 = time.monotonic()
    result = api.tune(
        api.TuneRequest(
            model,
            space=api.SearchSpace(policies=POLICIES),
            settings=api.SearchSettings(device="cpu"),
            storage=storage,
            study="probe-bench",
        )
    )
    wall = time.monotonic() - t0
    probe: dict[str, float] = {}
    trials = api.open_session("probe-bench", storage).trials
    for stored in trials:
        r = stored.result
        if r is not None and r.timings.probe_s is not None:
            probe[str(r.spec.policy)] = r.timings.probe_s
    return probe, wall, len(trials), result.recommendation.setup.label


def searches_table(models: list[str]) -> list[str]:
    rows = []
    for model in models:
        with tempfile.TemporaryDirectory() as tmp:
            storage = f"sqlite:///{Path(tmp) / 'bench.db'}"
            probe, wall, n, pick = search(model, storage)
        total = sum(probe.values())
        cells = " | ".join(f"{probe[p]:.2f} s" if p in probe else "n/a" for p in LOW)
        rows.append(
            f"| `{model}` | {cells} | {wall:.0f} s ({n} trials) | {total / wall:.1%} | {pick} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="jax,tensorflow")
    parser.add_argument("--models", default="resnet50,builtin:cnn,builtin:transformer")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--baseline", help="a directory holding an earlier tuner package")
    parser.add_argument("--search-models", default="builtin:mlp,builtin:cnn,builtin:transformer")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        for name in NAMES:
            (model_dir / f"{name}.py").write_text(RESNET50, encoding="utf-8")
        trial_rows = trials_table(args, model_dir)
    search_models = [] if args.search_models == "none" else args.search_models.split(",")
    search_rows = searches_table(search_models)

    before = (
        "**before** is the same trial on the version in `--baseline` (the probe before it was "
        "compiled on JAX and took its gradients from its own pass), interleaved with **after** "
        "(A B A B), the median of "
        if args.baseline
        else "the median of "
    )
    lines = [
        "## Cost of the numerics probe",
        "",
        f"Measured {date.today().isoformat()} on {machine_line()} by `bench/bench_probe.py`.",
        "",
        "**Per trial.** `mptune trial` of each low-precision policy, the trial that runs the "
        f"probe, at batch size {BATCH_SIZE} (the probe's 32 samples), 5 measured steps after 2 "
        "warm-up steps, in a fresh worker with an empty compilation cache, as a search's first "
        f"trial of that policy runs; {before}{args.repeats} runs. Where the probe's seconds went "
        "(`numerics.probe_parts`, grouped): building the float32 twin and copying the weights "
        "into it; the twin's pass and the trial model's pass (the fix's pass too, where one was "
        "applied), each a recorded forward pass and, under mixed_float16, the gradients of its "
        "loss: on JAX one compiled function (its XLA compile in brackets), elsewhere eagerly; "
        "the layer-by-layer comparison and the gradient checks. The last two columns: the "
        "trial's compile (ahead of its steps on JAX, `timings.compile_s`) and warm-up steps plus "
        "its measuring, and the probe against that (the "
        "issue's bound on a GPU: at most 1).",
        "",
        "| backend | model | policy | probe before | probe | where its seconds go (s) | "
        "trial's compile + measuring | probe / that |",
        "|---|---|---|---:|---:|---|---:|---:|",
        *trial_rows,
    ]
    if search_rows:
        lines += [
            "",
            "**In a search.** One default search (`mptune tune`, every policy) per built-in "
            "model, one after another; the probe runs once per low-precision policy, in that "
            "policy's first trial, and its seconds are part of that trial's wall time "
            "(`timings.probe_s`).",
            "",
            "| model | "
            + " | ".join(f"probe, {p}" for p in LOW)
            + " | search wall time | probe share | recommended |",
            "|---|" + "---:|" * len(LOW) + "---:|---:|---|",
            *search_rows,
        ]
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_section("probe", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
