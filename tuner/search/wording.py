"""The search's words: a recommendation's reason, its evidence rows as the faces show them, the
notes and messages of the decision, and the small pieces the stages share. The decision itself
is :mod:`tuner.search.recommend`; this module only says it.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from tuner.policies import FLOAT32, TENSORFLOW
from tuner.said import setting
from tuner.search.measures import (
    Candidate,
    KnobTrial,
    Paired,
    SearchOutcome,
    first_ok,
    noise,
    overlap,
    paired_ratio,
    speed_ratio,
    within,
)
from tuner.search.records import Alternative, Recommendation, plain_knobs
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.stage import Stage
from tuner.setup import BACKEND_NAMES, KNOB_BY_NAME, LossScale, Setup


def and_join(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def times(ratio: float) -> str:
    """A ratio as a speed-up: ``1.37x``; one that rounds to nothing, ``under 0.01x`` (not
    ``0.00x``)."""
    return f"{ratio:.2f}x" if ratio >= 0.005 else "under 0.01x"


def pct(value: float | None) -> str:
    return "n/a" if value is None else ("inf" if math.isinf(value) else f"{value:.1%}")


def where(setup: Setup) -> str:
    """``float32: batch size 256``, with the loss scale where it is not the policy's default
    and the knobs that are not at theirs: ``float32+tf32: batch size 256 (XLA)``."""
    precision, batch, *extras = setup.words(default_loss_scale=False)
    return f"{precision}: {batch}" + (f" ({', '.join(extras)})" if extras else "")


#: Other processes' share of the CPU above which the machine counts as busy. On a 2-core
#: machine one core kept busy by something else is 0.5 and takes the core a trial's input
#: pipeline or second op thread would use; half of that (0.25) already slows a trial noticeably
#: and unevenly, while the odd short burst on an otherwise idle machine stays well below it.
BUSY_LOAD = 0.25


def batch_note(setup: Setup, space: SearchSpace) -> str | None:
    """What the recommended batch size means for the user's learning rate: the global batch
    kept, or a batch size that differs from the user's own."""
    if space.global_batch is not None:
        acc = setup.gradient_accumulation_steps
        how = (
            f"batch size {setup.batch_size} x {acc} gradient accumulation steps"
            if acc > 1
            else f"batch size {setup.batch_size}, no gradient accumulation"
        )
        return (
            f"the global batch {space.global_batch} is kept ({setting('global_batch')}): {how}, "
            f"{setup.global_batch} samples per optimizer update, so a learning rate tuned for "
            f"{space.global_batch} still applies"
        )
    mine, theirs = setup.global_batch, space.user_batch
    if theirs is None or mine == theirs:
        return None
    return (
        f"the recommended batch size {mine} differs from yours ({theirs}): each optimizer "
        f"update averages {mine} samples instead of {theirs}, so a learning rate tuned for "
        f"{theirs} may no longer fit. Scale it by {mine}/{theirs} = {mine / theirs:.3g} (the "
        'linear scaling rule, Goyal et al. 2017, "Accurate, Large Minibatch SGD", with a '
        f"warm-up for a large factor) or tune it again; or search with "
        f"{setting('global_batch', theirs)} "
        "to keep your batch"
    )


