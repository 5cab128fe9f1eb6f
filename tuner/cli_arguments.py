"""The ``mptune`` command line's arguments: one table a command (:data:`COMMANDS`), the types
that parse their values, and the flag that sets each setting the engine names
(:func:`flag_words`, issue 36): the CLI's words for a :class:`tuner.said.Setting`."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from tuner import api


def _fraction(text: str) -> float:
    value = _positive_float(text) if text.strip() not in ("0", "0.0") else 0.0
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1, not {text}")
    return value


def _policies(text: str) -> tuple[str, ...]:
    try:
        return api.parse_policies(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_sizes(text: str) -> tuple[tuple[int, ...], bool]:
    try:
        return api.parse_batch_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _loss_scales(text: str) -> tuple[api.LossScale, ...]:
    try:
        return api.parse_loss_scales(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole(text: str, least: int, words: str) -> int:
    """A whole number of at least ``least`` (``words`` says so when it is not)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {words}, not {value}")
    return value


def _positive_int(text: str) -> int:
    return _whole(text, 1, "at least 1")


def _parallel(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc}: give a whole number of 1 or more, or auto"
        ) from None


def _non_negative_int(text: str) -> int:
    return _whole(text, 0, "0 or more")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _device(text: str) -> str:
    if not re.fullmatch(r"auto|cpu|gpu:\d+", text.strip()):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}: write auto, cpu or gpu:N")
    return text.strip()


def _loss_scale(text: str) -> str:
    try:
        api.LossScale.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


#: One command-line argument: its flags (or the name of a positional) and the keywords of
#: ``add_argument``. A ``group`` keyword puts it in that mutually exclusive group of its command.
Argument = tuple[tuple[str, ...], dict[str, Any]]


def _arg(*flags: str, **options: Any) -> Argument:
    """One row of a command's table: what ``add_argument`` takes."""
    return flags, options


_MODEL_HELP = (
    "builtin:mlp | builtin:cnn | builtin:transformer (optionally builtin:cnn:image_size=64,"
    "filters=64), a .py file with build_model(), or a .keras file"
)
_SCRIPT_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--script", group="model", metavar="PATH",
         help="a training script, run unmodified up to its model.fit(...): each trial trains "
         "the model it builds on the data it passes (the script's own arguments go last, "
         "after --)"),
    _arg("--fit-call", type=_positive_int, default=1, metavar="N",
         help="with --script: take over its N-th model.fit call (default: the first)"),
)  # fmt: skip
_EXTRAS = "jax and torch are extras: pip install 'mptune[jax]' or 'mptune[torch]'"

# The tables are laid out by hand, one argument a row (the formatter would spread each
# keyword over a line of its own).
# fmt: off
_DETECT_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--storage", metavar="URL",
         help="the sessions whose measurements on this machine the advice reports (default: "
         "SQLite in the user data directory)"),
    _arg("--json", action="store_true", help="print a JSON object instead"),
)

_RUN_ARGUMENTS: tuple[Argument, ...] = (
    _arg("script", metavar="SCRIPT",
         help="the training script (a .py file that calls fit); its own arguments go last, "
         "after --"),
    _arg("--config", required=True, metavar="FILE|SESSION",
         help="the tuned config: a file mptune export wrote, or a stored session's name"),
    _arg("--storage", metavar="URL", help="where a session named by --config is stored"),
    _arg("--fit-call", type=_positive_int, default=1, metavar="N",
         help="apply the setup at the script's N-th model.fit call (default: the first)"),
)

# fmt: on


def _knob_argument(knob: api.Knob) -> Argument:
    """An execution knob's ``mptune trial`` flag, as its row of :data:`api.KNOBS` declares it
    (a switch for a yes-or-no knob, a whole number for the others)."""
    if knob.kind is bool:
        return _arg(f"--{knob.option}", dest=knob.name, action="store_true", help=knob.help)
    return _arg(
        f"--{knob.option}",
        dest=knob.name,
        type=_positive_int,
        default=knob.default,
        metavar="N",
        help=knob.help,
    )


