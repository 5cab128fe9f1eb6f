"""What the numerics probe costs: seconds per low-precision policy, as a share of a search.

Runs a default search (``mptune tune`` with its defaults, every policy) on each built-in model
in a throw-away session, and reads from the stored trials how long the probe took in the trial
that ran it (the first trial of each low-precision policy) and how long the whole search took.
The searches run one after another, never side by side.

    python bench/bench_probe.py [--models builtin:mlp,builtin:cnn,builtin:transformer] [--write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from tuner import api
from tuner.policies import FLOAT32, POLICIES

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _report import machine_line, write_section


def measure(model: str, storage: str) -> tuple[dict[str, float], float, int, str]:
    """Probe seconds per policy, the search's wall time, its trial count and its pick."""
    t0 = time.monotonic()
    result = api.tune(
        model,
        space=api.SearchSpace(policies=POLICIES),
        settings=api.SearchSettings(device="cpu"),
        storage=storage,
        study="probe-bench",
    )
    wall = time.monotonic() - t0
    probe: dict[str, float] = {}
    trials = api.open_session("probe-bench", storage).trials
    for stored in trials:
        r = stored.result
        if r is not None and r.timings.probe_s is not None:
            probe[str(r.spec.policy)] = r.timings.probe_s
    return probe, wall, len(trials), result.recommendation.setup.label


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="builtin:mlp,builtin:cnn,builtin:transformer")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    low = [p for p in POLICIES if p != FLOAT32]
    rows = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            storage = f"sqlite:///{Path(tmp) / 'bench.db'}"
            probe, wall, n, pick = measure(model, storage)
        total = sum(probe.values())
        cells = " | ".join(f"{probe[p]:.2f} s" if p in probe else "n/a" for p in low)
        rows.append(
            f"| `{model}` | {cells} | {wall:.0f} s ({n} trials) | {total / wall:.1%} | {pick} |"
        )
        print(rows[-1], flush=True)

    body = "\n".join(
        [
            "## Cost of the numerics probe",
            "",
            f"Measured {date.today().isoformat()} on {machine_line()} by "
            "`bench/bench_probe.py`: one default search (`mptune tune`, every policy) per "
            "built-in model, one after another. The probe runs once per low-precision policy, "
            "in that policy's first trial (at the starting batch size): a float32 twin of the "
            "model is built with the trial's weights, both run one batch of at most 32 samples "
            "eagerly, layer by layer, and under mixed_float16 the gradients of that batch are "
            "compared too. Its seconds are part of the trial's wall time (`timings.probe_s`).",
            "",
            "| model | " + " | ".join(f"probe, {p}" for p in low) + " | search wall time | "
            "probe share | recommended |",
            "|---|" + "---:|" * len(low) + "---:|---:|---|",
            *rows,
        ]
    )
    print(body)
    if args.write:
        write_section("probe", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