def knob_line(k: KnobTrial, adoption: bool = True) -> str:
    """One knob trial in words: ``XLA at batch size 128: 1.18x (1,180 vs 1,000 samples/s,
    trials #5, #9), adopted``; without ``adoption``, how it compared only (``slower``): for a
    stage's finding that later measurements outweighed."""
    assert k.tried is not None
    what = KNOB_BY_NAME[k.knob].say(k.tried) or k.knob
    where = f"{what} at batch size {k.tried.batch_size}"
    numbers = ", ".join(f"#{n}" for n in k.trials)
    if k.speed is None:
        return (
            f"{where}: {k.status}"
            + (f" ({k.reason})" if k.reason else "")
            + (f" (trial {numbers})" if numbers else "")
        )
    gain = k.gain or 0.0
    if k.reason:  # judged by another measure than its speed (the memory objective)
        said = ("adopted" if k.adopted else "not adopted") if adoption else "judged"
        verdict = f"{said} by {k.reason}"
    elif not adoption:
        verdict = "faster" if k.adopted else "within the noise floor" if gain >= 1 else "slower"
    else:
        verdict = (
            "adopted"
            if k.adopted
            else "within the noise floor, not adopted"
            if gain >= 1
            else "slower, not adopted"
        )
    return (
        f"{where}: {gain:.2f}x ({k.speed:,.0f} vs {k.base_speed:,.0f} samples/s, trials "
        f"{numbers}), {verdict}"
    )


def busy(outcome: SearchOutcome, evidence: list[int]) -> str | None:
    """A note when other processes' CPU use was high enough to skew the figures, else None
    (also when no trial knows its background load)."""
    loads = {
        m.number: m.result.background_load
        for runs in outcome.measured.values()
        for m in runs
        if m.result.background_load is not None
    }
    if not loads:
        return None
    mine = [loads[n] for n in evidence if n in loads] or list(loads.values())
    median, peak = statistics.median(mine), max(loads.values())
    if median <= BUSY_LOAD and peak <= BUSY_LOAD:
        return None
    busy = sorted(n for n, load in loads.items() if load > BUSY_LOAD)
    shown = ", ".join(f"#{n}" for n in busy[:6]) + (
        f" and {len(busy) - 6} more" if len(busy) > 6 else ""
    )
    return (
        f"the machine was busy: other processes used {'up to ' if len(busy) > 1 else ''}"
        f"{peak:.0%} of the CPU during trial{'s' if len(busy) > 1 else ''} {shown} "
        f"(median {median:.0%} over the recommendation's trials); the figures may be low and "
        "uneven: re-run on an idle machine"
    )


def label(c: Candidate) -> str:
    return c.setup.describe()


def _short(setup: Setup) -> str:
    """``mixed_bfloat16 b128``, with the loss scale where it is not the policy's default and
    the knobs that are not at theirs (``float32+tf32 b64 xla spe4``)."""
    default = setup.loss_scale == LossScale.default_for(setup.policy)
    return " ".join(
        (
            f"{setup.precision} b{setup.batch_size}",
            *(() if default else (str(setup.loss_scale),)),
            *setup.knobs,
        )
    )


def _subject(setup: Setup) -> str:
    """``float32+tf32 at batch size 128``, with the knobs: ``... with XLA and 4 steps per
    execution``."""
    backend_words = () if setup.backend == TENSORFLOW else (f"on {BACKEND_NAMES[setup.backend]}",)
    knobs = [w for w in setup.knob_words() if w not in backend_words]  # said after the knobs
    with_knobs = f" with {and_join(knobs)}" if knobs else ""
    backend = "" if setup.backend == TENSORFLOW else f" on {BACKEND_NAMES[setup.backend]}"
    return f"{setup.precision} at batch size {setup.batch_size}{with_knobs}{backend}"


def _figures(spread: tuple[float, float] | None, speed: float | None) -> str:
    if spread is None:
        return _fmt(speed, ",.0f")
    low, high = spread
    return f"{low:,.0f}" if round(low) == round(high) else f"{low:,.0f}-{high:,.0f}"


def _tie_text(
    setup: Setup,
    spread: tuple[float, float],
    speed: float,
    ties: tuple[Alternative, ...],
) -> str:
    """``a and b tie within the measurement noise (spreads ... samples/s)``."""
    names = [_short(setup)] + [_short(t.setup) for t in ties]
    figures = [_figures(spread, speed)] + [_figures(t.spread, t.samples_per_second) for t in ties]
    spreads = and_join(figures)
    return f"{and_join(names)} tie within the measurement noise (spreads {spreads} samples/s)"


