"""A GPU search simulated on the CPU: mptune's own search (``tuner.search.tune.tune``) on an
NVIDIA H200's ResNet50 trials, each trial priced by its parts, under two designs of the trial
workers (issue 34), for the default GPU budget and others.

    python bench/bench_gpu_search.py [--table bench/data/h200-resnet50-jax.json] [--seeds 5]
                                     [--probe-seconds 16.8] [--write]

The table (``bench/data/h200-resnet50-jax.json``) holds what the H200 measured in the search
recorded in ``../shared/gpu/h200-resnet50-jax-search.json``: each setup's throughput, device
rate, peak memory and skipped steps, each trial's phases (worker start, build, numerics probe,
warm-up, measuring) and the two out-of-memory trials' cost. :class:`tuner.trials.lookup.Lookup`
answers every trial the search asks for from it on a simulated clock, and a
:class:`tuner.trials.lookup.Pricing` prices the trial by its parts under a design:

- ``today``: every trial starts a fresh worker (a JAX worker on a GPU never stayed warm in the
  record) and pays start, build and data (the record's pool of 8 batches), the probe (a
  policy's first trial), compile and warm-up, and measuring; an out-of-memory trial pays what
  the record's paid (start, build, compile until the allocation failed).
- ``warm``: issue 34's design. One worker per precision (policy and TF32) kept warm between
  that precision's trials, as many waiting as the search's ``WorkerPool`` keeps (one per
  precision the search measures, at least three: 4 on this GPU's space): its start and build
  paid once, and again only after a failed run; a warm trial makes its data again unless its
  worker's last trial ran at its batch size (its pool of batches sized by the sample's bytes,
  as the worker sizes it now), and pays its compile where
  its worker has not compiled that step (the batch size, the compile-time knobs) and its
  measuring; the probe once per low-precision policy, at ``--probe-seconds`` for every policy;
  a setup whose compiled step needs more memory than the allocator's limit is refused at the
  price of that compile and recorded as out of memory (no step runs, the worker lives on).

Both run under the default GPU budget (the search's own rule) and fixed ones, each budget
``--seeds`` times: seed 0 without noise, the others with 3% run-to-run noise on every trial's
throughput. The text and figures go to docs/benchmarks.md with ``--write``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import re
import statistics
import sys
import tempfile
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.hardware import detect
from tuner.hardware.nvml import SCENARIOS, FakeNvmlBackend
from tuner.search.evaluator import GPU_BUDGET_MAX_S, GPU_BUDGET_MIN_S, GPU_BUDGET_TRIALS
from tuner.search.events import SearchEvent, TrialStarted
from tuner.search.measures import SearchOutcome
from tuner.search.recommend import Recommendation
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.stage import Stage, budget_group
from tuner.search.stages.context import SPE_STEP_MS
from tuner.search.tune import hardware_prior, tune
from tuner.setup import KNOBS
from tuner.trials.lookup import (
    EPOCH_RESTART_S,
    PARTS,
    POOL_BYTES,
    TODAY,
    WARM,
    WORK_PARTS,
    Charge,
    Design,
    Lookup,
    MachineTable,
    Pricing,
    SimClock,
    idle_workers,
    pool_samples,
)
from tuner.trials.result import TrialStatus
from tuner.trials.spec import LONGEST

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section

DEFAULT_TABLE = Path(__file__).resolve().parent / "data" / "h200-resnet50-jax.json"
#: The budgets simulated, in minutes (None: the default a GPU search gets).
BUDGETS: tuple[float | None, ...] = (None, 10, 20)
#: The varied designs' names (:func:`variants`).
SIZED_TODAY = "today, pool sized by sample bytes"
THREE_WAITING = "warm, 3 workers waiting"
#: The budget of the recorded search, which today's design replays.
RECORD_BUDGET = 7.5
NOISE = 0.03
#: Where the simulated sessions' SQLite files go when it is writable (Linux's shared memory).
RAM_DISK = "/dev/shm"
#: The device the simulated search tunes for.
DEVICE = "gpu:0"
#: The H200 of the record, as NVML would report it: the H100 scenario with the H200's name and
#: memory (what the search reads of it: compute capability 9.0 and 143,771 MiB).
H200_MEMORY_MB = 143771.0
#: The stages of a search as a report names them, with the stage names their trials carry, in
#: the order a search meets them (docs/search.md).
STAGES: tuple[tuple[str, frozenset[str]], ...] = (
    ("policies", frozenset({Stage.BASELINE, Stage.POLICIES})),
    ("ladders", frozenset({Stage.BATCH, Stage.REFINE})),
    ("loss scales", frozenset({Stage.LOSS_SCALE})),
    *(
        (knob.label if knob.label.isupper() else knob.label.lower(), frozenset({knob.stage}))
        for knob in KNOBS
        if knob.stage
    ),
    ("leader confirmed", frozenset({Stage.REMEASURE})),
    ("neighbourhood", frozenset({Stage.NEIGHBOURHOOD})),
    ("runoff", frozenset({Stage.RUNOFF})),
    ("guard", frozenset({Stage.GUARD})),
    ("final", frozenset({Stage.FINAL})),
)
#: The stages issue 34 names for a default GPU search to try ("policies, ladders, loss scales,
#: XLA, steps per execution").
ISSUE_STAGES = ("policies", "ladders", "loss scales", "XLA", "steps per execution")
#: What each part is called in the report.
PART_WORDS = {
    "start": "worker start",
    "build": "build",
    "data": "data making",
    "probe": "numerics probe",
    "compile": "compile and warm-up",
    "measure": "measuring",
    "fit": "fit's loop",
    "other": "rest of the trial",
    "failed": "failed runs",
}


def h200_profile() -> Any:
    """The record's H200 as the search sees it (hardware advice for compute capability 9.0)."""
    scenario = copy.deepcopy(SCENARIOS["hopper_9.0"])
    scenario["gpus"][0].update(name="NVIDIA H200", memory_total_mb=H200_MEMORY_MB)
    return detect(FakeNvmlBackend(scenario))


