"""The ``mptune`` command line: the headless face of the engine.

Exit status: 0 when the command did its job (for ``trial``: the trial ended ``ok``), 1 when a
trial ran but ended oom/diverged/timeout/crashed, 2 for bad input (a wrong flag, a broken model
file; a trial ending ``user_error`` is bad input too), 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tuner import __version__, api
from tuner.cli_arguments import COMMANDS
from tuner.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRIAL_FAILED,
    MptuneError,
    StopRequest,
    Terminated,
)

#: The model a new search tunes when none is given.
DEFAULT_MODEL = "builtin:cnn"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``mptune`` parser: its commands and their arguments (the tables above)."""
    parser = _Parser(
        prog="mptune",
        description=(
            "Find the fastest numerically safe mixed-precision setup for a Keras model on this "
            "machine."
        ),
    )
    parser.add_argument("--version", action="version", version=f"mptune {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show tracebacks and worker logs when something fails",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "detect": _cmd_detect,
        "run": _cmd_run,
        "trial": _cmd_trial,
        "tune": _cmd_tune,
        "worker": _cmd_worker,
        "sessions": _cmd_sessions,
        "show": _cmd_show,
        "export": _cmd_export,
        "gui": _cmd_gui,
    }
    for name, (words, arguments) in COMMANDS.items():
        command = sub.add_parser(name, help=words["help"], description=words.get("description"))
        groups: dict[str, Any] = {}  # argparse's mutually exclusive groups, by name
        for flags, options in arguments:
            target: Any = command
            if "group" in options:
                group = options["group"]
                if group not in groups:
                    groups[group] = command.add_mutually_exclusive_group()
                target = groups[group]
                options = {k: v for k, v in options.items() if k != "group"}
            target.add_argument(*flags, **options)
        command.set_defaults(handler=handlers[name], script_args=())
    return parser


def _cmd_detect(args: argparse.Namespace) -> int:
    profile = api.detect()
    # The advice is a prior; what earlier searches measured on this machine outranks it.
    measured = api.measured_here(profile, args.storage)
    if args.json:
        data = profile.to_dict()
        data["measured"] = {policy: m.to_dict() for policy, m in measured.items()}
        print(json.dumps(data, indent=2))
    else:
        # The verdict is for the backend a search would run on (KERAS_BACKEND, else TensorFlow).
        try:
            backend = api.backend_from_env()
        except MptuneError:
            backend = "tensorflow"
        print(api.render_hardware(profile, backend, measured))
    return EXIT_OK


def _model_given(args: argparse.Namespace) -> str | None:
    """The model the command line names: ``--model``, or ``--script`` with its arguments (after
    ``--``) as a model spec; None where it names none.

    Raises:
        MptuneError: arguments or --fit-call without --script.
    """
    if args.script:
        return api.ScriptCommand(args.script, args.script_args, args.fit_call).spec
    if args.script_args:
        raise MptuneError(
            f"{' '.join(args.script_args)!r}: arguments after -- are a training script's; "
            "give the script with --script PATH"
        )
    if args.fit_call != 1:
        raise MptuneError("--fit-call picks a training script's fit call: give --script PATH")
    return args.model  # type: ignore[no-any-return]