def _hardware_phrase(hardware: dict[str, Any] | None, device: str | None) -> str:
    if not hardware:
        return ""
    gpus = hardware.get("gpus") or []
    if device and device.startswith("gpu") and gpus:
        gpu = gpus[0]
        units = (gpu.get("units") or {}).get("summary") or "no Tensor Cores"
        return (
            f"the {gpu.get('name', 'GPU')} (compute capability "
            f"{gpu.get('compute_capability', '?')}) has {units}"
        )
    flags = set((hardware.get("cpu") or {}).get("flags") or [])
    model = (hardware.get("cpu") or {}).get("model") or "this CPU"
    low = sorted(flags & {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "bf16", "fp16"})
    if low:
        return f"{model} has {', '.join(low)} units, and training ran on the CPU"
    return f"{model} has no bfloat16/float16 units, and training ran on the CPU"


def reason(
    chosen: Candidate,
    f32: Candidate | None,
    viable: list[Candidate],
    outcome: SearchOutcome,
    hardware: dict[str, Any] | None,
    ties: list[Candidate],
    settings: SearchSettings,
    reference: Candidate | None = None,
) -> str:
    device = chosen.runs[0].result.device
    hw = _hardware_phrase(hardware, device)
    because = f" ({hw})" if hw else ""
    precision, subject = chosen.setup.precision, _subject(chosen.setup)
    gap = f"{chosen.loss_gap:.2%}" if chosen.loss_gap is not None else "n/a"
    tie = ""
    if ties:
        alts = tuple(Alternative.of(c, None) for c in ties)
        tie = (
            _tie_text(chosen.setup, chosen.spread, chosen.speed, alts)
            + f", so the simpler {_short(chosen.setup)} is recommended"
        )
    if ties and (precision == FLOAT32 or any(c.setup.precision == FLOAT32 for c in ties)):
        # A tie with float32: no speed-up to state.
        tail = "" if precision == FLOAT32 else f"; loss gap to float32 {gap}"
        return f"{tie}{because}{tail}."
    tie_sentence = (
        f" It ties with {and_join([_short(c.setup) for c in ties])} within the measurement noise "
        "and is the simpler setup."
        if ties
        else ""
    )
    if precision == FLOAT32:
        others = [c for c in viable if c.setup.precision != FLOAT32]
        rel = ", ".join(
            f"{c.setup.precision} reached {c.speed / chosen.speed:.2f}x"
            for c in others
            if chosen.speed
        )
        abandoned = ", ".join(
            f"{p} is unsafe for this model (its hazard says why and how to fix the model)"
            if is_unsafe(why)
            else f"{p} was dropped ({why})"
            for p, why in outcome.abandoned.items()
        )
        detail = "; ".join(x for x in (rel, abandoned) if x)
        return f"{subject} is the best setup here{because}" + (f": {detail}." if detail else ".")
    if f32 is None or not f32.speed:
        return (
            f"{subject} is the only setup that "
            f"worked{because}; loss gap to float32 {gap}.{tie_sentence}"
        )
    ratio = speed_ratio(f32, chosen, outcome.paired)
    figures = f"({chosen.speed:,.0f} vs {f32.speed:,.0f} samples/s)"
    if paired_ratio(outcome.paired, f32.setup, chosen.setup) is not None:
        figures = f"{figures[:-1]}, measured back to back)"
    if paired_ratio(outcome.paired, f32.setup, chosen.setup) is not None:
        inside = within(ratio, settings.noise_floor)
    else:
        inside = overlap(chosen, f32) or abs(ratio - 1) <= noise(chosen, f32, settings)
    if inside:
        verdict = f"as fast as float32 here within the measurement noise {figures}"
    elif ratio > 1:
        verdict = f"{ratio:.2f}x faster than float32 here {figures}"
    else:
        verdict = f"{ratio:.2f}x as fast as float32 here but leaner in memory {figures}"
    if outcome.reference != FLOAT32 and reference is not None and reference.speed:
        # The user's float32 runs TF32 here: the speed-up they will see is against that.
        today = _against_today(chosen, reference, outcome)
        return (
            f"{subject} is {today}{because}; against IEEE float32 it is {verdict}, with a loss "
            f"gap of {gap} to IEEE float32 at the same batch size and seed.{tie_sentence}"
        )
    return (
        f"{subject} is {verdict}{because}, with a loss gap "
        f"of {gap} to float32 at the same batch size and seed.{tie_sentence}"
    )