def gpu_space(profile: Any) -> SearchSpace:
    """The space a new search on the GPU runs: the hardware prior's policies, the default
    ladder (what ``tune`` resolves without a space)."""
    return SearchSpace(policies=hardware_prior(profile, DEVICE))


def warm_design(
    table: MachineTable,
    probe_s: float | None = None,
    space: SearchSpace | None = None,
    **changes: Any,
) -> Design:
    """Issue 34's design with the probe at ``probe_s`` for every policy (default: what
    mixed_bfloat16's probe cost in the table), and as many workers waiting as the search's
    ``WorkerPool`` keeps for ``space`` (default: the H200's, :func:`gpu_space`)."""
    probe = probe_s if probe_s is not None else table.probes.get("mixed_bfloat16")
    policies = (space or gpu_space(h200_profile())).policies
    changes.setdefault("max_idle", idle_workers(len(policies)))
    return dataclasses.replace(WARM, probe_s=probe, **changes)


@dataclass
class Run:
    """One simulated search: its trials (stage and charge, in order) and what it found."""

    design: Design
    budget: float | None
    seed: int
    stages: list[str]
    charges: list[Charge]
    minutes: float
    outcome: SearchOutcome
    recommendation: Recommendation
    pick_ratio: float  #: the pick's figure in the table over the table's best

    @property
    def trials(self) -> int:
        return len(self.charges)

    @property
    def workers(self) -> int:
        """The workers the search started (its trials in a fresh worker)."""
        return sum(1 for c in self.charges if c.fresh)

    @property
    def per_minute(self) -> float:
        return self.trials / self.minutes if self.minutes else 0.0

    def parts(self) -> dict[str, float]:
        """Seconds by part over the whole search."""
        total = dict.fromkeys(PARTS, 0.0)
        for charge in self.charges:
            for part, seconds in charge.parts.items():
                total[part] += seconds
        return total

    @property
    def seconds(self) -> float:
        return sum(self.parts().values())

    @property
    def outside(self) -> float:
        """The share of the search's time outside compiling and measuring."""
        parts = self.parts()
        total = sum(parts.values())
        return 1 - sum(parts[p] for p in WORK_PARTS) / total if total else 0.0

    def cut_short(self, label: str) -> bool:
        """Whether a time budget cut the stage ``label`` short, to keep the rest for the stages
        after it (``StageCut``: ``SearchOutcome.cut_short``)."""
        names = dict(STAGES)[label]
        return any(budget_group(stage) in self.outcome.cut_short for stage in names)

    def stage_states(self) -> dict[str, tuple[bool, str]]:
        """Each stage of :data:`STAGES`: whether the search reached it, and how (its trials,
        the decision it took without one, or that the budget cut it)."""
        counts = Counter(self.stages)
        outcome = self.outcome
        stopped = outcome.stopped_early is not None
        states: dict[str, tuple[bool, str]] = {}
        for label, names in STAGES:
            n = sum(counts[s] for s in names)
            spe = [k for k in outcome.knobs if k.knob == "steps_per_execution" and k.tried is None]
            if n:
                states[label] = (True, f"{n} trial{'s' if n != 1 else ''}")
            elif label == "XLA" and "xla" in outcome.knobs_skipped:
                states[label] = (True, "decided: " + outcome.knobs_skipped["xla"])
            elif label == "steps per execution" and spe:
                states[label] = (True, f"decided: every pick's median step over {SPE_STEP_MS:g} ms")
            elif label == "guard" and self.unchecked() is None:
                states[label] = (True, "its references were measured already")
            elif self.cut_short(label):
                states[label] = (False, "cut: its time kept for the stages after it")
            elif not stopped and label != "guard":
                states[label] = (True, "nothing to run")
            else:
                states[label] = (False, "cut by the budget")
        return states

    def unchecked(self) -> Any:
        """The alternative faster than the pick that lacks its check against float32 (the
        budget ended first), or None."""
        rec = self.recommendation
        return next(
            (
                a
                for a in rec.alternatives
                if "budget ended first" in (a.rejected or "")
                and (a.samples_per_second or 0) > rec.samples_per_second
            ),
            None,
        )

    def reached(self) -> list[str]:
        return [label for label, (ok, _) in self.stage_states().items() if ok]

    def ended_in(self) -> str | None:
        """The stage the budget ended the search in (that of its last trial before the guard's
        check), or None when it was not stopped."""
        if self.outcome.stopped_early is None:
            return None
        last = next((s for s in reversed(self.stages) if s != Stage.GUARD), None)
        return next((label for label, names in STAGES if last in names), last)

    def stage_seconds(self) -> dict[str, tuple[int, float, float]]:
        """Trials, seconds and compile seconds by stage label."""
        found: dict[str, tuple[int, float, float]] = {}
        for stage, charge in zip(self.stages, self.charges, strict=True):
            label = next((lb for lb, names in STAGES if stage in names), stage)
            n, s, c = found.get(label, (0, 0.0, 0.0))
            found[label] = (n + 1, s + charge.seconds, c + charge.parts["compile"])
        return found


