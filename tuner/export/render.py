"""Rendering a tuned config as JSON, a paste-ready snippet, or a runnable training script.

The snippet and script come from Jinja2 templates in ``assets/templates``. Every value written
into generated code goes through the ``pyrepr`` filter (Python's ``repr``), so a path with
quotes, spaces, backslashes or non-ASCII characters comes out as a correct Python literal; free
text in a comment goes through ``oneline``, which keeps it to one line of printable characters.
Whatever strings a config holds (a loaded one is checked, one built in code is not), the
generated file compiles.

The snippet and the script carry the config's precision hazards as comments
(:func:`hazard_comments`): the chosen policy's own, and the unsafe ones of the policies not
chosen, each with its fix.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any, Literal

import jinja2

from tuner import __version__
from tuner.export.config import ConfigError, TunedConfig
from tuner.policies import TENSORFLOW
from tuner.resources import templates_dir
from tuner.said import setting
from tuner.setup import BACKEND_NAMES, KNOBS, compile_arguments, optimizer_arguments
from tuner.trials.models import ScriptCommand, parse_model_spec

FORMATS = ("json", "snippet", "script")
KERAS_VERSIONS = ("3", "2")

Format = Literal["json", "snippet", "script"]
KerasVersion = Literal["3", "2"]

#: Generated comments are wrapped to this many characters a line.
COMMENT_WIDTH = 88


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pyrepr"] = _pyrepr
    env.filters["oneline"] = _oneline
    return env


#: What Python reads as a source encoding declaration in a comment on line 1 or 2 (PEP 263).
_CODING_RE = re.compile(r"coding(?=[:=])")


def _oneline(value: Any) -> str:
    """Free text for a comment: every kind of line break (``\\r`` too) becomes a space, any other
    character that is not printable (NUL, escape, a lone surrogate) is escaped as in ``repr``,
    and ``coding:`` becomes ``coding :`` so that the text cannot declare the file's encoding."""
    text = " ".join(str(value).splitlines())
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return _CODING_RE.sub("coding ", text)


def comment_lines(text: Any) -> list[str]:
    """Free text as comment lines of at most :data:`COMMENT_WIDTH` characters (a word longer
    than a line is broken): made one line by :func:`_oneline` first, so that no piece of it can
    leave the comment, then wrapped, each line after the first indented under it."""
    return textwrap.wrap(
        _oneline(text),
        width=COMMENT_WIDTH,
        initial_indent="# ",
        subsequent_indent="#   ",
        break_on_hyphens=False,
    ) or ["#"]


def hazard_comments(config: TunedConfig) -> list[str]:
    """The config's hazards as comment lines for generated code.

    Every hazard of the chosen policy (warnings: the policy stays the best choice, but the
    model deserves the fix), then the unsafe hazards of the other policies (why they were not
    chosen, and how to fix the model so that they could be): for each, ``# mptune numerics:
    KIND in LAYER: EVIDENCE`` and ``# fix: FIX``, wrapped. The other policies' warnings are in
    the JSON config only.
    """
    chosen = config.setup.policy.name
    shown = [h for h in config.hazards if h.policy == chosen]
    shown += [h for h in config.hazards if h.policy != chosen and h.unsafe]
    lines: list[str] = []
    for hazard in shown:
        if hazard.policy != chosen:
            head = f"mptune numerics (why not {hazard.policy})"
        else:
            head = "mptune numerics" + (" (unsafe)" if hazard.unsafe else "")
        where = f" in {hazard.layer}" if hazard.layer else ""
        lines += comment_lines(f"{head}: {hazard.kind}{where}: {hazard.evidence}")
        lines += comment_lines(f"fix: {hazard.fix}")
    return lines


def _pyrepr(value: Any) -> str:
    """A Python literal for ``value``: ``repr`` escapes quotes, backslashes, line breaks and
    non-ASCII text correctly, which hand-written quoting in a template would not."""
    if isinstance(value, (str, int, float, bool, type(None), tuple, list, dict)):
        return repr(value)
    raise TypeError(f"cannot write {type(value).__name__} into generated code")