def _against_today(chosen: Candidate, reference: Candidate, outcome: SearchOutcome) -> str:
    """The chosen setup against the user's float32 as it runs today (``reference``, TF32)."""
    default = outcome.reference_note or f"float32 runs as {outcome.reference} by default here"
    if reference is chosen:
        return f"what your training runs today ({default})"
    ratio = speed_ratio(reference, chosen, outcome.paired)
    return (
        f"{ratio:.2f}x your float32 as it runs today ({reference.setup.label}: {default}; "
        f"{chosen.speed:,.0f} vs {reference.speed:,.0f} samples/s)"
    )


def is_unsafe(why: str) -> bool:
    """Whether a reason a policy was dropped is the numerics probe's (its hazards tell more)."""
    return "is unsafe for this model" in why


def no_viable_message(outcome: SearchOutcome) -> str:
    reasons = []
    for setup, runs in sorted(outcome.measured.items(), key=lambda item: item[0].key):
        if first_ok(runs) is None:
            r = runs[-1].result
            again = " (ran twice)" if len(runs) > 1 else ""
            reasons.append(
                f"{setup.label}: {r.status.value}{again}"
                + (f" ({r.error.message})" if r.error else "")
            )
    reasons += [f"{label(c)}: {c.rejected}" for c in outcome.candidates if c.rejected]
    shown = "; ".join(reasons[:6]) + (f"; and {len(reasons) - 6} more" if len(reasons) > 6 else "")
    return "no viable setup: " + (shown or "no trial finished")


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def evidence_rows(rec: Recommendation) -> list[tuple[str, str]]:
    """A recommendation as labelled lines of plain text, the same for the CLI and the GUI."""
    low, high = rec.samples_per_second_spread
    setup = rec.setup
    rows = [
        ("Setup", setup.in_words()),
        ("Throughput", _throughput(rec, low, high)),
        *input_rows(rec),
        *_against_today_row(rec),
        *_script_rows(rec),
        ("Against float32", _against_float32(rec)),
        (
            "Memory",
            f"{_fmt(rec.peak_memory_mb, ',.0f')} MB peak"
            + (_memory_against_float32(rec.memory_saving) if rec.memory_saving is not None else ""),
        ),
        ("Loss gap", f"{rec.loss_gap:.2%} to float32" if rec.loss_gap is not None else "n/a"),
        *((k.label, k.detail) for k in rec.knobs or plain_knobs(setup)),
        ("Evidence", "trials " + ", ".join(f"#{n}" for n in rec.trials)),
        ("Why", rec.reason),
    ]
    if rec.unused_gpu is not None:
        # First: the figures below are the CPU's, and a GPU went unused.
        rows.insert(0, ("Unused GPU", f"this setup is for the CPU. {rec.unused_gpu.sentence}"))
    if rec.today_trap is not None:
        # Before anything: the run the user has today does not train (issue 71).
        rows.insert(0, ("Today", f"{rec.today_trap[0].upper()}{rec.today_trap[1:]}"))
    for p in rec.paired:
        rows.append(("Final" if p.stage == Stage.FINAL else "Runoff", paired_text(p, setup)))
    if rec.ties:
        text = _tie_text(rec.setup, rec.samples_per_second_spread, rec.samples_per_second, rec.ties)
        rows.append(("Tie", f"{text}; re-run on an idle machine to separate them"))
    if rec.busy:
        rows.append(("Busy machine", rec.busy[0].upper() + rec.busy[1:]))
    against = _short(rec.float32_setup) if rec.float32_setup else "float32"
    for alt in rec.alternatives:
        verdict = alt.rejected or f"{_fmt(alt.speedup_vs_float32, '.2f')}x {against}"
        if alt.rejected and alt.speedup_vs_float32 is not None and "throughput" not in verdict:
            verdict += f" (measured {times(alt.speedup_vs_float32)} {against})"
        figure = f"{_fmt(alt.samples_per_second, ',.0f')} samples/s"
        if alt.trials:
            skipped = (
                f"{alt.measured_samples_per_second:,.0f} measured less the steps the loss scale "
                "skipped; "
                if alt.measured_samples_per_second is not None
                else ""
            )
            figure += f" ({skipped}{runs_words(alt.trials)})"
        rows.append(("Alternative", f"{alt.setup.label}: {figure}, {verdict}"))
    for hazard in rec.hazards:
        label = "Unsafe" if hazard.unsafe else "Hazard"
        rows.append((label, hazard.describe()))
    rows += [("Not tried", f"{item['what']}: {item['why']}") for item in rec.not_tried]
    rows += [("Note", note) for note in rec.notes if note != rec.busy]
    return rows