def best(table: MachineTable, precisions: list[str], batch_sizes: list[int]) -> tuple[float, str]:
    """The table's best throughput over the space (measured or predicted), and its setup."""
    found, label = 0.0, ""
    for precision in precisions:
        for b in batch_sizes:
            m = table.predict(precision, b)
            speed = (m.samples_per_second or 0.0) * (1 - m.skipped_share)
            if m.status is TrialStatus.OK and speed > found:
                found, label = speed, f"{precision} b{b}"
    return found, label


def simulate(
    table: MachineTable,
    design: Design,
    budget: float | None,
    profile: Any,
    seed: int = 0,
    noise: float = NOISE,
    max_trials: int | None = None,
) -> Run:
    """Run mptune's search on ``table`` with each trial priced under ``design`` (with
    ``max_trials`` and no ``budget``: no time budget, the whole search)."""
    clock = SimClock()
    pricing = Pricing(table, design)
    runner = Lookup(table, clock, noise=noise if seed else 0.0, seed=seed, pricing=pricing)
    stages: list[str] = []

    def on_event(event: SearchEvent) -> None:
        if isinstance(event, TrialStarted):
            stages.append(str(event.stage))

    # The session's store is a throwaway: in memory where the system has a RAM disk, so that
    # its commits do not wait on the disk.
    with tempfile.TemporaryDirectory(dir=RAM_DISK if os.access(RAM_DISK, os.W_OK) else None) as tmp:
        result = tune(
            TuneRequest(
                "builtin:cnn",
                space=gpu_space(profile),
                settings=SearchSettings(
                    backend="jax", device=DEVICE, budget_minutes=budget, max_trials=max_trials
                ),
                storage=f"sqlite:///{tmp}/gpu-search.db",
                study="gpu-search",
                profile=profile,
            ),
            on_event=on_event,
            runner=runner,
            clock=clock,
        )
    rec = result.recommendation
    precisions = sorted({c.setup.precision for c in pricing.charges})
    top, _ = best(table, precisions, LADDER)
    picked = table.predict(rec.setup.precision, rec.setup.batch_size)
    speed = (picked.samples_per_second or 0.0) * (
        1 - picked.skipped_share if rec.setup.loss_scale.kind == "dynamic" else 1
    )
    return Run(
        design,
        budget,
        seed,
        stages,
        list(pricing.charges),
        clock.now / 60,
        result.outcome,
        rec,
        speed / top if top else 0.0,
    )


def default_minutes(run: Run) -> float:
    """The default GPU budget the search ended with: :data:`GPU_BUDGET_TRIALS` of its trials'
    median cost (the probe taken out), within its floor and ceiling."""
    costs = [c.seconds - c.parts["probe"] for c in run.charges]
    budget = GPU_BUDGET_TRIALS * statistics.median(costs)
    return min(GPU_BUDGET_MAX_S, max(GPU_BUDGET_MIN_S, budget)) / 60


def _budget_words(budget: float | None) -> str:
    return "default" if budget is None else f"{budget:g} min"


def _span(values: list[float], fmt: str) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    if f"{low:{fmt}}" == f"{high:{fmt}}":
        return f"{mid:{fmt}}"
    return f"{mid:{fmt}} ({low:{fmt}}-{high:{fmt}})"


def summary_row(runs: list[Run], today: list[Run]) -> str:
    """A table row over the seeds of one design and budget."""
    per_minute = [r.per_minute for r in runs]
    ratio = statistics.median(per_minute) / statistics.median(t.per_minute for t in today)
    in_all = [label for label, _ in STAGES if all(label in r.reached() for r in runs)]
    cut = [label for label, _ in STAGES if all(label not in r.reached() for r in runs)]
    some = [label for label, _ in STAGES if label not in in_all and label not in cut]
    reached = ", ".join(in_all) + (f"; in some runs: {', '.join(some)}" if some else "")
    picks = sorted({_short(r.recommendation.setup.label) for r in runs})
    ratios = [r.pick_ratio for r in runs]
    return (
        f"| {runs[0].design.name} | {_budget_words(runs[0].budget)} | "
        f"{_span([r.trials for r in runs], '.0f')} | {max(r.minutes for r in runs):.1f} | "
        f"{statistics.median(per_minute):.2f} ({ratio:.2f}x) | "
        f"{_span([100 * r.outside for r in runs], '.0f')}% | {reached} | "
        f"{', '.join(cut) or 'none'} | {', '.join(picks)}: "
        f"{min(ratios):.2f} / {statistics.median(ratios):.2f} |"
    )


def parts_row(run: Run) -> str:
    parts = run.parts()
    total = sum(parts.values())
    cells = " | ".join(f"{parts[p]:,.0f} ({parts[p] / total:.0%})" for p in PARTS)
    return (
        f"| {run.design.name}, {_budget_words(run.budget)} | {cells} | {total:,.0f} | "
        f"{run.outside:.0%} |"
    )


def stages_row(label: str, runs: list[Run]) -> str:
    cells = []
    for run in runs:
        ok, words = run.stage_states()[label]
        seconds = run.stage_seconds().get(label)
        spent = f", {seconds[1]:,.0f} s" if seconds else ""
        cells.append(f"{words}{spent}" if ok else f"**{words}**")
    return f"| {label} | {' | '.join(cells)} |"


