"""The numerics probe: a model under a low-precision policy against the same model under
float32, with identical weights on an identical batch, layer by layer.

The float32 twin is built by the same code (``build_model()``, the ``.keras`` file, the
built-in builder) with float32 as the global policy, and given the trial model's weights. Every
layer's ``call`` is wrapped for the two forward passes, so what each layer received (after
Keras autocast its inputs) and returned is compared directly. From that comparison and the
gradients of one batch the probe reports :class:`~tuner.trials.hazards.Hazard` s; the limits
and thresholds are in :mod:`tuner.trials.hazards` and explained in docs/numerics.md.

It runs on a slice of the first batch (at most :data:`PROBE_SAMPLES` samples), before the trial
compiles its model, and restores every wrapped ``call`` before it returns. Each model makes one
recorded pass (:mod:`tuner.worker.probe_pass`), which under mixed_float16 also gives the
gradients: eagerly on TensorFlow and PyTorch, as one compiled function per model on JAX. Where
its seconds go is in ``numerics["probe_parts"]``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from tuner.setup import Policy
from tuner.trials.hazards import (
    DIVERGENCE,
    DIVERGENCE_ROUNDOFFS,
    FLOAT16_MAX,
    FLOAT16_TINY,
    INTEGER_CAST,
    INTEGER_LIMIT,
    LOW_PRECISION_DTYPES,
    OVERFLOW,
    POLICY_FAILURE,
    UNDERFLOW,
    UNDERFLOW_SHARE,
    UNIT_ROUNDOFF,
    Hazard,
)
from tuner.worker.probe_pass import (
    Call,
    Layers,
    Loss,
    Parts,
    Pass,
    Recorder,
    attempt,
    run_pass,
)
from tuner.worker.usercode import first_line

#: Samples of the first batch the probe runs on: enough for the value ranges, cheap to run.
PROBE_SAMPLES = 32
#: Loss scales whose effect on float16 gradients is predicted from the float32 gradients.
PREDICTED_SCALES = (1.0, 2.0**7, 2.0**15, 2.0**24)
#: What one forward pass may keep of the layers' inputs and outputs; past it, later layers
#: are not compared (a large model on large samples), and the trial says so.
RECORD_BUDGET_BYTES = 384 * 2**20
#: Layers that read their input as indices (a rounded id selects another row or bucket).
_INDEX_LAYERS = ("Embedding", "CategoryEncoding", "IntegerLookup", "Hashing", "HashedCrossing")
_LOW = LOW_PRECISION_DTYPES


@dataclass
class ProbeReport:
    """What the probe found.

    Attributes:
        hazards: the hazards, most serious first.
        unsafe_layers: the trial model's layers whose autocast corrupts data. The probe sets
            ``autocast = False`` on them (the fix it suggests), so that the trial measures what
            the policy would gain once the model is fixed, and compares the rest with the fix.
        numerics: measurements for the result (see ``TrialResult.numerics``).
        failure: the policy's forward pass raised (float32's did not), with the fix applied
            where there is one: its one-line reason. The trial cannot measure the policy.
        compared: False when no comparison could be made (``note`` says why).
        note: why the probe could not compare, for the trial's warnings.
    """

    hazards: list[Hazard] = field(default_factory=list)
    unsafe_layers: list[Any] = field(default_factory=list)
    numerics: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    compared: bool = True
    note: str | None = None


def _dtype(a: np.ndarray) -> str:
    """Keras's name of the array's dtype; NumPy's for one Keras has no name for (the strings a
    StringLookup takes arrive as ``object``), which no numeric check then matches."""
    try:
        return str(keras.backend.standardize_dtype(a.dtype))
    except ValueError:
        return str(a.dtype)


def _is_float(a: np.ndarray | None) -> bool:
    return a is not None and _dtype(a) in {"float16", "bfloat16", "float32", "float64"}


def probe(
    model: keras.Model,
    build_float32: Callable[[], keras.Model],
    policy: str,
    batch: tuple[Any, Any],
    loss: Any,
    loss_scale: float | None,
    slice_batch: Callable[[Any, int], Any],
) -> ProbeReport:
    """Compare ``model`` (built under ``policy``) with its float32 twin.

    Args:
        model: the trial's model, before compile().
        build_float32: builds the same model under the float32 policy (the caller sets it).
        policy: ``mixed_float16`` or ``mixed_bfloat16``.
        batch: the trial's first ``(x, y)`` batch.
        loss: the loss the trial compiles with (name, function or ``Loss``), for gradients.
        loss_scale: the trial's (initial) loss scale; None for no scaling.
        slice_batch: takes the first N samples of an ``x`` or ``y`` structure.
    """
    t0 = time.perf_counter()
    report = ProbeReport()
    parts = Parts()
    try:
        _compare(report, parts, model, build_float32, policy, batch, loss, loss_scale, slice_batch)
    finally:
        report.numerics["probe_parts"] = parts.rounded()
        report.numerics["probe_s"] = round(time.perf_counter() - t0, 3)
    return report


def _compare(
    report: ProbeReport,
    parts: Parts,
    model: keras.Model,
    build_float32: Callable[[], keras.Model],
    policy: str,
    batch: tuple[Any, Any],
    loss: Any,
    loss_scale: float | None,
    slice_batch: Callable[[Any, int], Any],
) -> None:
    """:func:`probe`'s work, each part timed in ``parts``."""
    from tuner import keras_setup

    low = Policy.parse(policy).compute_dtype
    x = slice_batch(batch[0], PROBE_SAMPLES)
    y = slice_batch(batch[1], PROBE_SAMPLES) if len(batch) > 1 else None
    own = keras_setup.own_step(model)
    if own is not None and _without_forward_pass(report, model):
        return
    try:
        with parts.part("twin"):
            twin = build_float32()
            _ensure_built(twin, x)
            policy_built_error = attempt(lambda: _ensure_built(model, x))
        with parts.part("weights"):
            twin.set_weights(model.get_weights())
    except Exception as exc:  # noqa: BLE001 - the probe must never fail the trial
        _not_compared(report, f"the float32 twin could not be prepared: {first_line(exc)}")
        return
    walk_twin, walk_model = Layers.walk(twin), Layers.walk(model)
    if [type(x).__name__ for x in walk_twin.layers] != [
        type(x).__name__ for x in walk_model.layers
    ]:
        _not_compared(report, "the float32 twin's layers differ from the model's")
        return

    # Under mixed_float16 the gradients of the probe batch are compared too: each model's are
    # taken with its forward pass (one pass, one compiled function on JAX).
    loss_fn = _loss_fn(loss) if low == "float16" and own is None else None
    if low == "float16" and own is not None:
        report.numerics["gradients"] = f"not compared: {_OWN_LOSS.format(own.__name__)}"
    budget = RECORD_BUDGET_BYTES
    reference = run_pass(
        twin, walk_twin, x, Loss(loss_fn, y, 1.0) if loss_fn else None, parts, "float32", budget
    )
    if reference.error is not None:
        _not_compared(report, f"float32 fails on the same batch too: {reference.error}")
        return
    scale = loss_scale or 1.0
    wanted = Loss(loss_fn, y, scale) if loss_fn else None
    if policy_built_error is None:
        mine = run_pass(model, walk_model, x, wanted, parts, "policy", budget)
    else:
        mine = Pass(Recorder(walk_model, budget), policy_built_error)
    failure = report.failure = mine.error
    if reference.recorder.truncated or mine.recorder.truncated:
        report.note = (
            "the numerics probe compared only the layers that fit its memory budget of "
            f"{RECORD_BUDGET_BYTES // 2**20} MB"
        )

    with parts.part("compare"):
        pairs = _pairs(reference.recorder, mine.recorder)
        fix = _integer_casts(report, pairs, walk_model, policy, low, failure)
    if fix:
        mine = _with_fix(report, parts, walk_model, model, x, wanted)
        pairs, failure = _pairs(reference.recorder, mine.recorder), mine.error
    elif failure is not None:
        _policy_failure(report, pairs, walk_model, policy, failure)
    with parts.part("compare"):
        errors = _layer_errors(pairs, walk_model)
        report.numerics["layer_errors"] = [[walk_model.layers[i].name, e] for i, e in errors][:64]
        if failure is None:
            if low == "float16":
                _overflow(report, pairs, walk_model, policy)
            _divergence(report, errors, walk_model, policy, low)
    if failure is None and loss_fn is not None:
        with parts.part("flush_check"):
            _underflow(report, reference, mine, model.trainable_weights, scale, policy)