def _cmd_trial(args: argparse.Namespace) -> int:
    from tuner.console import TrialProgress, render_trial

    backend = args.backend or api.backend_from_env()
    if args.xla and backend == "jax":
        print(
            "mptune: note: JAX compiles every training step with XLA already; --xla changes "
            "nothing on the jax backend",
            file=sys.stderr,
        )
    try:
        setup = api.Setup(
            args.policy,
            args.batch_size,
            args.loss_scale,
            backend=backend,
            **{knob.name: getattr(args, knob.name) for knob in api.KNOBS},
        )
        model = _model_given(args)
        if model is None:
            raise MptuneError("give the model to train: --model SPEC or --script PATH")
        spec = api.TrialSpec(
            model=model,
            setup=setup,
            steps=args.steps,
            measure_seconds=args.measure_seconds,
            warmup_steps=args.warmup,
            timeout_s=args.timeout,
            device=args.device,
            memory_limit_mb=args.memory_limit,
            seed=args.seed,
            probe=args.probe,
        )
    except ValueError as exc:
        raise MptuneError(str(exc)) from None
    api.check_backend(backend)
    api.check_model(spec.model)
    if spec.device == "auto":
        # The worker falls back to the CPU where the backend cannot reach the GPU NVML sees:
        # said before the trial, in one line, not found out from its figures.
        unused = api.unused_gpu(api.detect(), backend)
        if unused is not None:
            print(f"mptune: note: this trial runs on the CPU (--device auto). {unused.sentence}",
                  file=sys.stderr)  # fmt: skip
    with TrialProgress(spec) as progress:
        result = api.run_trial(spec, progress.on_event, cancel=_STOP)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render_trial(result, verbose=args.verbose))
    if result.status is api.TrialStatus.OK:
        return EXIT_OK
    assert result.error is not None
    where = f"{result.error.location}: " if result.error.location else ""
    print(f"mptune: trial {result.status.value}: {where}{result.error.message}", file=sys.stderr)
    if args.verbose and result.error.traceback:
        print(result.error.traceback, file=sys.stderr)
    return EXIT_BAD_INPUT if result.status is api.TrialStatus.USER_ERROR else EXIT_TRIAL_FAILED


def _cmd_tune(args: argparse.Namespace) -> int:
    from tuner.console import TuneProgress, check_writable

    if args.out:
        check_writable(args.out, "--out")
    name = args.resume or args.study
    stored = api.find_session(name, args.storage) if name else None
    if args.resume and stored is None:
        raise MptuneError(f"no session named {args.resume!r} to resume (see mptune sessions)")
    given = _model_given(args)
    model = given or (stored.model if stored else DEFAULT_MODEL)
    source = api.check_model(model)
    profile = api.detect()
    space, settings = _space_and_settings(args, stored, source, profile)
    api.check_backend(settings.backend)
    if stored is None:
        # Before any trial, and first: a GPU the backend cannot use (refused unless --device cpu).
        unused = api.check_gpu_use(profile, settings)
        if unused is not None:
            print(f"mptune: note: tuning on the CPU as --device cpu asks. {unused.sentence}",
                  file=sys.stderr)  # fmt: skip
    progress = TuneProgress()
    try:
        with progress:
            request = api.TuneRequest(
                model if stored is None or given else None,
                space=space,
                settings=settings,
                storage=args.storage,
                study=args.resume or args.study,
                resume=bool(args.resume),
                profile=profile,
                parallel=args.parallel,
                workers=args.workers,
            )
            result = api.tune(request, on_event=progress.on_event, cancel=_STOP)
    except (KeyboardInterrupt, api.TrialCancelled) as stopped:
        stop = _stop_exception(stopped)
        if progress.session:
            print(
                f"mptune: {_stopped(stop)}; finished trials are kept in session {progress.session} "
                f"(continue with: mptune tune --resume {progress.session}"
                + (f" --storage {api.redact_url(args.storage)}" if args.storage else "")
                + ")",
                file=sys.stderr,
            )
            return _interrupted_exit(stop)
        raise stop from None
    return _print_tuned(args, result)