def replay_check(table: MachineTable, profile: Any) -> tuple[Run, str]:
    """Today's design under the record's own budget, and a sentence comparing it with the
    record (the table's setups are the record's trials, in order)."""
    run = simulate(table, TODAY, RECORD_BUDGET, profile)
    recorded = sum(m.seconds or 0.0 for m in table.setups) + sum(table.probes.values())
    same = [(c.setup.precision, c.setup.batch_size) for c in run.charges] == [
        (m.precision, m.batch_size) for m in table.setups
    ]
    order = "the same setups in the same order" if same else "not the same setups in order"
    words = (
        f"{run.trials} trials (the record: {len(table.setups)}), {run.seconds:,.1f} s of trial "
        f"time (the record: {recorded:,.1f} s), {order}, {run.outside:.0%} of the time outside "
        "compiling and measuring (issue 34's count: 65% of 476 s)"
    )
    return run, words


def fresh_saving(run: Run, table: MachineTable, labels: set[str]) -> float:
    """The share of what the trials of stages ``labels`` would have cost in fresh workers
    (today's design at the same batch sizes) that the warm workers saved."""
    paid = fresh = 0.0
    for stage, charge in zip(run.stages, run.charges, strict=True):
        if next((lb for lb, names in STAGES if stage in names), stage) not in labels:
            continue
        paid += charge.seconds
        fresh += charge.seconds
        if not charge.fresh:
            # A fresh worker's start and its model's build (the data it makes either way).
            b = charge.setup.batch_size
            fresh += table.phases.get("startup_s", 0.0)
            fresh += max(0.0, table.phase("build_s", b) - table.data_s(b))
    return 1 - paid / fresh if fresh else 0.0


def _short(label: str) -> str:
    return label.removesuffix(" jax").removesuffix(" none")


def _unchecked_words(table: MachineTable, runs: dict[tuple[str, float | None], list[Run]]) -> str:
    """A paragraph on the runs that left a faster setup without its check against float32 and
    recommended a slower one, if any."""
    counts = {
        key: sum(1 for r in found if r.unchecked() is not None) for key, found in runs.items()
    }
    if not any(counts.values()):
        return "No run left a setup faster than its pick without its check against float32."
    where = "; ".join(
        f"{name}, {_budget_words(budget)}: {n} of {len(runs[(name, budget)])}"
        for (name, budget), n in counts.items()
        if n
    )
    worst = min(
        (r for found in runs.values() for r in found if r.unchecked() is not None),
        key=lambda r: r.pick_ratio,
    )
    lead = worst.unchecked()
    b = lead.setup.batch_size
    price = statistics.median(c.seconds - c.parts["probe"] for c in worst.charges)
    check = table.phases.get("startup_s", 0.0) + table.phase("build_s", b)
    check += table.data_s(b, worst.design.sized_pool) - table.data_s(b)
    check += table.phase("warmup_s", b)
    ran = {(c.setup.precision, c.setup.batch_size) for c in worst.charges if c.status.value == "ok"}
    both = [
        x for x in LADDER if x < b and ("float32", x) in ran and (lead.setup.precision, x) in ran
    ]
    below = (
        f", although both had run at batch size {max(both)}, where the guard compares a setup "
        "with float32 once float32 is known not to fit"
        if both
        else ""
    )
    return f"""Some runs ended with the leader unchecked: the budget ended before its check against
float32, and the search recommended a slower setup that had its check ({where}). The worst
({worst.design.name}, {_budget_words(worst.budget)}, seed {worst.seed}) recommended
{_short(worst.recommendation.setup.label)} at {worst.pick_ratio:.2f} of the best, naming
{_short(lead.setup.label)} "not compared with float32 at batch size {b} (the budget ended
first)". The search keeps one trial for that check, priced at its median trial ({price:.0f} s
in that run); the check is float32 at batch size {b}, which in a fresh worker costs its start,
its build and a compile at that size (about {check:.0f} s here) before it runs out of memory
(or its predicted memory refuses it){below}."""


#: A figure followed by its unit, which :func:`_wrap` keeps together.
UNIT = re.compile(r"(\d) (s|min|MB|GB|GiB|trials|runs)\b")


