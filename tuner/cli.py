"""The ``mptune`` command line: the headless face of the engine.

Exit status: 0 when the command did its job (for ``trial``: the trial ended ``ok``), 1 when a
trial ran but ended oom/diverged/timeout/crashed, 2 for bad input (a wrong flag, a broken model
file; a trial ending ``user_error`` is bad input too), 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from typing import NoReturn

from tuner import __version__
from tuner.errors import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_TRIAL_FAILED,
                          MptuneError)
from tuner.policies import POLICIES


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mptune", description=(
        "Find the fastest numerically safe mixed-precision setup for a Keras model on this "
        "machine."))
    parser.add_argument("--version", action="version", version=f"mptune {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show tracebacks and worker logs when something fails")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    detect = sub.add_parser("detect", help="show the GPUs, CPU and software, and what to try",
                            description="Read the hardware (NVML, /proc/cpuinfo, psutil) and "
                                        "say which precision policies are worth trying.")
    detect.add_argument("--json", action="store_true", help="print a JSON object instead")
    detect.set_defaults(handler=_cmd_detect)

    trial = sub.add_parser("trial", help="run one short training trial and print its figures",
                           description="Run one short training trial in a worker process.")
    trial.add_argument("--model", required=True, metavar="SPEC",
                       help="builtin:mlp | builtin:cnn | builtin:transformer (optionally "
                            "builtin:cnn:image_size=64,filters=64), a .py file with "
                            "build_model(), or a .keras file")
    trial.add_argument("--policy", required=True, choices=POLICIES)
    trial.add_argument("--batch-size", required=True, type=_positive_int, metavar="N")
    trial.add_argument("--loss-scale", metavar="S", type=_loss_scale,
                       help="none | dynamic | dynamic:INITIAL[:GROWTH_STEPS] | fixed:N "
                            "(default: dynamic for mixed_float16, none otherwise)")
    trial.add_argument("--steps", type=_positive_int, metavar="N",
                       help="measured steps (default: measure for --measure-seconds)")
    trial.add_argument("--measure-seconds", type=_positive_float, default=5.0, metavar="S",
                       help="how long to measure when --steps is not given (default 5)")
    trial.add_argument("--warmup", type=_non_negative_int, default=5, metavar="N",
                       help="untimed warm-up steps (default 5)")
    trial.add_argument("--timeout", type=_positive_float, default=300.0, metavar="SECONDS",
                       help="wall-clock limit for the whole trial (default 300)")
    trial.add_argument("--device", default="auto", metavar="DEV",
                       help="auto (first GPU if any), cpu or gpu:N (default auto)")
    trial.add_argument("--memory-limit", type=_positive_float, metavar="MB",
                       help="count the trial as out of memory above this")
    trial.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    trial.add_argument("--json", action="store_true", help="print the result as JSON")
    trial.set_defaults(handler=_cmd_trial)

    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _loss_scale(text: str) -> str:
    from tuner.trials.spec import LossScale

    try:
        LossScale.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _cmd_detect(args: argparse.Namespace) -> int:
    from tuner.hardware import detect
    from tuner.hardware.report import render_text

    profile = detect()
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
    else:
        print(render_text(profile))
    return EXIT_OK


def _cmd_trial(args: argparse.Namespace) -> int:
    from tuner.trials.models import parse_model_spec
    from tuner.console import TrialProgress, render_trial
    from tuner.trials.result import TrialStatus
    from tuner.trials.runner import run_trial
    from tuner.trials.spec import TrialSpec

    try:
        spec = TrialSpec.create(
            args.model, args.policy, args.batch_size, args.loss_scale, steps=args.steps,
            measure_seconds=args.measure_seconds, warmup_steps=args.warmup,
            timeout_s=args.timeout, device=args.device, memory_limit_mb=args.memory_limit,
            seed=args.seed)
    except ValueError as exc:
        raise MptuneError(str(exc)) from None
    source = parse_model_spec(spec.model)
    with TrialProgress(spec) as progress:
        result = run_trial(spec, progress.on_event, source=source)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render_trial(result, verbose=args.verbose))
    if result.status is TrialStatus.OK:
        return EXIT_OK
    assert result.error is not None
    where = f"{result.error.location}: " if result.error.location else ""
    print(f"mptune: trial {result.status.value}: {where}{result.error.message}", file=sys.stderr)
    if args.verbose and result.error.traceback:
        print(result.error.traceback, file=sys.stderr)
    return EXIT_BAD_INPUT if result.status is TrialStatus.USER_ERROR else EXIT_TRIAL_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="mptune: %(levelname)s: %(message)s")
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_OK
    try:
        return int(args.handler(args))
    except MptuneError as exc:
        print(f"mptune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("mptune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: one line unless --verbose
        if args.verbose:
            raise
        print(f"mptune: internal error: {type(exc).__name__}: {exc} "
              "(run with --verbose for the traceback)", file=sys.stderr)
        return EXIT_TRIAL_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