def render(config: TunedConfig, fmt: Format, keras: KerasVersion = "3") -> str:
    """The config in format ``fmt`` for Keras ``keras`` (3, or 2 meaning tf_keras).

    Args:
        config: the tuned config.
        fmt: ``json`` (the config file), ``snippet`` (paste-ready Python defining
            ``BATCH_SIZE``, ``make_optimizer(base=None)`` and ``COMPILE_KWARGS``) or ``script``
            (a runnable Keras 3 training script).
        keras: ``3`` for Keras 3, ``2`` for tf_keras (snippet and json only).

    The snippet and the script set ``KERAS_BACKEND`` to the setup's backend before they import
    Keras (and stop, on one line, when Keras was imported earlier on another backend), then apply
    the setup's execution knobs exactly as :mod:`tuner.keras_setup` does: TF32 on or off for
    float32 (on the backend's own switch), ``gradient_accumulation_steps`` on the inner
    optimizer, and ``jit_compile`` and ``steps_per_execution`` in ``COMPILE_KWARGS``.

    Raises:
        ConfigError: an unknown format or Keras version, or a combination not offered (the
            script for Keras 2; a tf_keras snippet of a setup tuned on JAX or PyTorch, as
            tf_keras runs on TensorFlow only, or of a setup with a knob tf_keras cannot take:
            ``Knob.keras2``, as its optimizers have no gradient accumulation).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if keras not in KERAS_VERSIONS:
        raise ConfigError(f"unknown Keras version {keras!r}: choose 3 or 2")
    if fmt == "json":
        return config.to_json()
    if fmt == "script" and ScriptCommand.parse(config.model) is not None:
        raise ConfigError(
            "this setup was tuned on your own training script, which is the script to run: "
            "mptune run applies the setup to it unedited (or take the snippet to edit it in)"
        )
    if fmt == "script" and keras == "2":
        raise ConfigError(
            f"the script export is Keras 3 only; use {setting('keras', 2)} with "
            f"{setting('format', 'snippet')}"
        )
    backend = config.setup.backend
    if keras == "2" and backend != TENSORFLOW:
        raise ConfigError(
            f"this setup was tuned on the {backend} backend ({BACKEND_NAMES[backend]}), and "
            "tf_keras (Keras 2) runs on TensorFlow only; export it for Keras 3 "
            f"({setting('keras', 3)})"
        )
    setup = config.setup
    for knob in KNOBS:
        if keras == "2" and not knob.keras2 and getattr(setup, knob.name) != knob.default:
            raise ConfigError(
                f"this setup has {knob.say(setup) or knob.label}, which tf_keras (Keras 2) "
                f"cannot do; export it for Keras 3 ({setting('keras', 3)})"
            )
    template = f"snippet_keras{keras}.py.j2" if fmt == "snippet" else "script_keras3.py.j2"
    return _environment().get_template(template).render(**_context(config))


def _context(config: TunedConfig) -> dict[str, Any]:
    setup = config.setup
    scale = setup.loss_scale
    evidence = config.evidence
    summary = []
    if evidence.today_trap:
        # Said first (issue 71): the user's run today does not train, or fails.
        summary.append(evidence.today_trap)
    elif evidence.today and evidence.samples_per_second and evidence.baseline_samples_per_second:
        # A script's: the figure its user will see first (issue 70).
        ratio = evidence.samples_per_second / evidence.baseline_samples_per_second
        summary.append(f"{ratio:.2f}x what you run today ({evidence.today})")
    if evidence.speedup_vs_float32 is not None:
        f32 = evidence.float32_setup
        if f32 is None:  # a config exported before the float32 setup was named
            summary.append(f"{evidence.speedup_vs_float32:.2f}x the best float32 setup")
        elif f32 == setup.label:
            summary.append("float32, the fastest float32 setup measured")
        else:
            figure = evidence.float32_samples_per_second
            against = f" at {figure:,.0f} samples/s" if figure is not None else ""
            summary.append(f"{evidence.speedup_vs_float32:.2f}x {f32}{against}")
    if evidence.samples_per_second is not None:
        summary.append(f"{evidence.samples_per_second:,.0f} samples/s")
    if (
        evidence.input_bound
        and evidence.device_samples_per_second is not None
        and evidence.input_samples_per_second is not None
    ):
        summary.append(
            f"input-bound: fit on your input reaches "
            f"{evidence.input_samples_per_second / evidence.device_samples_per_second:.0%} of "
            f"the {evidence.device_samples_per_second:,.0f} samples/s the device trains from "
            "batches in memory"
        )
    if evidence.loss_gap is not None:
        summary.append(f"loss gap {evidence.loss_gap:.2%} to float32")
    source_kind, builtin_name, builtin_params = _model_kind(config.model)
    compiled = compile_arguments(setup)
    return {
        "config": config,
        "policy": setup.policy.name,
        "batch_size": setup.batch_size,
        "loss_scale": str(scale),
        "scale_kind": scale.kind,
        "initial_scale": scale.effective_initial_scale,
        "growth_steps": scale.effective_growth_steps,
        "fixed_value": scale.value,
        # The backend and the execution knobs (docs/export.md): applied as
        # tuner/keras_setup.py applies them (on JAX, Keras always compiles with XLA).
        "backend": setup.backend,
        "backend_name": BACKEND_NAMES[setup.backend],
        **{knob.name: getattr(setup, knob.name) for knob in KNOBS},
        # What compile() and the optimizer are told, as the knobs' rows say (keras_setup
        # passes the same): the templates word the knobs they know, and set any other.
        "jit_compile": compiled["jit_compile"],
        "other_compile_arguments": {
            k: v for k, v in compiled.items() if k not in ("jit_compile", "steps_per_execution")
        },
        "other_optimizer_arguments": {
            k: v
            for k, v in optimizer_arguments(setup).items()
            if k != "gradient_accumulation_steps" and v is not None
        },
        "global_batch": setup.global_batch,
        "setup_comments": comment_lines(f"Setup: {setup.in_words()}."),
        "evidence_summary": ", ".join(summary) or "no figures recorded",
        "reason": evidence.reason,
        "device": config.hardware.gpu_name or config.hardware.cpu_model or config.hardware.device,
        "model": config.model,
        "model_kind": source_kind,
        "builtin_name": builtin_name,
        "builtin_params": builtin_params,
        "mptune_version": __version__,
        "created": config.created,
        "session": config.session,
        "hazard_comments": hazard_comments(config),
    }


def _model_kind(model: str) -> tuple[str, str | None, dict[str, int]]:
    if model.startswith("builtin:"):
        source = parse_model_spec(model)
        return "builtin", source.name, dict(source.params)
    if model.lower().endswith(".keras"):
        return "keras", None, {}
    return "python", None, {}