def _wrap(text: str) -> str:
    """Prose paragraphs and list items filled to 96 columns; tables and headings as they
    are."""
    out = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith(("|", "#")):
            out.append(block)
            continue
        items: list[str] = []
        for line in lines:
            if line.startswith("- ") or not items:
                items.append(line)
            else:
                items[-1] += " " + line.strip()
        indent = ["  " if item.startswith("- ") else "" for item in items]
        # A figure and its unit stay on one line.
        items = [UNIT.sub("\\1\u00a0\\2", item) for item in items]
        filled = "\n".join(
            textwrap.fill(item, 96, subsequent_indent=pad, break_on_hyphens=False)
            for item, pad in zip(items, indent, strict=True)
        )
        out.append(filled.replace("\u00a0", " "))
    return "\n\n".join(out)


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def report(
    table: MachineTable,
    warm: Design,
    runs: dict[tuple[str, float | None], list[Run]],
    replayed: str,
    seeds: int,
) -> str:
    """The section of docs/benchmarks.md."""
    today_runs, warm_runs = runs[(TODAY.name, None)], runs[(warm.name, None)]
    today, mine = today_runs[0], warm_runs[0]
    last = BUDGETS[-1]
    full, full_today = runs[(warm.name, last)], runs[(TODAY.name, last)]
    n_ladder, s_ladder, c_ladder = mine.stage_seconds().get("ladders", (0, 0.0, 0.0))
    saved = fresh_saving(mine, table, {"ladders"})
    cut = ", ".join(label for label, (ok, _) in mine.stage_states().items() if not ok)
    best_label = best(table, sorted({m.precision for m in table.setups}), LADDER)[1]
    rows = [
        summary_row(rs, runs[(TODAY.name, key[1])]) for key, rs in runs.items() if key[1] != WHOLE
    ]
    parts = [parts_row(today), parts_row(mine), parts_row(full[0])]
    parts += [parts_row(rs[0]) for key, rs in runs.items() if key[0] not in (TODAY.name, warm.name)]
    stages = [stages_row(label, [today, mine, full[0]]) for label, _ in STAGES]
    part_heads = " | ".join(PART_WORDS[p] for p in PARTS)
    part_cols = "---:|" * (len(PARTS) + 2)
    probe16, probe_bf16 = (
        table.probes.get("mixed_float16", 0),
        table.probes.get("mixed_bfloat16", 0),
    )
    build0, build1 = table.lines["build_s"]
    warm0, warm1 = table.lines["warmup_s"]
    compile64, compile1024 = table.phase("warmup_s", 64), table.phase("warmup_s", 1024)
    limit_gib = table.memory_mb / 1024
    policies = gpu_space(h200_profile()).policies
    # The data making's prices (module doc): the build line's slope over the record's pool.
    sample_bytes = table.sample_bytes or 0
    rate_mb = sample_bytes / 1e6 / table.data_s_per_sample if table.data_s_per_sample else 0.0
    pools = {b: pool_samples(sample_bytes, b) // b for b in (64, 128, 256, 512, 1024)}
    one_batch = [b for b in (256, 512, 1024) if pools[b] == 1]
    over = [b for b in one_batch if sample_bytes * b > POOL_BYTES]
    over_words = (
        f" (at {' and '.join(str(b) for b in over)} that one batch, "
        f"{' and '.join(f'{sample_bytes * b / 1e6:.0f}' for b in over)} MB, is over the "
        f"{POOL_BYTES / 2**20:.0f} MiB: a pool holds at least one batch)"
        if over
        else ""
    )
    # The default budget, as the search's rule gives it for each design's runs.
    default_words = {
        name: _span([default_minutes(r) for r in found], ".1f")
        for name, found in ((TODAY.name, today_runs), (warm.name, warm_runs))
    }
    fixed_words = " and ".join(f"{b:g}" for b in BUDGETS if b)
    ceiling = all(default_minutes(r) * 60 >= GPU_BUDGET_MAX_S - 1 for r in today_runs)
    # The targets, seed 0 and over the seeds.
    ratio = mine.per_minute / today.per_minute
    whole_today, whole_warm = runs[(TODAY.name, WHOLE)][0], runs[(warm.name, WHOLE)][0]
    whole_ratio = whole_warm.per_minute / whole_today.per_minute
    ratios = [w.per_minute / t.per_minute for w, t in zip(warm_runs, today_runs, strict=True)]
    row_ratio = statistics.median(r.per_minute for r in warm_runs) / statistics.median(
        r.per_minute for r in today_runs
    )
    same = [
        w.seconds and t.seconds / w.seconds
        for w, t in zip(warm_runs, today_runs, strict=True)
        if [c.setup for c in w.charges] == [c.setup for c in t.charges]
    ]
    same_words = (
        f" In {len(same)} of {len(ratios)} runs both designs ran the same trials (each a new "
        f"batch size or knob: the search ended without a runoff's repeats), and the warm design "
        f"ran them {_span(same, '.2f')}x as fast: every such trial compiles its step in either "
        "design, so the ratio rests on how many of a search's trials repeat a compiled setup"
        if same
        else ""
    )
    sized = runs.get((SIZED_TODAY, None))
    sized_words = (
        f"; against today's design making the same pool as the warm one ({SIZED_TODAY}), "
        f"{mine.per_minute / sized[0].per_minute:.2f}x"
        if sized
        else ""
    )
    every = [all(ok for ok, _ in r.stage_states().values()) for r in warm_runs]
    named = [all(label in r.reached() for label in ISSUE_STAGES) for r in warm_runs]
    named_words = (
        f"the five stages issue 34 names ({', '.join(ISSUE_STAGES)}) in "
        f"{sum(named)} of {len(named)} runs"
    )
    if every[0]:
        how = (
            f"ending by itself after {mine.trials} trials and {mine.minutes:.1f} min"
            if mine.outcome.stopped_early is None
            else f"the budget ending it after {mine.trials} trials and {mine.minutes:.1f} min"
        )
        stage_words = (
            f"it reaches every stage, {how} ({sum(every)} of {len(every)} runs reach every "
            f"stage, {named_words}; target every stage: {_met(all(every))})"
        )
    else:
        stage_words = (
            f"the budget ends it in the {mine.ended_in()} after {mine.minutes:.1f} min, so it "
            f"never reaches {cut} ({sum(every)} of {len(every)} runs reach every stage, "
            f"{named_words}; target every stage: **not met**)"
        )
    whole = [r for r in full if r.outcome.stopped_early is None]
    if not all(every) and whole:
        # What the whole search costs, in the default budget's units (its median trial).
        need = [
            r.seconds / statistics.median(c.seconds - c.parts["probe"] for c in r.charges)
            for r in whole
        ]
        stage_words += (
            f". Run to its end (under {last:g} min, {len(whole)} of {len(full)} runs end by "
            f"themselves) the warm search takes {_span([r.minutes for r in whole], '.1f')} min "
            f"and {_span([r.trials for r in whole], '.0f')} trials: "
            f"{_span(need, '.1f')} times its median trial's cost, where the default budget "
            f"gives {GPU_BUDGET_TRIALS}"
        )
    failed = [
        c
        for stage, c in zip(mine.stages, mine.charges, strict=True)
        if stage == Stage.GUARD and c.status is not TrialStatus.OK
    ]
    guard_words = (
        f"The guard's check spends {sum(c.seconds for c in failed):.0f} s on float32 at "
        f"batch size {failed[0].setup.batch_size}, refused by its compiled step's memory. "
        if failed
        else ""
    )
    three = runs.get((THREE_WAITING, None))
    three_words = (
        f" With three workers waiting instead ({THREE_WAITING}), a precision's worker ends "
        "whenever the search goes round all four and back: its seed 0 started "
        f"{three[0].workers} workers for {three[0].trials} trials ({three[0].minutes:.1f} min, "
        f"{three[0].per_minute:.2f} trials a minute)."
        if three
        else ""
    )
    mine_parts = mine.parts()
    probe_share = mine_parts["probe"] / mine.seconds
    data_ms = 1000 * table.data_s_per_sample
    ended = [r for r in full if r.outcome.stopped_early is None]
    if ended:
        run = ended[0]
        end_words = (
            f"Under {last:g} minutes the warm search ended by itself (not stopped) in "
            f"{len(ended)} of {len(full)} runs, after {run.trials} trials and "
            f"{run.minutes:.1f} min (seed {run.seed}), every stage reached"
        )
    else:
        end_words = f"Under {last:g} minutes the warm search was still stopped in every run"
    if all(r.outcome.stopped_early for r in full_today):
        end_words += f"; today's design was stopped in every run at {last:g} minutes."
    else:
        end_words += "."
    unchecked = _unchecked_words(table, runs)
    fit_words = fit_pass_words(mine, runs.get((warm.name, 10)) or [])
    title = "A GPU search simulated: today's workers against warm ones"
    return _wrap(f"""## {title} (bench/bench_gpu_search.py)

`python bench/bench_gpu_search.py --seeds {seeds} --write`. mptune's own search
(`tuner.search.tune.tune`, the strategy as it is now) runs on the CPU on an NVIDIA H200's
ResNet50 trials on JAX, on a simulated clock, each trial priced by its parts. The figures come
from the search recorded on that card, `../shared/gpu/h200-resnet50-jax-search.json` (Keras'
ResNet50, 224x224x3, 1000 classes, synthetic data; JAX 0.11.2, Keras 3.15.1; `mptune tune
--backend jax --budget-minutes 7.5`, 8 trials, 2026-11-26), condensed into
`bench/data/h200-resnet50-jax.json` (its `note` says how).

**Measured** (the record): each setup's throughput (the search's ranking figure, the input
counted), device rate, peak memory and the steps mixed_float16's dynamic loss scale skipped;
each trial's worker start, build, numerics probe (mixed_float16 {probe16:.1f} s,
mixed_bfloat16 {probe_bf16:.1f} s), warm-up (the step's compile) and measuring; what the two
out-of-memory trials cost. **Predicted** for setups the record lacks (`tuner.trials.lookup`,
as in the replay section): throughput interpolated in log2 of the batch size and flat beyond
the last measured rung, memory on the least-squares line, the phases on lines in the batch
size fitted to the record (build {build0:.1f} s + {build1:.4f} s a sample, compile and
warm-up {warm0:.1f} s + {warm1:.4f} s a sample), measuring 2 s or 40 steps at the device's
rate. **Assumed**: the designs, and that the build line's per-sample part is the time spent
making the data (each recorded trial made 8 batches of its batch size:
{data_ms:.2f} ms a sample made, about {rate_mb:.0f} MB/s of {sample_bytes / 1024:.0f} KiB samples).

- **today**: what the record shows. A JAX worker on a GPU never stays warm, so every trial
  starts a worker, builds the model and makes its data (8 batches at any batch size, as the
  record's worker did: {table.data_s(1024):.0f} s at batch size 1024), probes where it is its
  policy's first trial, compiles and measures; an out-of-memory trial pays what the record's
  did (start, build, compile until the allocation failed). Under the record's own budget
  ({RECORD_BUDGET:g} min) this design replays the record: {replayed}.
- **warm** (issue 34): one worker per precision (policy and TF32) kept warm between that
  precision's trials, at most {warm.max_idle} waiting, as the search's `WorkerPool` keeps them:
  one per precision the search measures, at least three (`max(3, len(space.policies) + 1)`
  in `tuner/search/tune.py`; this GPU's space has {len(policies)} policies, {", ".join(policies)},
  and TF32 beside float32); the least recently used ends. Start and build are paid once per
  worker, and again only after a failed run; a warm trial makes its data again unless its
  worker's last trial ran at its batch size (a runoff's or a final check's repeat trains on the
  data the worker kept), pays its compile where its worker has not compiled that step
  (batch size, loss scale, knobs), and its measuring. The data is a pool of batches sized by
  what a sample weighs, as the worker sizes a user model's now (`loading.model_sample_bytes`:
  {sample_bytes / 1024:.0f} KiB for ResNet50's samples; up to 8 batches within
  {POOL_BYTES / 2**20:.0f} MiB, at least one): {pools[64]} batches at batch size 64,
  {pools[128]} at 128, one from {min(one_batch)} up{over_words}. It is priced at the table's
  build line scaled to that pool (the line's per-sample part over its 8 batches):
  {table.data_s(64, True):.1f} s at batch size 64, {table.data_s(256, True):.1f} s at 256,
  {table.data_s(1024, True):.1f} s at 1024; a fresh worker's build makes the same pool (its
  model's build as the record timed it, less the record's 8 batches). The numerics probe runs
  once per low-precision policy, at {warm.probe_s or 0:.1f} s for every policy
  (`--probe-seconds`; what mixed_bfloat16's cost in the record: this assumes mixed_float16's
  is made as cheap, which another change under issue 34 is doing). A setup that runs out of
  memory is assumed known from its compiled step before any step runs (on JAX
  `memory_analysis()` against the allocator's limit, {table.memory_mb:,.0f} MB, 75% of the
  card): refused at the price of that compile, recorded as out of memory, its worker kept. The
  record itself leaves this open: XLA failed to allocate 76.35 GiB at float32+tf32 b1024 while
  that trial's peak read about 10.8 GB, together under the {limit_gib:.1f} GiB limit, so what
  the allocator could really give was less than its limit (with preallocation off); a
  prediction must allow for that. Compiles are per worker: JAX's persistent cache, which would
  make a fresh worker's repeated compile cheaper, is not credited (the record has no repeated
  setup to price it).

Every figure below is simulated: the record's measured parts recombined by a design, not a
run on a GPU. Both designs run under the default GPU budget, the search's own rule
(`tuner/search/evaluator.py`): {GPU_BUDGET_TRIALS} trials at the median cost of the search's
own trials (the probe taken out), at least {GPU_BUDGET_MIN_S / 60:g} and at most
{GPU_BUDGET_MAX_S / 60:g} min. With each run's own trials that rule gives today's design
{default_words[TODAY.name]} min{" (the ceiling)" if ceiling else ""} and the warm one
{default_words[warm.name]} min (a search stops before it once its next trial and the time
kept for the leader's check would pass it); the fixed budgets of {fixed_words} min are there
for comparison. Each row ran {seeds} seeds (seed 0 without noise, the others
with {NOISE:.0%} run-to-run noise on every trial's throughput): trials are the median
(range), minutes the longest run's, trials per minute the median (and its ratio to today's at
the same budget), the share of the time outside compiling and measuring the median (range).
A stage is reached when it ran trials or decided without one (JAX's XLA, which JAX always
compiles with; steps per execution where every pick's median step is over
{SPE_STEP_MS:g} ms). "pick / best" is the pick's figure in the table over the table's best
setup ({best_label}, skipped steps counted), the worst run and the median. The last two rows
vary a design under the default budget: today's workers making the pool the worker makes now
({SIZED_TODAY}: the warm design's data prices, where today's row keeps the record's), and the
warm design with three workers waiting, as it had before the search kept one per precision
({THREE_WAITING}).

| design | budget | trials | minutes | trials/min (vs today) | outside compile+measure \
| stages reached | stages cut in every run | pick(s): pick / best (worst / median) |
|---|---|---:|---:|---:|---:|---|---|---|
{chr(10).join(rows)}

Where the time went (seed 0, seconds and share):

| design, budget | {part_heads} | total | outside compile+measure |
|---|{part_cols}
{chr(10).join(parts)}

The stages (seed 0: trials and their seconds, or the decision; **bold**: cut):

| stage | today, default | warm, default | warm, {_budget_words(last)} |
|---|---|---|---|
{chr(10).join(stages)}

Against issue 34's targets for the warm design under the default budget (seed 0):

- the share of its time outside compiling and measuring is {100 * mine.outside:.1f}%
  ({_span([100 * r.outside for r in warm_runs], ".1f")}% over the seeds; target at most 25%:
  {_met(all(r.outside <= 0.25 for r in warm_runs))}; today's design here {today.outside:.0%},
  the record 65%);
- the whole search (no time budget, no stage cut short) runs {whole_ratio:.2f}x today's trials
  per minute at the record's prices (seed 0, no noise; target at least 2x:
  {_met(whole_ratio >= 2)}: {whole_warm.trials} trials in {whole_warm.minutes:.1f} min against
  {whole_today.trials} in {whole_today.minutes:.1f}). Under the default budget, at most ten
  minutes since issue 50, the two end on other trials (the warm design's budget reaches the
  stages after the ladders, whose first trials it keeps; today's is spent before them):
  {ratio:.2f}x{sized_words}. With 3% noise on the throughputs the searches take other paths:
  {_span(ratios, ".2f")}x seed by seed (the table's {row_ratio:.2f}x being the ratio of the
  medians).{same_words};
- {stage_words}.

Where its time goes: in its default run the warm design started {mine.workers} workers for
{mine.trials} trials (today's design one a trial), so worker starts and builds are
{(mine_parts["start"] + mine_parts["build"]) / mine.seconds:.0%} of its time, making data
{mine_parts["data"] / mine.seconds:.0%} and the probe {probe_share:.0%}.{three_words}
Every new batch size still compiles its step ({compile64:.0f} s at batch size 64,
{compile1024:.0f} s at 1024 on this card), and a ladder is new batch sizes: the ladders took
{n_ladder} trials and {s_ladder:,.0f} s of its {mine.seconds:,.0f} s, {c_ladder:,.0f} s of it
compiling; the warm workers saved {saved:.0%} of what those trials would have cost in fresh
workers. The cheap trials (the runoff's and the final's repeats, compiled already) come after
the ladders. {guard_words}{end_words}

{fit_words}

{unchecked}""")


def fit_pass_words(mine: Run, ten: list[Run]) -> str:
    """Issue 50's paragraph: fit's loop as the warm design prices it, and what a 10-minute
    budget reaches (which stages do not fit, and what the ones before them cost)."""
    fit_s = mine.parts()["fit"]
    fits = [c.parts["fit"] for c in mine.charges if c.parts["fit"]]
    words = (
        f"**Fit's loop priced** (issue 50): after its device steps each trial of the warm "
        f"design runs fit's own loop as the worker now bounds it (`tuner.trials.lookup."
        f"fit_pass_s`: its 2 warm executions at the record's throughput, then whole epochs of "
        f"mptune's arrays, each with a restart of {EPOCH_RESTART_S:g} s (assumed), or the "
        f"window within one epoch, never over {LONGEST:g} times the 2 s window after the warm "
        f"executions), in place of the record's timing of the input alone. It cost "
        f"{_span(fits, '.1f')} s a trial, {fit_s:,.0f} s of the default run's "
        f"{mine.seconds:,.0f} s ({fit_s / mine.seconds:.0%})."
    )
    if not ten:
        return words
    run = ten[0]
    states = run.stage_states()
    cut = [label for label, (ok, _) in states.items() if not ok]
    spent = run.stage_seconds()
    before = ", ".join(
        f"{label} {n} trial{'s' if n != 1 else ''} and {seconds:,.0f} s "
        f"({compiling:,.0f} s compiling)"
        for label, (n, seconds, compiling) in spent.items()
        if n
    )
    every = [all(ok for ok, _ in r.stage_states().values()) for r in ten]
    shares = [r.outside for r in ten]
    kept = (
        " Each stage after the ladders keeps its first trials from the stages before it "
        "(`SearchContext.kept_after`, `tuner/search/stage.py`'s `FIRST_TRIALS`: the loss "
        "scales, the knobs, the leader's confirming run and the neighbourhood one each, the "
        "runoff and the final two; the guard's reference for the leader apart), so the ladders "
        "end at their leaps and a stage past its share ends with what it measured "
        "(`StageCut`); the default GPU budget is at most 10 minutes."
    )
    if not cut:
        return words + (
            f" **Under a 10-minute budget it reaches every stage** in {sum(every)} of "
            f"{len(every)} runs (seed 0: {run.trials} trials in {run.minutes:.1f} min, "
            f"{run.outside:.0%} of it outside compiling and measuring, "
            f"{_span([100 * x for x in shares], '.0f')}% over the seeds; pick / best "
            f"{_span([r.pick_ratio for r in ten], '.2f')}). By stage (seed 0): {before}." + kept
        )
    return words + (
        f" **Under a 10-minute budget it does not reach every stage** (seed 0, {run.trials} "
        f"trials): {', '.join(cut)} are cut ({sum(every)} of {len(every)} runs reach every "
        f"stage). What came before them: {before}." + kept
    )


#: The key of the whole searches' runs (no time budget: a trial limit no search reaches).
WHOLE = -1.0
WHOLE_TRIALS = 200
#: The batch sizes the search's default space holds powers of two of (8-1024).
LADDER = [2**i for i in range(3, 11)]


def variants(warm: Design) -> list[Design]:
    """The designs varied: today's workers making the pool the worker makes now (the warm
    design's data prices), and the warm design with three workers waiting (before the search
    kept one per precision)."""
    return [
        dataclasses.replace(TODAY, name=SIZED_TODAY, sized_pool=True),
        dataclasses.replace(warm, name=THREE_WAITING, max_idle=3),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--probe-seconds",
        type=float,
        default=None,
        help="the warm design's numerics probe, for every policy (default: mixed_bfloat16's "
        "in the table)",
    )
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args(argv)
    table = MachineTable.load(args.table)
    profile = h200_profile()
    warm = warm_design(table, args.probe_seconds, gpu_space(profile))
    seeds = range(args.seeds)
    runs: dict[tuple[str, float | None], list[Run]] = {}
    for budget in BUDGETS:
        for design in (TODAY, warm):
            found = [simulate(table, design, budget, profile, seed) for seed in seeds]
            runs[(design.name, budget)] = found
            print(summary_row(found, runs[(TODAY.name, budget)]), flush=True)
    for design in (TODAY, warm):  # the whole search, no time budget: seed 0
        runs[(design.name, WHOLE)] = [
            simulate(table, design, None, profile, 0, max_trials=WHOLE_TRIALS)
        ]
    for design in variants(warm):
        found = [simulate(table, design, None, profile, seed) for seed in seeds]
        runs[(design.name, None)] = found
        print(summary_row(found, runs[(TODAY.name, None)]), flush=True)
    _, replayed = replay_check(table, profile)
    body = report(table, warm, runs, replayed, args.seeds)
    print(body)
    if args.write:
        write_section("gpu-search", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