# fmt: off
_TRIAL_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--model", group="model", metavar="SPEC", help=_MODEL_HELP),
    *_SCRIPT_ARGUMENTS,
    _arg("--policy", required=True, choices=api.KNOWN_POLICIES),
    _arg("--backend", choices=api.BACKENDS,
         help="the Keras 3 backend the trial runs on (default: KERAS_BACKEND when set, else "
         f"tensorflow); {_EXTRAS}"),
    _arg("--batch-size", required=True, type=_positive_int, metavar="N"),
    _arg("--loss-scale", metavar="S", type=_loss_scale,
         help="none | dynamic | dynamic:INITIAL[:GROWTH_STEPS] | fixed:N "
         "(default: dynamic for mixed_float16, none otherwise)"),
    *(_knob_argument(knob) for knob in api.KNOBS),
    _arg("--steps", type=_positive_int, metavar="N",
         help="measured steps (default: measure for --measure-seconds)"),
    _arg("--measure-seconds", type=_positive_float, default=5.0, metavar="S",
         help="how long to measure when --steps is not given (default 5)"),
    _arg("--warmup", type=_non_negative_int, default=5, metavar="N",
         help="untimed warm-up steps (default 5)"),
    _arg("--no-probe", dest="probe", action="store_false",
         help="skip the numerics probe of a low-precision policy (docs/numerics.md)"),
    _arg("--timeout", type=_positive_float, default=300.0, metavar="SECONDS",
         help="wall-clock limit for the whole trial (default 300)"),
    _arg("--device", default="auto", type=_device, metavar="DEV",
         help="auto (first GPU if any), cpu or gpu:N (default auto)"),
    _arg("--memory-limit", type=_positive_float, metavar="MB",
         help="count the trial as out of memory above this"),
    _arg("--seed", type=int, default=0, help="seed for weights and data"),
    _arg("--json", action="store_true", help="print the result as JSON"),
)

_TUNE_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--model", group="model", metavar="SPEC",
         help="as for trial (default: the session's when continuing one, else builtin:cnn)"),
    *_SCRIPT_ARGUMENTS,
    _arg("--backend", choices=api.BACKENDS,
         help="the Keras 3 backend every trial runs on (default: the session's when "
         "continuing one, else KERAS_BACKEND when set, else tensorflow); a session is "
         f"measured on one backend. {_EXTRAS}"),
    _arg("--objective", choices=("speed", "memory", "balanced"),
         help="speed: samples/s; memory: least memory per sample within 80%% of "
         "the fastest; balanced: the same within 95%% (default speed)"),
    _arg("--budget-minutes", type=_positive_float, metavar="M",
         help="start no trial that would end past this"),
    _arg("--max-trials", type=_positive_int, metavar="N"),
    _arg("--policies", type=_policies, metavar="P[,P...]",
         help="policies to try (default: the hardware advice)"),
    _arg("--batch-sizes", type=_batch_sizes, metavar="LIST|RANGE",
         help="16,32,64 or 8-1024 (default 8-1024, powers of two)"),
    _arg("--start-batch", type=_positive_int, metavar="N",
         help="batch size of the float32 baseline (default 64); also the batch size you "
         "train with, which the recommendation compares its own with (else the model "
         "file's BATCH_SIZE)"),
    _arg("--global-batch", type=_positive_int, metavar="B",
         help="keep B samples per optimizer update (the batch your learning rate is tuned "
         "for): search the per-step batch and gradient accumulation whose product is B"),
    # A knob whose search the user switches (Knob.switch): --xla auto|on|off, --float8 ...
    *(
        _arg(f"--{knob.option}", choices=api.SWITCH_MODES, dest=knob.name, help=knob.switch.flag)
        for knob in api.SWITCHED
        if knob.switch is not None
    ),
    _arg("--loss-scales", type=_loss_scales, metavar="S[,S...]",
         help="float16 loss-scale candidates (default dynamic,dynamic:1024:500,"
         "fixed:1024,fixed:128)"),
    _arg("--loss-tolerance", type=_fraction, metavar="F",
         help="largest loss gap to float32 (default 0.05)"),
    _arg("--measure-seconds", type=_positive_float, metavar="S",
         help="measuring time per trial (default 2)"),
    _arg("--timeout", type=_positive_float, metavar="SECONDS",
         help="wall-clock limit per trial; a trial past it ends 'timeout' (default 300)"),
    _arg("--device", type=_device, metavar="DEV",
         help="auto, cpu or gpu:N (default auto: GPU 0, or the CPU where there is none; "
         "refused where NVML sees a GPU the backend cannot use: cpu tunes on the CPU anyway)"),
    _arg("--parallel", type=_parallel, default=1, metavar="N|auto",
         help="run up to N independent trials at once, one a GPU (auto: one a GPU of the "
         "searched GPU's model, one on a CPU; default 1)"),
    _arg("--workers", action="store_true",
         help="also hand trials to mptune worker processes that join this session (the "
         "same kind of machine; needs a database server --storage)"),
    _arg("--storage", metavar="URL",
         help="Optuna storage URL (default: SQLite in the user data directory)"),
    _arg("--study", group="session", metavar="NAME",
         help="session name; an existing one continues"),
    _arg("--resume", group="session", metavar="NAME", help="continue this existing session"),
    _arg("--out", metavar="FILE", help="also write the tuned config (JSON) here"),
    _arg("--json", action="store_true", help="print the recommendation as JSON"),
)

