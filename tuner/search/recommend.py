"""From a search outcome to a recommendation a user can trust, with its evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from tuner.errors import EXIT_TRIAL_FAILED, MptuneError
from tuner.policies import FLOAT32, POLICIES
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.strategy import Candidate, SearchOutcome
from tuner.setup import SETUP_FIELDS, LossScale, Setup


class NoViableSetup(MptuneError):
    """Every setup failed or was rejected; the message lists why. Not bad input: the model may
    simply not fit this machine, so the CLI exits 1."""

    exit_code = EXIT_TRIAL_FAILED


@dataclass(frozen=True)
class Alternative:
    """A candidate that was not recommended, with its figures or why it was rejected."""

    setup: Setup
    samples_per_second: float | None
    speedup_vs_float32: float | None
    loss_gap: float | None
    rejected: str | None
    trials: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.setup.to_dict(),
            "samples_per_second": self.samples_per_second,
            "speedup_vs_float32": self.speedup_vs_float32,
            "loss_gap": self.loss_gap,
            "rejected": self.rejected,
            "trials": list(self.trials),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alternative:
        return cls(
            Setup.from_dict({k: data[k] for k in SETUP_FIELDS if k in data}),
            data.get("samples_per_second"),
            data.get("speedup_vs_float32"),
            data.get("loss_gap"),
            data.get("rejected"),
            tuple(data.get("trials", ())),
        )


@dataclass(frozen=True)
class Recommendation:
    """The chosen setup and the evidence for it. ``to_dict`` is what ``tune --json`` prints and
    what a session stores; it keeps the setup's fields at the top level too, as sessions stored
    before :class:`~tuner.setup.Setup` existed have them."""

    setup: Setup
    samples_per_second: float
    samples_per_second_spread: tuple[float, float]
    baseline_samples_per_second: float | None  #: float32 at the starting batch size
    float32_samples_per_second: float | None  #: float32 at its own best batch size
    speedup_vs_float32: float | None  #: against the best float32 setup
    speedup_vs_baseline: float | None
    memory_saving: float | None  #: share of float32's peak memory (same batch size) saved
    peak_memory_mb: float | None
    memory_kind: str | None
    loss_gap: float | None
    skipped_steps: int
    reason: str
    trials: tuple[int, ...]
    objective: str
    alternatives: tuple[Alternative, ...] = ()
    not_tried: tuple[dict[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    device: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(self.setup.to_dict())
        data["setup"] = self.setup.to_dict()
        data["samples_per_second_spread"] = list(self.samples_per_second_spread)
        data["trials"] = list(self.trials)
        data["alternatives"] = [alt.to_dict() for alt in self.alternatives]
        data["not_tried"] = [dict(item) for item in self.not_tried]
        data["notes"] = list(self.notes)
        data["versions"] = dict(self.versions)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        """Inverse of :meth:`to_dict`; reads recommendations stored by earlier versions too.

        Raises:
            ValueError: the data names no valid setup or lacks a figure.
        """
        setup_data = (
            data.get("setup")
            if isinstance(data.get("setup"), dict)
            else {k: data[k] for k in SETUP_FIELDS if k in data}
        )
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["setup"] = Setup.from_dict(setup_data)
        try:
            values["samples_per_second_spread"] = tuple(values["samples_per_second_spread"])
        except (KeyError, TypeError):
            raise ValueError("the recommendation has no measured spread") from None
        values["alternatives"] = tuple(
            Alternative.from_dict(a) for a in values.get("alternatives", ())
        )
        for key in ("trials", "not_tried", "notes"):
            values[key] = tuple(values.get(key, ()))
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"an incomplete recommendation: {exc}") from None


def recommend(
    outcome: SearchOutcome,
    space: SearchSpace,
    settings: SearchSettings,
    hardware: dict[str, Any] | None = None,
) -> Recommendation:
    """Choose among the outcome's candidates; never a winner inside the noise.

    Raises:
        NoViableSetup: nothing ran ok and passed the numerical guard.
    """
    viable = [c for c in outcome.candidates if c.rejected is None]
    if not viable:
        raise NoViableSetup(_no_viable_message(outcome))
    leader = max(viable, key=lambda c: _score(c, viable, settings))
    chosen, tie_note = leader, None
    for cand in sorted(viable, key=Candidate.simplicity):
        if cand is leader or cand.simplicity() >= leader.simplicity():
            break
        if _within_noise(cand, leader, settings):
            chosen = cand
            tie_note = (
                f"{_label(leader)} measured {leader.speed:,.0f} samples/s against "
                f"{cand.speed:,.0f}: inside the measurement noise, so the simpler "
                f"{_label(cand)} is recommended"
            )
            break

    f32_best = next(
        (c for c in outcome.candidates if c.setup.policy == FLOAT32 and c.rejected is None), None
    )
    f32_same = outcome.measured.get(Setup(FLOAT32, chosen.setup.batch_size, LossScale("none")))
    f32_same_ok = f32_same[0].result if f32_same and f32_same[0].result.ok else None
    baseline = outcome.baseline.result if outcome.baseline and outcome.baseline.result.ok else None
    memory_saving = None
    if (
        chosen.setup.policy != FLOAT32
        and f32_same_ok
        and f32_same_ok.peak_memory_mb
        and chosen.peak_memory_mb
    ):
        memory_saving = 1 - chosen.peak_memory_mb / f32_same_ok.peak_memory_mb
    first = chosen.runs[0].result
    notes = list(outcome.notes) + ([tie_note] if tie_note else [])
    trials = sorted(
        {r.number for r in chosen.runs}
        | ({chosen.guard_trial} if chosen.guard_trial is not None else set())
    )
    speedup = chosen.speed / f32_best.speed if f32_best and f32_best.speed else None
    return Recommendation(
        setup=chosen.setup,
        samples_per_second=chosen.speed,
        samples_per_second_spread=chosen.spread,
        baseline_samples_per_second=baseline.samples_per_second if baseline else None,
        float32_samples_per_second=f32_best.speed if f32_best else None,
        speedup_vs_float32=speedup,
        speedup_vs_baseline=(
            chosen.speed / baseline.samples_per_second
            if baseline and baseline.samples_per_second
            else None
        ),
        memory_saving=memory_saving,
        peak_memory_mb=chosen.peak_memory_mb,
        memory_kind=first.memory_kind,
        loss_gap=chosen.loss_gap,
        skipped_steps=first.skipped_steps,
        reason=_reason(chosen, f32_best, viable, outcome, hardware, tie_note),
        trials=tuple(trials),
        objective=settings.objective,
        alternatives=tuple(
            _alternative(c, f32_best) for c in outcome.candidates if c is not chosen
        ),
        not_tried=tuple(_not_tried(outcome, space)),
        notes=tuple(notes),
        device=first.device,
        versions=dict(first.versions),
    )


def _score(cand: Candidate, viable: list[Candidate], settings: SearchSettings) -> float:
    if settings.objective == "speed":
        return cand.speed
    floor = settings.memory_throughput_floor if settings.objective == "memory" else 0.95
    fastest = max(c.speed for c in viable)
    if cand.speed < floor * fastest:
        return -math.inf
    return -cand.memory_per_sample


def _within_noise(cand: Candidate, leader: Candidate, settings: SearchSettings) -> bool:
    noise = max(settings.noise_floor, cand.relative_spread, leader.relative_spread)
    if settings.objective == "speed":
        return leader.speed - cand.speed <= noise * leader.speed
    return cand.memory_per_sample <= leader.memory_per_sample * (1 + noise)


def _label(c: Candidate) -> str:
    return c.setup.describe()


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


def _reason(
    chosen: Candidate,
    f32: Candidate | None,
    viable: list[Candidate],
    outcome: SearchOutcome,
    hardware: dict[str, Any] | None,
    tie_note: str | None = None,
) -> str:
    device = chosen.runs[0].result.device
    hw = _hardware_phrase(hardware, device)
    because = f" ({hw})" if hw else ""
    if tie_note:
        return tie_note[0].upper() + tie_note[1:] + f"{because}."
    policy, batch_size = chosen.setup.policy, chosen.setup.batch_size
    if policy == FLOAT32:
        others = [c for c in viable if c.setup.policy != FLOAT32]
        rel = ", ".join(
            f"{c.setup.policy} reached {c.speed / chosen.speed:.2f}x"
            for c in others
            if chosen.speed
        )
        abandoned = ", ".join(f"{p} was dropped ({why})" for p, why in outcome.abandoned.items())
        detail = "; ".join(x for x in (rel, abandoned) if x)
        return f"float32 at batch size {batch_size} is the best setup here{because}" + (
            f": {detail}." if detail else "."
        )
    gap = f"{chosen.loss_gap:.2%}" if chosen.loss_gap is not None else "n/a"
    if f32 is None or not f32.speed:
        return (
            f"{policy} at batch size {batch_size} is the only setup that "
            f"worked{because}; loss gap to float32 {gap}."
        )
    ratio = chosen.speed / f32.speed
    verdict = "faster" if ratio >= 1 else "slower but leaner in memory"
    return (
        f"{policy} at batch size {batch_size} is {ratio:.2f}x "
        f"{'as fast as' if verdict != 'faster' else 'faster than'} float32 here "
        f"({chosen.speed:,.0f} vs {f32.speed:,.0f} samples/s){because}, with a loss gap "
        f"of {gap} to float32 at the same batch size and seed."
    )


def _alternative(c: Candidate, f32: Candidate | None) -> Alternative:
    return Alternative(
        c.setup,
        c.speed,
        c.speed / f32.speed if f32 and f32.speed else None,
        c.loss_gap,
        c.rejected,
        tuple(sorted(r.number for r in c.runs)),
    )


def _not_tried(outcome: SearchOutcome, space: SearchSpace) -> list[dict[str, str]]:
    items = [
        {"what": policy, "why": "not in the search space (--policies or the hardware prior)"}
        for policy in POLICIES
        if policy not in space.policies
    ]
    items += [
        {"what": f"{policy} beyond batch size {space.start_batch}", "why": why}
        for policy, why in outcome.abandoned.items()
    ]
    if outcome.stopped_early:
        items.append({"what": "the rest of the search", "why": outcome.stopped_early})
    return items


def _no_viable_message(outcome: SearchOutcome) -> str:
    reasons = []
    for setup, runs in sorted(outcome.measured.items(), key=lambda item: item[0].key):
        r = runs[0].result
        if not r.ok:
            reasons.append(
                f"{setup.label}: {r.status.value}" + (f" ({r.error.message})" if r.error else "")
            )
    reasons += [f"{_label(c)}: {c.rejected}" for c in outcome.candidates if c.rejected]
    shown = "; ".join(reasons[:6]) + (f"; and {len(reasons) - 6} more" if len(reasons) > 6 else "")
    return "no viable setup: " + (shown or "no trial finished")


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def evidence_rows(rec: Recommendation) -> list[tuple[str, str]]:
    """A recommendation as labelled lines of plain text, the same for the CLI and the GUI."""
    low, high = rec.samples_per_second_spread
    setup = rec.setup
    rows = [
        ("Setup", f"{setup.policy}, batch size {setup.batch_size}, loss scale {setup.loss_scale}"),
        (
            "Throughput",
            f"{rec.samples_per_second:,.0f} samples/s (measured "
            f"{_fmt(low, ',.0f')} to {_fmt(high, ',.0f')})",
        ),
        (
            "Against float32",
            f"{_fmt(rec.speedup_vs_float32, '.2f')}x the best float32 "
            f"setup, {_fmt(rec.speedup_vs_baseline, '.2f')}x float32 at "
            "the starting batch size",
        ),
        (
            "Memory",
            f"{_fmt(rec.peak_memory_mb, ',.0f')} MB peak"
            + (
                f", {rec.memory_saving:.0%} less than float32 at this batch size"
                if rec.memory_saving is not None
                else ""
            ),
        ),
        ("Loss gap", f"{rec.loss_gap:.2%} to float32" if rec.loss_gap is not None else "n/a"),
        ("Evidence", "trials " + ", ".join(f"#{n}" for n in rec.trials)),
        ("Why", rec.reason),
    ]
    for alt in rec.alternatives:
        verdict = alt.rejected or f"{_fmt(alt.speedup_vs_float32, '.2f')}x float32"
        rows.append(
            (
                "Alternative",
                f"{alt.setup.label}: {_fmt(alt.samples_per_second, ',.0f')} samples/s, {verdict}",
            )
        )
    rows += [("Not tried", f"{item['what']}: {item['why']}") for item in rec.not_tried]
    rows += [("Note", note) for note in rec.notes]
    return rows