def _space_and_settings(
    args: argparse.Namespace,
    stored: api.SessionView | None,
    source: api.ModelSource,
    profile: api.HardwareProfile,
) -> tuple[api.SearchSpace, api.SearchSettings]:
    """The search space and settings ``mptune tune``'s flags ask for.

    A continued session keeps its own space and settings; flags given now are checked against
    them by tune(), which refuses a change that would mix incomparable trials.

    Raises:
        MptuneError: a flag's value the space or the settings refuse.
    """
    given_settings = {
        key: value
        for key, value in {
            "objective": args.objective,
            "max_trials": args.max_trials,
            "budget_minutes": args.budget_minutes,
            "loss_tolerance": args.loss_tolerance,
            "measure_seconds": args.measure_seconds,
            "device": args.device,
            "timeout_s": args.timeout,
        }.items()
        if value is not None
    }
    # The backend: as given; else a continued session keeps its own (a different one given is
    # refused by tune(): trials on two backends do not compare); else KERAS_BACKEND, as Keras.
    if args.backend is not None:
        given_settings["backend"] = args.backend
    elif stored is None:
        given_settings["backend"] = api.backend_from_env()
    given_space: dict[str, Any] = {}
    if args.policies:
        given_space["policies"] = args.policies
    if args.start_batch is not None:
        given_space["start_batch"] = args.start_batch
    if args.global_batch is not None:
        given_space["global_batch"] = args.global_batch
    switches = {
        knob.name: getattr(args, knob.name)
        for knob in api.SWITCHED
        if getattr(args, knob.name, None) is not None
    }
    if stored is None:
        # The user's own batch size, for the recommendation's learning-rate note: the one given,
        # else the model file's BATCH_SIZE. A continued session keeps the one it was given.
        user_batch = args.start_batch if args.start_batch is not None else source.user_batch
        if user_batch is not None:
            given_space["user_batch"] = user_batch
    if args.batch_sizes:
        given_space["batch_sizes"], given_space["refine"] = args.batch_sizes
    if args.loss_scales:
        given_space["loss_scales"] = args.loss_scales
    try:
        base_settings = stored.search_settings() if stored else api.SearchSettings()
        settings = dataclasses.replace(base_settings, **given_settings)
        base_space = (
            stored.search_space()
            if stored
            else api.SearchSpace(policies=api.hardware_prior(profile, settings.device))
        )
        space = dataclasses.replace(base_space, **given_space) if given_space else base_space
        space = space.switched(**switches) if switches else space
    except ValueError as exc:
        raise MptuneError(str(exc)) from None
    return space, settings


def _print_tuned(args: argparse.Namespace, result: api.TuneResult) -> int:
    """The finished search: its trials and recommendation (or JSON), and ``--out``'s file."""
    from tuner.console import output_console, render_recommendation, trials_table

    view = api.open_session(result.session, args.storage)
    if args.json:
        print(json.dumps({**result.recommendation.to_dict(), "session": result.session}, indent=2))
        return _write_out(args.out, view)
    console = output_console()
    console.print(trials_table(view.trials, f"Session {result.session}"))
    console.print(
        f"\nRecommendation ({result.ran} trials run now, {result.recalled} from the "
        "stored session):",
        highlight=False,
    )
    console.print(render_recommendation(result.recommendation), highlight=False, markup=False)
    status = _write_out(args.out, view)
    if args.out and status == EXIT_OK:
        console.print(f"\nTuned config written to {args.out}", highlight=False)
    return status