def runs_words(trials: tuple[int, ...]) -> str:
    """``trial #5``, or ``median of trials #3, #7``: the runs a figure is."""
    numbers = ", ".join(f"#{n}" for n in trials)
    return f"trial {numbers}" if len(trials) == 1 else f"median of trials {numbers}"


def _throughput(rec: Recommendation, low: float | None, high: float | None) -> str:
    """``6,330 samples/s (median of trials #0, #1, #11, measured 5,903 to 6,762)``."""
    spread = (
        f"measured {_fmt(low, ',.0f')}"
        if low is not None and high is not None and round(low) == round(high)
        else f"measured {_fmt(low, ',.0f')} to {_fmt(high, ',.0f')}"
    )
    runs = f"{runs_words(rec.setup_trials)}, " if rec.setup_trials else ""
    return f"{rec.samples_per_second:,.0f} samples/s ({runs}{spread})"


def _against_float32(rec: Recommendation) -> str:
    """The speed-up against float32, naming the float32 setup, its figure and its trials; and
    against float32 at the starting batch size, the same way."""
    if rec.float32_setup is None:  # stored before the figures were named
        return (
            f"{_fmt(rec.speedup_vs_float32, '.2f')}x the best float32 setup, "
            f"{_fmt(rec.speedup_vs_baseline, '.2f')}x float32 at the starting batch size"
        )
    f32 = rec.float32_setup
    figure = f"{_fmt(rec.float32_samples_per_second, ',.0f')} samples/s"
    if f32 == rec.setup:
        text = f"it is float32 itself, the fastest float32 setup measured here ({figure})"
    elif rec.float32_paired:
        text = (
            f"{_fmt(rec.speedup_vs_float32, '.2f')}x {_short(f32)} on the median of their "
            f"per-turn ratios, measured back to back ({_short(f32)}: {figure}, "
            f"{runs_words(rec.float32_trials)})"
        )
    else:
        text = (
            f"{_fmt(rec.speedup_vs_float32, '.2f')}x {_short(f32)} ({figure}, "
            f"{runs_words(rec.float32_trials)})"
        )
    if (
        rec.speedup_vs_baseline is not None
        and rec.baseline_trials
        and rec.today is None  # the baseline is what the script runs today: its own row
        and (set(rec.baseline_trials) != set(rec.float32_trials))
    ):
        text += (
            f"; {rec.speedup_vs_baseline:.2f}x float32 at the starting batch size "
            f"({_fmt(rec.baseline_samples_per_second, ',.0f')} samples/s, "
            f"{runs_words(rec.baseline_trials)})"
        )
    return text