def _with_fix(
    report: ProbeReport,
    parts: Parts,
    walk_model: Layers,
    model: keras.Model,
    x: Any,
    wanted: Loss | None,
) -> Pass:
    """Run again as the policy would run once fixed: the unsafe layers keep their inputs
    (``autocast=False``). The forward pass's failure (None: none) is the report's."""
    for layer in report.unsafe_layers:
        layer.autocast = False
    report.numerics["fixed_layers"] = [layer.name for layer in report.unsafe_layers]
    mine = run_pass(model, walk_model, x, wanted, parts, "fixed", RECORD_BUDGET_BYTES)
    report.failure = mine.error
    return mine


def _policy_failure(
    report: ProbeReport,
    pairs: list[tuple[Call, Call]],
    walk_model: Layers,
    policy: str,
    failure: str,
) -> None:
    """The forward pass fails under the policy where float32 runs: an unsafe hazard, in the
    layer that raised."""
    raised = [c for _, c in pairs if c.exit is None]
    where = walk_model.name(max(raised, key=lambda c: c.entry).layer) if raised else None
    report.hazards.append(
        Hazard(
            POLICY_FAILURE,
            policy,
            where,
            f"the forward pass fails under {policy} on a batch that float32 runs: {failure}",
            'keep the failing layer in float32 (dtype="float32" on it) or train in float32',
            severity="unsafe",
        )
    )