_WORKER_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--storage", required=True, metavar="URL", help="the search's database server URL"),
    _arg("--study", required=True, metavar="NAME", help="the session's name"),
    _arg("--device", type=_device, metavar="DEV", help="run the trials here (default: as asked)"),
)

_SESSIONS_ARGUMENTS: tuple[Argument, ...] = (
    _arg("--storage", metavar="URL"),
    _arg("--json", action="store_true"),
)

_SHOW_ARGUMENTS: tuple[Argument, ...] = (
    _arg("name", metavar="NAME"),
    _arg("--storage", metavar="URL"),
    _arg("--json", action="store_true"),
)

_EXPORT_ARGUMENTS: tuple[Argument, ...] = (
    _arg("source", metavar="SESSION_OR_FILE",
         help="a session name (see mptune sessions) or a tuned config .json file"),
    _arg("--format", default="json", choices=("json", "snippet", "script")),
    _arg("--keras", default="3", choices=("3", "2"),
         help="Keras 3, or 2 for tf_keras (snippet only; default 3)"),
    _arg("-o", "--output", metavar="FILE", help="write here instead of stdout"),
    _arg("--storage", metavar="URL"),
)
# fmt: on


#: Each command: the words ``mptune --help`` and ``mptune COMMAND --help`` show, and its
#: arguments, in the order the help lists them.
COMMANDS: dict[str, tuple[dict[str, str], tuple[Argument, ...]]] = {
    "detect": (
        dict(
            help="show the GPUs, CPU and software, and what to try",
            description="Read the hardware (NVML, /proc/cpuinfo, psutil) and say which "
            "precision policies are worth trying.",
        ),
        _DETECT_ARGUMENTS,
    ),
    "trial": (
        dict(
            help="run one short training trial and print its figures",
            description="Run one short training trial in a worker process.",
        ),
        _TRIAL_ARGUMENTS,
    ),
    "tune": (
        dict(
            help="search for the best setup and recommend it",
            description="Search precision policy, batch size, loss scale and the execution "
            "knobs (XLA, steps per execution, TF32) with short trials, and recommend the best "
            "numerically safe setup. Every trial is stored; re-running with the same --study "
            "(or --resume NAME) continues.",
        ),
        _TUNE_ARGUMENTS,
    ),
    "worker": (
        dict(help="join a running search (started with tune --workers) and take trials from it"),
        _WORKER_ARGUMENTS,
    ),
    "sessions": (dict(help="list stored tuning sessions"), _SESSIONS_ARGUMENTS),
    "show": (dict(help="show a stored session: trials and recommendation"), _SHOW_ARGUMENTS),
    "export": (
        dict(
            help="export a tuned setup: JSON config, snippet or script",
            description="Export the recommendation of a stored session (or a tuned config "
            "file) as a versioned JSON config, a paste-ready snippet, or a runnable training "
            "script.",
        ),
        _EXPORT_ARGUMENTS,
    ),
    "run": (
        dict(
            help="run your training script with a tuned setup applied, unedited",
            description="Run a training script for real with a tuned config applied: the "
            "policy set before its first line, and at its model.fit the batch size, loss scale "
            "and knobs (its other fit arguments as it wrote them). Its arguments go after --.",
        ),
        _RUN_ARGUMENTS,
    ),
    "gui": (
        dict(
            help="open the desktop application",
            description="Open mptune's window: hardware, live tuning with plots, "
            "recommendation and export.",
        ),
        (),
    ),
}

#: The flag that sets each setting, by the name the parsed value has (``dest``), over every
#: command's table.
FLAGS: dict[str, str] = {
    options.get("dest", flag[2:].replace("-", "_")): flag
    for _words, arguments in COMMANDS.values()
    for flags, options in arguments
    for flag in flags[-1:]
    if flag.startswith("--")
}


def flag_words(setting: api.said.Setting) -> str:
    """A setting the engine names, as the command line sets it: ``--xla off``; a session to
    continue as the command that continues it."""
    if setting.name == "resume" and setting.value is not None:
        return f"mptune tune --resume {setting.value}"
    flag = FLAGS[setting.name]
    return flag if setting.value is None else f"{flag} {setting.value}"
