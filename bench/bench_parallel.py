"""The search's wall time with ``--parallel N`` against ``--parallel 1``, on a scripted 4-GPU box.

This machine has no GPU, and trials side by side on its 2 CPU cores would only slow each other.
What ``--parallel`` buys on a box of identical GPUs is how many of the search's trials are
independent of each other, which the strategy decides: so the search runs here on the fake
NVML's ``ampere_8.0_x4`` profile (four A100s; TF32 is searched too) with a scripted runner
whose every trial takes the same wall time, as a trial on a card of its own does, whatever the
other cards run. The ratio is then the strategy's own: its critical path against its trial
count. Rounds are interleaved (1, 2, 4, 1, 2, 4, ...).

    python bench/bench_parallel.py [--rounds 3] [--trial-seconds 0.5] [--write]

The correctness of real parallel trials (real workers, each pinned to its slot, none run twice,
none left behind) is tested in tests/tuner/test_parallel.py.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from tuner.hardware import detect
from tuner.hardware.nvml import SCENARIOS, FakeNvmlBackend
from tuner.search.request import TuneRequest
from tuner.search.tune import tune
from tuner.trials.result import TrialError, TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section

#: samples/s at batch 64 per precision, growing 30% a doubling up to batch 512: roughly an
#: A100's ordering for a small convolutional model (bfloat16/float16 Tensor Cores, TF32)
SPEED = {"float32": 4000.0, "float32+tf32": 7000.0, "mixed_bfloat16": 9500.0,
         "mixed_float16": 9800.0}  # fmt: skip
OOM_AT = {"float32": 4096, "float32+tf32": 4096, "mixed_bfloat16": 8192, "mixed_float16": 8192}


class Scripted:
    """Every trial takes ``seconds`` of wall time (a sleep: a GPU trial does not load the other
    cards), with figures from the model above."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def __call__(self, spec: TrialSpec, on_event: Any = None, **kwargs: Any) -> TrialResult:
        self.calls += 1
        time.sleep(self.seconds)
        setup = spec.setup
        if setup.batch_size >= OOM_AT[setup.precision]:
            return TrialResult(spec, TrialStatus.OOM, error=TrialError("OOM when allocating"))
        sps = SPEED[setup.precision] * 1.3 ** math.log2(min(setup.batch_size, 512) / 64)
        sps *= 1.08 if setup.xla else 1.0
        return TrialResult(
            spec,
            TrialStatus.OK,
            samples_per_second=sps,
            step_time_ms={"p50": 1000.0 * setup.batch_size / sps},
            peak_memory_mb=500 + setup.batch_size * (2.0 if setup.policy.is_mixed else 4.0),
            losses=tuple(2.0 - 0.01 * i for i in range(40)),
            steps_completed=40,
            device=spec.device,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trial-seconds", type=float, default=0.5)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    profile = detect(FakeNvmlBackend(SCENARIOS["ampere_8.0_x4"]))
    counts = (1, 2, 4)
    wall: dict[int, list[float]] = {n: [] for n in counts}
    trials: dict[int, int] = {}
    picks: dict[int, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for n in counts:
                runner = Scripted(args.trial_seconds)
                t0 = time.monotonic()
                result = tune(
                    TuneRequest(
                        "builtin:cnn",
                        storage=f"sqlite:///{Path(tmp) / f'p{n}-{r}.db'}",
                        study="bench",
                        profile=profile,
                        parallel=n,
                    ),
                    runner=runner,
                )
                wall[n].append(time.monotonic() - t0)
                trials[n], picks[n] = runner.calls, result.recommendation.setup.label
                print(f"  round {r + 1} --parallel {n}: {runner.calls} trials, "
                      f"{wall[n][-1]:.1f} s, {picks[n]}", flush=True)  # fmt: skip
    base = statistics.median(wall[1])
    rows = "\n".join(
        f"| {n} | {trials[n]} | {statistics.median(wall[n]):.1f} s | "
        f"{base / statistics.median(wall[n]):.2f}x | `{picks[n]}` |"
        for n in counts
    )
    text = f"""## Trials in parallel (`--parallel`), on a scripted 4-GPU box

`python bench/bench_parallel.py --rounds {args.rounds} --trial-seconds {args.trial_seconds:g}
--write` on {date.today()}: the default search of `builtin:cnn` on the fake NVML's
`ampere_8.0_x4` profile (four A100s: float32, float32+tf32, mixed_bfloat16, mixed_float16), every
trial {args.trial_seconds:g} s of wall time as a trial on a card of its own takes, whatever the
other cards run. The speed-up is the strategy's: how many of its trials are independent of each
other. Medians of {args.rounds} interleaved rounds.

| --parallel | trials | search wall time | speed-up | pick |
|---:|---:|---:|---:|---|
{rows}

The same trials and the same pick at every width: parallel lanes change when trials run, not
which. What stays in sequence is what a result decides: the baseline, each ladder's next rung,
the knob stages' next rung, the neighbourhood's next move, a runoff's next turn.
"""
    print("\n" + text)
    if args.write:
        write_section("parallel", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