def _not_compared(report: ProbeReport, why: str) -> ProbeReport:
    report.compared = False
    report.note = f"the numerics probe did not compare with float32: {why}"
    return report


#: Why a model with its own training step has no gradients to compare (issue 71).
_OWN_LOSS = "{} computes its own loss in its training step, which the probe cannot compute apart"


def _without_forward_pass(report: ProbeReport, model: Any) -> bool:
    """Whether ``model`` (its training step its own) has no forward pass of its own to
    compare: the keras.io VAE defines no ``call()``, its layers run only inside its step. Then
    the report says so (``note``) and the probe compares nothing."""
    from tuner import keras_setup

    if keras_setup.defines_call(model):
        return False
    _not_compared(
        report,
        f"{type(model).__name__} defines its own training step and no call(), so it has no "
        "forward pass of its own to compare (its gradients neither)",
    )
    return True


def _ensure_built(model: Any, x: Any) -> None:
    if not getattr(model, "built", False):
        model(x, training=False)


def _pairs(reference: Recorder, mine: Recorder) -> list[tuple[Call, Call]]:
    """(float32 call, policy call) of the same layer and call number, in the policy's order."""
    twin = reference.by_key()
    return [(twin[key], call) for key, call in mine.by_key().items() if key in twin]


def _integer_casts(
    report: ProbeReport,
    pairs: list[tuple[Call, Call]],
    layers: Layers,
    policy: str,
    low: str,
    failure: str | None,
) -> list[int]:
    """Whole numbers that a layer's autocast rounded, and that then select something."""
    limit = INTEGER_LIMIT[low]
    flagged: list[int] = []
    by_layer = {call.layer: (ref, call) for ref, call in pairs}
    for ref, call in sorted(pairs, key=lambda p: p[1].entry):
        if any(call.layer == f or layers.descends(call.layer, f) for f in flagged):
            continue
        for a32, alow in zip(ref.inputs, call.inputs, strict=False):
            if a32 is None or alow is None or not (_is_float(a32) and _is_float(alow)):
                continue
            if _dtype(alow) not in _LOW:
                continue
            if _dtype(a32) in _LOW or not a32.size or not np.all(np.isfinite(a32)):
                continue
            whole = np.array_equal(a32, np.round(a32))
            changed = alow.astype(np.float32) != a32.astype(np.float32)
            if not whole or not changed.any():
                continue
            consumer = _index_consumer(call.layer, layers, by_layer)
            output_error = _relative_error(ref, call)
            threshold = DIVERGENCE_ROUNDOFFS * UNIT_ROUNDOFF[low]
            raised = call.exit is None and failure is not None
            if consumer is None and not raised and not (output_error or 0.0) > threshold:
                continue  # ordinary rounding of counts: the divergence check covers it
            first = int(np.flatnonzero(changed.ravel())[0])
            before = float(a32.ravel()[first])
            after = float(alow.astype(np.float32).ravel()[first])
            effect = (
                f"before they reach {layers.name(consumer)}"
                if consumer is not None
                else f"and its output differs from float32's by {output_error:.0%}"
                if output_error is not None
                else "and the layer then fails"
            )
            evidence = (
                f"its float32 input holds whole numbers up to {float(np.abs(a32).max()):,.0f} "
                f"(ids, indices or counts), and {policy} casts it to {low}, which holds whole "
                f"numbers exactly only up to {limit:,}: {int(changed.sum()):,} of "
                f"{a32.size:,} values changed ({before:,.0f} became {after:,.0f}) {effect}"
            )
            if failure is not None:
                evidence += f"; the forward pass then fails: {failure}"
            name = layers.layers[call.layer].name
            report.hazards.append(
                Hazard(
                    INTEGER_CAST,
                    policy,
                    layers.name(call.layer),
                    evidence,
                    f"declare the model input that carries these numbers as integers "
                    f"(keras.Input(..., dtype=\"int32\")), or keep '{name}' from casting its "
                    f'inputs (autocast=False, or dtype="float32" on that layer)',
                    severity="unsafe",
                    figure=f"{before:,.0f} became {after:,.0f}",
                )
            )
            report.unsafe_layers.append(layers.layers[call.layer])
            flagged.append(call.layer)
            break
    return flagged


