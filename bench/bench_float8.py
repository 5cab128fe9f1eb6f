"""Issue 53's float8 question on one GPU: does float8 pay against mixed_bfloat16 for a
transformer, as a trial measures it and as a plain ``model.fit`` trains?

    python bench/bench_float8.py [--device auto|cpu] [--rounds 2] [--write]

bench/models/transformer_float8.py (12 blocks of width 1,024, sequence length 512) on JAX at
batch 32: ``mixed_bfloat16`` and ``mixed_bfloat16`` with float8 (``model.quantize("float8")``
after the build), each as an mptune trial (fit's own loop) and as a plain fit
(bench/_fit_run.py: whole epochs after two untimed ones), interleaved, ``--rounds`` times; the
float8 trial's layers are read back (``float8_from_mixed_bfloat16``). It writes the section
``float8`` of docs/benchmarks.md with ``--write``. ``--device cpu`` runs the same steps on a
transformer of 2 blocks of width 64 and sequence 32, where Keras emulates float8 (correct, not
fast): a check that the bench runs, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import machine_line, write_section

from tuner import api
from tuner.setup import Setup

HERE = Path(__file__).resolve().parent
MODEL = str(HERE / "models" / "transformer_float8.py")
SIZES = {"gpu": "12x1024x512", "cpu": "2x64x32"}
FIT_SECONDS = {"gpu": 20.0, "cpu": 3.0}
SETUPS = (
    Setup("mixed_bfloat16", 32, backend="jax"),
    Setup("mixed_bfloat16", 32, backend="jax", float8=True),
)


def _environment(args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, "KERAS_BACKEND": "jax", "MPTUNE_TRANSFORMER": SIZES[args.size]}
    if args.device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="-1", JAX_PLATFORMS="cpu")
    return env


def trial(setup: Setup, args: argparse.Namespace) -> api.TrialResult:
    """One mptune trial of ``setup`` (the model's size set in this process's environment,
    which its worker inherits)."""
    os.environ["MPTUNE_TRANSFORMER"] = SIZES[args.size]
    spec = api.TrialSpec(
        model=MODEL,
        setup=setup,
        measure_seconds=args.measure_seconds,
        device="cpu" if args.device == "cpu" else "auto",
    )
    return api.run_trial(spec)


def plain_fit(setup: Setup, args: argparse.Namespace) -> float | None:
    """A plain fit's samples a second (bench/_fit_run.py), or None where it failed."""
    command = [sys.executable, str(HERE / "_fit_run.py"), MODEL, json.dumps(setup.to_dict())]
    done = subprocess.run(
        [*command, str(FIT_SECONDS[args.size])],
        capture_output=True,
        text=True,
        env=_environment(args),
    )
    if done.returncode != 0:
        print(done.stderr[-1500:], file=sys.stderr)
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_second"])


def report(
    args: argparse.Namespace, rows: list[tuple[Setup, list[float], list[float], str]]
) -> str:
    blocks, width, length = SIZES[args.size].split("x")
    lines = [
        "## float8 against mixed_bfloat16 (bench/bench_float8.py, issue 53)",
        "",
        f"`python bench/bench_float8.py --device {args.device} --rounds {args.rounds}`, "
        f"{date.today().isoformat()}, on {machine_line()}. A transformer of {blocks} blocks of "
        f"width {width}, sequence length {length} (bench/models/transformer_float8.py), JAX, "
        "batch 32; trial and plain fit interleaved, each figure a round's.",
        "",
        "| setup | trial samples/s (fit's loop) | plain fit samples/s | layers read back |",
        "|---|---:|---:|---|",
    ]
    for setup, trials, fits, layers in rows:
        lines.append(
            f"| `{setup.label}` | {', '.join(f'{t:,.0f}' for t in trials) or 'failed'} | "
            f"{', '.join(f'{f:,.0f}' for f in fits) or 'failed'} | {layers} |"
        )
    (_, bf16_trials, bf16_fits, _), (_, f8_trials, f8_fits, _) = rows
    if bf16_fits and f8_fits and bf16_trials and f8_trials:
        fit_ratio = max(f8_fits) / max(bf16_fits)
        trial_ratio = max(f8_trials) / max(bf16_trials)
        lines += [
            "",
            f"float8 / mixed_bfloat16: {fit_ratio:.2f}x in a plain fit, {trial_ratio:.2f}x in "
            "mptune's trials (the best round of each)"
            + (
                ": on the CPU Keras emulates float8, so this is no figure for a GPU."
                if args.device == "cpu"
                else "."
            ),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU) or cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure-seconds", type=float, default=3.0)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    args.size = "cpu" if args.device == "cpu" else "gpu"
    results: dict[Setup, tuple[list[float], list[float], str]] = {s: ([], [], "") for s in SETUPS}
    for round_ in range(args.rounds):
        for setup in SETUPS:  # interleaved: the machine's drift falls on both alike
            print(f"round {round_ + 1}: trial and plain fit of {setup.label}", flush=True)
            trials, fits, layers = results[setup]
            r = trial(setup, args)
            if r.ok:
                trials.append(r.samples_per_second or 0.0)
                got = r.trained
                layers = (
                    f"{got.quantized}_from_{got.policy}"
                    if got and got.quantized
                    else (got.policy if got else "-")
                )
            else:
                print(f"  trial {r.status.value}: {r.error.message if r.error else ''}", flush=True)
            fit = plain_fit(setup, args)
            if fit is not None:
                fits.append(fit)
            results[setup] = (trials, fits, layers)
    text = report(args, [(s, *results[s]) for s in SETUPS])
    print(text)
    if args.write:
        write_section("float8", text)
    return 0 if all(t and f for t, f, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