def _write_out(path: str | None, view: Any) -> int:
    """Write the tuned config after the recommendation is printed; a failure now loses nothing
    (the session keeps it) and says how to export it again."""
    from tuner.console import write_user_file

    if not path:
        return EXIT_OK
    try:
        write_user_file(path, "--out", lambda: api.session_config(view).save(path))
    except MptuneError as exc:
        print(
            f"mptune: error: {exc} (the session keeps the tuned config: mptune export "
            f"{view.name} -o FILE)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return EXIT_OK


def _cmd_worker(args: argparse.Namespace) -> int:
    from tuner.console import TuneProgress

    stored = api.find_session(args.study, args.storage)
    if stored is not None:
        # The session's trials run on its backend: this machine must have it, or every trial
        # it took would crash into the shared session.
        api.check_backend(stored.search_settings().backend)
    progress = TuneProgress()
    try:
        with progress:
            done = api.work(
                api.JoinRequest(args.study, args.storage, device=args.device),
                cancel=_STOP,
                on_event=progress.on_event,
            )
    except (KeyboardInterrupt, api.TrialCancelled) as stopped:
        stop = _stop_exception(stopped)
        print(
            f"mptune: worker {_stopped(stop)}; its running trial goes back to the search",
            file=sys.stderr,
        )
        return _interrupted_exit(stop)
    ran = len(done.ran)
    print(f"mptune: worker ran {ran} trial{'s' if ran != 1 else ''} of session {done.session}; "
          f"{done.reason}")  # fmt: skip
    return EXIT_OK


def _cmd_sessions(args: argparse.Namespace) -> int:
    from tuner.console import output_console, print_sessions

    sessions = api.list_sessions(args.storage)
    if args.json:
        print(json.dumps([s.__dict__ for s in sessions], indent=2))
        return EXIT_OK
    if not sessions:
        print("no stored sessions (run mptune tune)")
        return EXIT_OK
    print_sessions(output_console(), sessions)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from tuner.console import output_console, render_recommendation, trials_table

    session = api.open_session(args.name, args.storage)
    if args.json:
        print(json.dumps(session.to_dict(), indent=2))
        return EXIT_OK
    console = output_console()
    console.print(
        f"Session {session.name}: {session.model}, created {session.created}"
        + (f", measured on {session.hardware_kind}" if session.hardware_kind else ""),
        highlight=False,
    )
    console.print(trials_table(session.trials))
    if session.recommendation:
        console.print("\nRecommendation:")
        console.print(render_recommendation(session.recommendation), highlight=False, markup=False)
    if session.runs:
        console.print("\nRuns of the tuned setup (mptune run):")
        for line in api.run_lines(session.runs):
            console.print(f"  {line}", highlight=False, markup=False)
    elif session.failure is not None:
        failure = session.failure
        trial = f" (trial #{failure.trial})" if failure.trial is not None else ""
        console.print(
            f"\nNo recommendation: the search failed in the model's own code{trial}: "
            f"{failure.message}\nNo setup can run until the model is fixed. Fix "
            f"{session.model}, then continue with mptune tune --resume {session.name}: it "
            "runs the failed trial again with the fixed file and keeps the session's other "
            "trials.",
            highlight=False,
            markup=False,
        )
    else:
        console.print(
            "\nNo recommendation yet: the search did not finish "
            f"(continue with mptune tune --resume {session.name}).",
            highlight=False,
        )
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from tuner.console import write_user_file

    config = api.tuned_config(args.source, args.storage)
    if not args.output:
        sys.stdout.write(api.render_config(config, args.format, args.keras))
        return EXIT_OK
    write_user_file(
        args.output,
        "-o",
        lambda: api.save_export(config, args.output, args.format, args.keras),
        _EXPORT_EXAMPLES[args.format],
    )
    flavour = "" if args.format == "json" else f" for Keras {args.keras}"
    print(f"wrote the {args.format}{flavour} to {args.output}", file=sys.stderr)
    return EXIT_OK


#: A file name for each export format, for the message that asks for one.
_EXPORT_EXAMPLES = {"json": "tuned.json", "snippet": "tuned_snippet.py", "script": "train_tuned.py"}


def _cmd_run(args: argparse.Namespace) -> NoReturn:
    """Become the user's script with the tuned setup applied (``tuner.worker.apply_script``):
    this process is replaced, so the script owns the terminal, its signals and its exit
    status, and nothing of mptune's is left running beside it."""
    config = api.tuned_config(args.config, args.storage)
    source = api.check_model(api.ScriptCommand(args.script, args.script_args, args.fit_call).spec)
    assert source.path is not None
    backend = config.setup.backend
    told = os.environ.get("KERAS_BACKEND")
    if told and told != backend:
        print(f"mptune: note: the config was tuned on {backend}: KERAS_BACKEND={told} is set "
              f"to {backend} for the script", file=sys.stderr)  # fmt: skip
    api.check_backend(backend)
    for note in api.config_notes(config):
        print(f"mptune: note: {note}", file=sys.stderr)
    setup = json.dumps(config.setup.to_dict())
    # What the run reports back to: the session it was tuned in keeps what the real fit
    # achieved beside the figure it was tuned at.
    context = json.dumps(
        {
            "session": config.session,
            "storage": args.storage,
            "tuned": config.evidence.samples_per_second,
        }
    )
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        api.RUN_SETUP_VARIABLE: setup,
        api.RUN_CONTEXT_VARIABLE: context,
    }
    command = [sys.executable, "-m", "tuner.worker.apply_script", str(args.fit_call)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [*command, source.path, *args.script_args], env)