def _index_consumer(
    index: int, layers: Layers, by_layer: dict[int, tuple[Call, Call]]
) -> int | None:
    """A layer inside ``index`` (or ``index`` itself) that reads indices and got other values
    than under float32."""
    for candidate, (ref, call) in sorted(by_layer.items()):
        if candidate != index and not layers.descends(candidate, index):
            continue
        if not any(isinstance(layers.layers[candidate], cls) for cls in _index_classes()):
            continue
        for a32, alow in zip(ref.inputs, call.inputs, strict=False):
            if a32 is None or alow is None or a32.shape != alow.shape:
                continue
            if not np.array_equal(a32.astype(np.float64), alow.astype(np.float64)):
                return candidate
    return None


def _index_classes() -> list[type]:
    return [c for name in _INDEX_LAYERS if isinstance(c := getattr(keras.layers, name, None), type)]


def _float_arrays(arrays: Sequence[np.ndarray | None] | None) -> list[np.ndarray]:
    return [a for a in arrays or () if _is_float(a) and a is not None]


def _floats(arrays: Sequence[np.ndarray | None] | None) -> list[np.ndarray]:
    return [a.astype(np.float64) for a in _float_arrays(arrays)]


def _relative_error(ref: Call, call: Call) -> float | None:
    """|policy - float32| / |float32| (Frobenius norms) over the floating outputs; None: nothing to
    compare (it raised, or no float output)."""
    a, b = _floats(ref.outputs), _floats(call.outputs)
    if call.exit is None or not a or len(a) != len(b):
        return None
    if any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return None
    num = math.fsum(float(np.sum((y - x) ** 2)) for x, y in zip(a, b, strict=True))
    den = math.fsum(float(np.sum(x**2)) for x in a)
    if not math.isfinite(num):
        return math.inf
    return math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)


def _layer_errors(pairs: list[tuple[Call, Call]], layers: Layers) -> list[tuple[int, float]]:
    """Each layer call's relative error, in the order the calls ended (innermost first)."""
    found = []
    for ref, call in sorted(pairs, key=lambda p: (p[1].exit is None, p[1].exit or 0)):
        error = _relative_error(ref, call)
        if error is not None:
            found.append((call.layer, error))
    return found


def _overflow(
    report: ProbeReport,
    pairs: list[tuple[Call, Call]],
    layers: Layers,
    policy: str,
) -> None:
    """The first layer whose output passes float16's largest value."""
    for ref, call in sorted(pairs, key=lambda p: (p[1].exit is None, p[1].exit or 0)):
        if call.exit is None:
            continue
        # Maxima and infinities need no float64 copies (the error's sums do).
        a, b = _float_arrays(ref.outputs), _float_arrays(call.outputs)
        if not a or len(a) != len(b):
            continue
        peak = max(float(np.max(np.abs(x))) if x.size else 0.0 for x in a)
        became_inf = any(
            bool(np.any(~np.isfinite(y) & np.isfinite(x))) for x, y in zip(a, b, strict=True)
        )
        if peak <= FLOAT16_MAX and not became_inf:
            continue
        report.hazards.append(
            Hazard(
                OVERFLOW,
                policy,
                layers.name(call.layer),
                f"its output reaches {peak:,.4g} in float32, above float16's largest value "
                f"{FLOAT16_MAX:,.0f}"
                + (": under mixed_float16 it holds inf" if became_inf else ""),
                'keep this layer in float32 (dtype="float32" on it), or scale its input '
                "down (normalise the data, or a normalisation layer before it); "
                "mixed_bfloat16 has float32's range",
                figure=f"reaches {peak:,.3g}",
            )
        )
        return