def paired_text(p: Paired, chosen: Setup) -> str:
    """``float32 b1024 spe16 and mixed_bfloat16 b768 spe16 measured back to back in 3 turns:
    mixed_bfloat16 b768 spe16 ran 1.31x float32 b1024 spe16 (1.28, 1.31, 1.35; trials #30,
    ...)``: each other setup against ``chosen``."""
    others = [s for s in p.setups if s != chosen]
    parts = []
    for s in others:
        ratios = p.ratios(s, chosen)
        median = statistics.median(ratios) if ratios else None
        each = ", ".join(f"{r:.2f}" for r in ratios) or "no turn ran both"
        parts.append(f"{_fmt(median, '.2f')}x {_short(s)} ({each})")
    numbers = ", ".join(f"#{n}" for n in p.numbers())
    return (
        f"{and_join([_short(s) for s in p.setups])} measured back to back in {len(p.speeds)} "
        f"turns: {_short(chosen)} ran " + "; ".join(parts) + f" (trials {numbers})"
    )


def _memory_against_float32(saving: float) -> str:
    """``, 12% less than float32 at this batch size`` (or more, or the same)."""
    if round(saving, 2) == 0:
        return ", the same as float32 at this batch size"
    more_or_less = "less" if saving > 0 else "more"
    return f", {abs(saving):.0%} {more_or_less} than float32 at this batch size"


def tie_text(chosen: Candidate, leader: Candidate, paired: list[Paired]) -> str:
    """Why the simpler ``chosen`` is recommended over the ``leader`` it ties with."""
    ratio = paired_ratio(paired, chosen.setup, leader.setup)
    against = (
        f"{ratio:.3f}x {label(chosen)} on the median of their runs back to back"
        if ratio is not None
        else f"{leader.speed:,.0f} samples/s against {chosen.speed:,.0f}"
    )
    return (
        f"{label(leader)} measured {against}: inside the measurement noise, so the "
        f"simpler {label(chosen)} is recommended"
    )


def input_rows(rec: Recommendation) -> list[tuple[str, str]]:
    """What the user's input delivers against what the device trains at, and what to do when
    the input is the bound; none where the input was not timed."""
    fed = rec.input
    if fed is None or rec.device_samples_per_second is None:
        return []
    device = rec.device_samples_per_second
    if fed.fit_loop:
        # One figure (issue 35): fit's own loop gave the setup's rate; the device's is beside it.
        figures = (
            f"timed in fit's own loop on {fed.fed_by}; the device trains {device:,.0f} "
            "samples/s from batches in memory"
        )
        share = rec.samples_per_second / device
    else:  # stored before issue 35: the input timed alone
        figures = (
            f"{fed.samples_per_second:,.0f} samples/s from {fed.fed_by}; the device trains "
            f"{device:,.0f} samples/s from batches in memory"
        )
        share = fed.samples_per_second / device
    if not rec.input_bound:
        return [("Input", f"{figures}: the input keeps up")]
    return [
        (
            "Input",
            f"{figures}: input-bound, fit is held to the input's rate ({share:.0%} of the "
            "device's)",
        ),
        ("Input advice", fed.advice(rec.setup.backend)),
    ]


def _script_rows(rec: Recommendation) -> list[tuple[str, str]]:
    """What a training script's fit does that the figures leave out, and the distribution it
    trains in (issue 49); none for a model file."""
    rows = []
    if rec.replicas > 1:
        share = rec.setup.batch_size // rec.replicas
        rows.append(
            (
                "Distribution",
                f"{rec.distribution} over {rec.replicas} devices: batch size "
                f"{rec.setup.batch_size} is fit's global batch, {share} on each device",
            )
        )
    if rec.left_out:
        words = "the figures time training alone; your fit also runs " + ", ".join(rec.left_out)
        if rec.validation_s is not None:
            words += (
                f" (one validation pass: {rec.validation_s:.2f} s at batch size "
                f"{rec.setup.batch_size}, each epoch it validates)"
            )
        rows.append(("Left out", words))
    return rows