def _cmd_gui(args: argparse.Namespace) -> int:
    try:
        from app.main import run
    except ImportError as exc:
        raise MptuneError(f"the desktop application needs PySide6 and pyqtgraph: {exc}") from None
    return run()


def _stopped(exc: KeyboardInterrupt) -> str:
    return f"stopped by {exc.name}" if isinstance(exc, Terminated) else "interrupted"


def _interrupted_exit(exc: KeyboardInterrupt) -> int:
    return exc.exit_code if isinstance(exc, Terminated) else EXIT_INTERRUPTED


#: Set by a stop signal (Ctrl-C, SIGTERM, SIGHUP) and handed to the search and the trial as
#: their cancel event (see :class:`~tuner.errors.StopRequest` for why a signal does not raise).
_STOP = StopRequest()


def _on_stop_signal(signum: int, frame: Any) -> None:
    """The first stop signal asks the trial and the search to stop; a second one raises at
    once, wherever the process is (a stop that hangs)."""
    exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    again = _STOP.is_set()
    _STOP.stop(exc)
    if again:
        raise exc


def _stop_exception(exc: BaseException) -> KeyboardInterrupt:
    """What stopped mptune: ``exc`` itself, or for a trial cancelled by :data:`_STOP` the
    signal that set it."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    return _STOP.by or KeyboardInterrupt()


def _end_cleanly_on_signals() -> None:
    """SIGTERM and SIGHUP end mptune the way Ctrl-C does (the worker killed, the running trial
    closed in the store) instead of leaving that to the next run, and every stop signal also
    sets :data:`_STOP`. A signal the caller set to be ignored (``nohup``) stays ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _on_stop_signal)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console script exits with it). What it prints
    names the settings the engine speaks of as its flags (:func:`console.worded_streams`)."""
    from tuner.console import worded_streams

    with worded_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # What follows -- is a training script's own command line (tune/trial --script, run): kept
    # from argparse, which would read it as mptune's.
    cut = words.index("--") if "--" in words else len(words)
    args = parser.parse_args(words[:cut])
    args.script_args = tuple(words[cut + 1 :])
    if args.script_args and not hasattr(args, "fit_call"):
        parser.error(f"arguments after -- are a training script's: {args.command} takes none")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="mptune: %(levelname)s: %(message)s",
    )
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_OK
    _STOP.reset()
    if args.command in ("trial", "tune") and threading.current_thread() is threading.main_thread():
        _end_cleanly_on_signals()
    try:
        return int(args.handler(args))
    except MptuneError as exc:
        print(f"mptune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, api.TrialCancelled) as stopped:
        stop = _stop_exception(stopped)
        print(f"mptune: {_stopped(stop)}", file=sys.stderr)
        return _interrupted_exit(stop)
    except Exception as exc:
        if args.verbose:
            raise
        print(
            f"mptune: internal error: {type(exc).__name__}: {exc} "
            "(run with --verbose for the traceback)",
            file=sys.stderr,
        )
        return EXIT_TRIAL_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