def _divergence(
    report: ProbeReport,
    errors: list[tuple[int, float]],
    layers: Layers,
    policy: str,
    low: str,
) -> None:
    """The first layer whose relative error against float32 passes the threshold."""
    threshold = DIVERGENCE_ROUNDOFFS * UNIT_ROUNDOFF[low]
    worst = max((e for _, e in errors), default=0.0)
    report.numerics["max_layer_error"] = worst if math.isfinite(worst) else None
    for index, error in errors:
        if error <= threshold:
            continue
        shown = "inf" if math.isinf(error) else f"{error:.1%}"
        report.hazards.append(
            Hazard(
                DIVERGENCE,
                policy,
                layers.name(index),
                f"its output differs from float32's by {shown} on the same batch and weights "
                f"(the threshold is {threshold:.1%}, {DIVERGENCE_ROUNDOFFS} times {low}'s "
                f"rounding error {UNIT_ROUNDOFF[low]:.2g}); the layers before it stay within "
                "it",
                'keep this layer in float32 (dtype="float32" on it) and compare the loss '
                "curves; a large error here often means inputs of very different magnitudes",
                figure=f"{shown} off float32",
            )
        )
        return


def _loss_fn(loss: Any) -> Callable[[Any, Any], Any] | None:
    if loss is None:
        return keras.losses.get("mean_squared_error")  # type: ignore[no-any-return]
    if isinstance(loss, str):
        return keras.losses.get(loss)  # type: ignore[no-any-return]
    if callable(loss):
        return loss  # type: ignore[no-any-return]
    return None  # a list or dict of losses: no single gradient to look at


def _underflow(
    report: ProbeReport,
    reference: Pass,
    mine: Pass,
    weights: list[Any],
    scale: float,
    policy: str,
) -> None:
    """Gradient values that flush to zero in float16: predicted per loss scale from float32's
    gradients, measured at the trial's scale."""
    why = reference.gradient_error or mine.gradient_error
    if why is not None or reference.gradients is None or mine.gradients is None:
        report.numerics["gradients"] = f"not compared: {why}"
        return
    _flushed(report, reference.gradients, mine.gradients, weights, scale, policy)


def _flushed(
    report: ProbeReport,
    reference: list[np.ndarray],
    measured: list[np.ndarray],
    weights: list[Any],
    scale: float,
    policy: str,
) -> None:
    """The shares of float32's gradient values that flush to zero in float16: predicted per
    loss scale, and measured at ``scale``; an underflow hazard past :data:`UNDERFLOW_SHARE`."""
    flat = np.concatenate([np.abs(g).ravel() for g in reference]) if reference else np.zeros(0)
    nonzero = flat[flat > 0]
    if not nonzero.size:
        return
    report.numerics["grad_max"] = float(nonzero.max())
    report.numerics["flush_share"] = {
        f"{s:g}": float(np.mean(nonzero * s < FLOAT16_TINY)) for s in PREDICTED_SCALES
    }
    report.numerics["overflow_scale"] = float(FLOAT16_MAX / nonzero.max())
    lost = total = 0
    worst: tuple[float, str] | None = None
    for g32, glow, weight in zip(reference, measured, weights, strict=True):
        mask = g32 != 0
        n = int(mask.sum())
        if not n:
            continue
        flushed = int(np.sum(mask & (glow == 0)))
        lost += flushed
        total += n
        share = flushed / n
        if n >= 64 and (worst is None or share > worst[0]):
            worst = (share, str(getattr(weight, "path", weight.name)))
    if not total:
        return
    share = lost / total
    report.numerics["flush_share_measured"] = {f"{scale:g}": share}
    if share <= UNDERFLOW_SHARE:
        return
    where = f"; the most in {worst[1]} ({worst[0]:.0%})" if worst else ""
    scale_text = "without loss scaling" if scale == 1.0 else f"at loss scale {scale:g}"
    report.hazards.append(
        Hazard(
            UNDERFLOW,
            policy,
            None,
            f"{share:.1%} of the gradient values that float32 computes flush to zero in "
            f"float16 {scale_text} (below {FLOAT16_TINY:.2g}){where}",
            "use dynamic loss scaling (LossScaleOptimizer, Keras's default under "
            "mixed_float16) or a larger fixed scale; the predicted share per scale is in the "
            "trial's numerics",
            figure=f"{share:.1%} flushed",
        )
    )