def _against_today_row(rec: Recommendation) -> list[tuple[str, str]]:
    """The speed-up against the user's float32 as it runs today, where that is not IEEE
    float32 (TF32 on a GPU of compute capability 8.0 or later), or against the precision a
    training script sets itself (issue 49); none elsewhere. Where what the user runs today
    does not train (issue 71), no speed-up is stated against it."""
    if rec.today_trap is not None:
        return [
            (
                "Against what you run today",
                f"no speed-up stated: {rec.today_trap.partition(':')[0]} (see Today); the "
                "figures are against float32",
            )
        ]
    if rec.today is not None and rec.speedup_vs_baseline is not None:
        return [
            (
                "Against what you run today",
                f"{rec.speedup_vs_baseline:.2f}x what your script trains today, run unchanged "
                f"as {runs_words(rec.baseline_trials)}: {rec.today} "
                f"({_fmt(rec.baseline_samples_per_second, ',.0f')} samples/s)",
            )
        ]
    if rec.reference == FLOAT32 or rec.speedup_vs_reference is None:
        return []
    if rec.reference_at is not None:
        return [
            (
                "Against what you run today",
                f"{rec.speedup_vs_reference:.2f}x {rec.reference} "
                f"({_fmt(rec.reference_samples_per_second, ',.0f')} samples/s): "
                f"{rec.reference_at.split(':')[0]} sets {rec.reference} at line "
                f"{rec.reference_at.rpartition(':')[2]}, what you run today",
            )
        ]
    return [
        (
            "Against your float32",
            f"{rec.speedup_vs_reference:.2f}x {rec.reference} "
            f"({_fmt(rec.reference_samples_per_second, ',.0f')} samples/s), what your training "
            "runs today with no change",
        )
    ]


def run_words(runs: tuple[dict[str, Any], ...]) -> str:
    """A session's real runs in a few words, its last one's figure against the one it was
    tuned at (``; last run 0.97x tuned, 3 runs``); "" where it has none."""
    if not runs:
        return ""
    last = runs[-1]
    got, tuned = last.get("samples_per_second"), last.get("tuned_samples_per_second")
    ratio = (
        f"{got / tuned:.2f}x tuned"
        if isinstance(got, int | float) and isinstance(tuned, int | float) and tuned
        else "not timed"
    )
    count = f", {len(runs)} runs" if len(runs) > 1 else ""
    return f"; last run {ratio}{count}"


def run_lines(runs: tuple[dict[str, Any], ...]) -> list[str]:
    """Each real run of a session's setup as a line: when, the script and setup, what its fit
    achieved (and what that covered: the batches fit consumed) against what it was tuned at,
    or why it was not timed (``mptune show``)."""
    lines = []
    for run in runs:
        got, tuned = run.get("samples_per_second"), run.get("tuned_samples_per_second")
        words = f"{run.get('when', '?')}  {run.get('script', '?')}  {run.get('setup', '?')}: "
        covered = run.get("covered")
        if isinstance(got, int | float):
            words += f"trained at {got:,.0f} samples/s"
            if isinstance(covered, dict):
                words += (
                    f" over {covered.get('how', '?')} ({covered.get('steps', 0):,} steps, "
                    f"{covered.get('samples', 0):,} samples)"
                )
            if isinstance(tuned, int | float) and tuned:
                words += f", tuned at {tuned:,.0f} ({got / tuned:.2f}x)"
        else:
            words += "not timed" + (f": {run['untimed']}" if run.get("untimed") else "")
        if isinstance(run.get("validation_s"), int | float):
            words += f"; validation {run['validation_s']:.2f} s an epoch"
        lines.append(words)
    return lines
