"""``mptune tune`` as a function: hardware, prior, session, search, recommendation."""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tuner.errors import MptuneError
from tuner.hardware.advice import advise
from tuner.hardware.gpu_use import unused_gpu
from tuner.hardware.profile import CpuInfo, HardwareProfile
from tuner.policies import FLOAT32, KNOWN_POLICIES
from tuner.said import setting
from tuner.search.evaluator import Evaluator, Slot, StartAhead
from tuner.search.events import Recommended, SearchEvent, SessionOpened
from tuner.search.lease import Heartbeat, Lease
from tuner.search.measures import SearchOutcome
from tuner.search.owned import same_hardware, same_model_file
from tuner.search.recommend import Recommendation, recommend
from tuner.search.records import ModelFailed
from tuner.search.request import TuneRequest
from tuner.search.session import SessionView, TuningSession, needs_server
from tuner.search.space import DeviceTraits, SearchSettings, SearchSpace
from tuner.search.storage import storage_errors
from tuner.search.strategy import Search
from tuner.setup import TF32
from tuner.trials.models import ModelSource, ScriptCommand, parse_model_spec
from tuner.trials.observe import ObserveFailed, observe_script
from tuner.trials.protocol import TrialRunner
from tuner.trials.runner import WorkerPool, run_trial


@dataclass(frozen=True)
class TuneResult:
    """What ``tune`` returns: the session's name, the recommendation and the search outcome."""

    session: str
    recommendation: Recommendation
    outcome: SearchOutcome
    ran: int  #: trials run now
    recalled: int  #: trials taken from the stored session


def default_study_name(model: str) -> str:
    """``<model>-<date>-<time>``, e.g. ``cnn-20261122-170102``."""
    base = model.split(":")[1] if model.startswith("builtin:") else model.rsplit("/", 1)[-1]
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", base.rsplit(".", 1)[0] if "." in base else base)
    return f"{base or 'model'}-{datetime.now():%Y%m%d-%H%M%S}"


def hardware_prior(profile: Any, device: str = "auto") -> tuple[str, ...]:
    """The policies to try, most promising first, from the hardware advice: the GPU's, or the
    CPU's when the trials run on the CPU (``device`` ``cpu``) although there is a GPU."""
    cpu = getattr(profile, "cpu", None)
    if device == "cpu" and getattr(profile, "gpus", None) and isinstance(cpu, CpuInfo):
        return tuple(a.policy for a in advise((), cpu))
    return tuple(a.policy for a in profile.advice)


def refuse_unused_gpu(profile: Any, settings: SearchSettings) -> None:
    """Refuse a new search that would run on the CPU while NVML sees a GPU its backend cannot
    use, unless the CPU was asked for (``device`` ``cpu``): tuned on the CPU, its answer is
    the CPU's, and a GPU left unused without a word is the first-day trap this prevents (a
    plain ``pip install tensorflow`` has no CUDA libraries). ``gpu:N`` is taken at its word:
    should the packages be misread, it is the way past this check.

    Raises:
        MptuneError: one line: what is unused, why, the fix, and ``--device cpu``.
    """
    if settings.device != "auto":
        return
    unused = unused_gpu(profile, settings.backend)
    if unused is None:
        return
    why = f" ({unused.reason})" if unused.reason else ""
    fix = f": fix it with {unused.fix}," if unused.fix else ";"
    raise MptuneError(
        f"{unused.headline}{why}{fix} or tune on the CPU anyway with {setting('device', 'cpu')}"
    )


def refuse_absent_gpu(profile: Any, device: str) -> None:
    """Refuse a GPU asked for by number (``gpu:N``) that NVML does not see, before any trial:
    its trial would fail in the model's stead."""
    gpus = len(getattr(profile, "gpus", ()) or ())
    if device.startswith("gpu:") and int(device.split(":")[1]) >= gpus:
        seen = f"NVML sees {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "NVML sees no GPU"
        raise MptuneError(
            f"{setting('device', device)} asks for a GPU this machine does not have "
            f"({seen} here): leave out {setting('device')} or tune on the CPU with "
            f"{setting('device', 'cpu')}"
        )


def memory_budget_mb(profile: Any, device: str, headroom: float) -> float | None:
    """The device's memory less the headroom: the GPU's for a GPU, RAM for a CPU."""
    gpus = list(getattr(profile, "gpus", ()) or ())
    if device != "cpu" and gpus:
        index = int(device.split(":")[1]) if device.startswith("gpu:") else 0
        gpu = next((g for g in gpus if g.index == index), gpus[0])
        total = gpu.memory_total_mb
    else:
        total = getattr(profile.cpu, "ram_total_mb", None)
    return total * (1 - headroom) if total else None


def refuse_unfit_batches(
    source: ModelSource, space: SearchSpace, profile: Any, settings: SearchSettings
) -> None:
    """Refuse batch sizes whose synthetic data alone cannot fit the memory a trial may use (a
    built-in's: a user's model's inputs are known only once it is built). The worker makes at
    least one batch of it in RAM, and on a GPU each batch goes to the GPU's memory: each less
    the settings' headroom. Such a trial would run out of memory, or swap until its time
    limit, whatever the setup.

    Raises:
        MptuneError: one line: the batch size, its data, the memory, and the largest batch
            size whose data fits.
    """
    per_sample = source.data_bytes_per_sample
    if per_sample is None:
        return
    headroom = settings.memory_headroom
    limits = [(memory_budget_mb(profile, "cpu", headroom), "RAM")]
    if DeviceTraits.from_profile(profile, settings.device).gpu:
        limits.append((memory_budget_mb(profile, settings.device, headroom), "the GPU's memory"))
    largest = max(space.batch_sizes)
    for limit_mb, memory in limits:
        if limit_mb is None or largest * per_sample <= limit_mb * 2**20:
            continue
        fits = int(limit_mb * 2**20) // per_sample
        largest_fit = f"the largest that fits is {fits:,}" if fits else "not one sample fits"
        raise MptuneError(
            f"batch size {largest:,} cannot fit: its synthetic data alone takes "
            f"{_binary_size(largest * per_sample)} ({per_sample:,} bytes a sample), more than "
            f"the {_binary_size(limit_mb * 2**20)} a trial may use here ({memory} less the "
            f"{headroom:.0%} headroom); {largest_fit}"
        )


def _binary_size(size: float) -> str:
    """``size`` bytes in the largest binary unit under it, to 3 figures: ``4 TiB``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = 2 ** (10 * ("KMGT".index(unit[0]) + 1))
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} bytes"


def parallel_devices(
    parallel: int | str, profile: Any, device: str
) -> tuple[list[str | None], str | None]:
    """The device of each slot for ``--parallel`` (None: the settings' own device), and what to
    tell the user about it (None: nothing).

    ``auto`` is one slot a GPU of the searched GPU's model (its first GPU, or
    ``--device gpu:N``'s), and one on a CPU; a number is at most that many GPUs. On a CPU a
    number above one runs that many trials side by side, sharing the cores, with a warning.

    Raises:
        MptuneError: ``parallel`` is not ``auto`` or a whole number of at least 1, or more than
            one trial at once is asked for with every trial pinned to one GPU.
    """
    wrong = f"{setting('parallel')} takes a whole number of 1 or more, or auto; got {parallel!r}"
    if isinstance(parallel, str) and parallel != "auto":
        if not parallel.strip().isdigit():
            raise MptuneError(wrong)
        parallel = int(parallel)
    if isinstance(parallel, int) and parallel < 1:
        raise MptuneError(wrong)
    gpus = list(getattr(profile, "gpus", ()) or ())
    if device == "cpu" or not gpus:
        if parallel == "auto" or parallel == 1:
            return [None], None
        return [None] * int(parallel), (
            f"{parallel} trials ran at once on the CPU, sharing its cores: each one's figures "
            "are slowed by the others, so they check the search, not measure it "
            f"({setting('parallel', 'auto')} runs one at a time on a CPU)"
        )
    if device.startswith("gpu:"):
        if parallel not in ("auto", 1):
            raise MptuneError(
                f"{setting('parallel', parallel)} runs one trial a GPU, and "
                f"{setting('device', device)} pins every trial to one: leave out "
                f"{setting('device')} to use each GPU of its model"
            )
        return [None], None
    model = gpus[0].name
    same = [g for g in gpus if g.name == model]
    n = len(same) if parallel == "auto" else min(int(parallel), len(same))
    note = None
    if parallel != "auto" and int(parallel) > len(same):
        note = (
            f"{setting('parallel', parallel)}: this machine has {len(same)} {model} GPU"
            f"{'s' if len(same) > 1 else ''}, and trials compare only on one model: ran {n} at "
            "once"
        )
    if n == 1:
        return [None], note
    return [f"gpu:{g.index}" for g in same[:n]], note


def tune(
    request: TuneRequest,
    *,
    on_event: Callable[[SearchEvent], None] | None = None,
    cancel: threading.Event | None = None,
    runner: TrialRunner = run_trial,
    clock: Callable[[], float] = time.monotonic,
) -> TuneResult:
    """Search for the best setup of ``request.model`` on this machine, storing every trial
    (:class:`~tuner.search.request.TuneRequest` says what it holds).

    Args:
        request: what to search and where.
        on_event: called with each :mod:`~tuner.search.events` record, on this thread.
        cancel: set it to stop the running trial and end the search.
        runner: runs one trial; by default a :class:`~tuner.trials.runner.WorkerPool` (a warm
            worker per policy, the first ones started ahead side by side, all ended with the
            search); a runner with ``start_ahead(specs, cancel)`` is asked to start ahead.
        clock: the search's clock (a replay of a GPU's trials passes a simulated one,
            :class:`tuner.trials.lookup.SimClock`).

    Raises:
        MptuneError: bad model spec, unreachable storage, a model that fails in its own code,
            a continued session given another model or space, a session another search holds.
        NoViableSetup: every setup failed.
        TrialCancelled / KeyboardInterrupt: stopped; finished trials stay stored.
    """
    storage, study, resume = request.storage, request.study, request.resume
    if resume and not study:
        raise MptuneError("resuming needs the session's name")
    plan = _resolve(request)
    if runner is run_trial and plan.stored is None and plan.source.kind == "script":
        plan = dataclasses.replace(plan, space=_as_observed(plan, cancel))
    devices, parallel_note = parallel_devices(request.parallel, plan.profile, plan.settings.device)
    if plan.source.distributed and len(devices) > 1:
        # A script that distributes its own training (a tf.distribute strategy, a
        # keras.distribution) spans the GPUs it sees: each trial takes them all, one at a time,
        # never one GPU a slot (issue 49).
        devices = [None]
        parallel_note = (
            f"{os.path.basename(plan.source.path or plan.source.name)} distributes its training "
            "over the GPUs it sees: its trials took them all, one trial at a time"
        )
    session, lease = _open(plan, storage, study, resume)
    pools, slots, runner, start_ahead = _slots(runner, devices, len(plan.space.policies) + 1)
    emit = on_event or (lambda event: None)
    try:
        with storage_errors(storage), Heartbeat(session.storage, lease) as heartbeat:
            evaluator = Evaluator(
                session,
                plan.source,
                plan.settings,
                emit,
                cancel,
                runner,
                plan.memory_budget_mb,
                heartbeat=heartbeat,
                start_ahead=start_ahead,
                slots=slots,
                shared=request.workers,
                clock=clock,
                on_gpu=plan.device.gpu,
            )
            outcome, rec = _search(plan, session, evaluator, parallel_note)
    finally:
        for each in pools:
            each.close()  # no warm worker outlives its search
        lease.release()
    emit(Recommended(rec))
    return TuneResult(session.name, rec, outcome, evaluator.ran, evaluator.recalled)


def _search(
    plan: _Plan, session: TuningSession, evaluator: Evaluator, note: str | None
) -> tuple[SearchOutcome, Recommendation]:
    """Run the search in its open session and store its recommendation; a search that ends in
    the model's own error is recorded as the session's failure, until a search runs again."""
    if plan.stored is not None and plan.stored.search_settings() != plan.settings:
        session.set_attr("settings", plan.settings.to_dict())  # the new budgets
    session.fail_orphans()
    if session.attrs.get("failure"):
        session.set_attr("failure", None)  # the model may be fixed: this search says anew
    evaluator.on_event(SessionOpened(session.name, plan.model, resumed=bool(session.trials())))
    search = Search(evaluator, plan.space, plan.settings, device=plan.device)
    if note:
        search.note(note)
    try:
        outcome = search.run()
    except ModelFailed as failed:
        session.set_attr("failure", failed.failure.to_dict())
        raise ModelFailed(
            f"{failed}; the session {session.name} keeps its trials: fix the model, then "
            f"continue with {setting('resume', session.name)}",
            failed.failure,
        ) from None
    rec = recommend(outcome, plan.space, plan.settings, plan.profile.to_dict())
    session.set_attr("recommendation", rec.to_dict())
    return outcome, rec


@dataclass(frozen=True)
class _Plan:
    """What a search runs on, once the arguments and the stored session agree."""

    model: str
    source: ModelSource
    space: SearchSpace
    settings: SearchSettings
    profile: HardwareProfile
    stored: SessionView | None
    #: the model file changed since a continued session measured it, and may (a fixed one)
    renew_digest: bool = False

    @property
    def device(self) -> DeviceTraits:
        """What the trials run on, as the search needs to know it."""
        return DeviceTraits.from_profile(self.profile, self.settings.device)

    @property
    def memory_budget_mb(self) -> float | None:
        """The device's memory less the settings' headroom."""
        return memory_budget_mb(self.profile, self.settings.device, self.settings.memory_headroom)


def _resolve(request: TuneRequest) -> _Plan:
    """The model, space, settings and hardware of the search: the stored session's when it is
    continued (refusing others), else the request's with the defaults filled in. The model
    spec is parsed once."""
    stored = stored_session(request.study, request.storage)
    if request.resume and stored is None:
        raise MptuneError(f"no session named {request.study!r} to resume (see mptune sessions)")
    space, settings, profile = request.space, request.settings, request.profile
    # A model file is known by its absolute path: the session, its exports and a resumed search
    # must find it from any working directory.
    given = _absolute(parse_model_spec(request.model)) if request.model is not None else None
    if stored is not None:
        given, space, settings = _continue(stored, given, space, settings)
    if given is None:
        raise MptuneError(f"no model given (a new search needs {setting('model')})")
    source, model = given, given.spec
    if profile is None:
        from tuner.hardware import detect

        profile = detect()
    settings = settings or SearchSettings()
    renew = False
    if stored is not None:
        same_hardware(stored, profile, settings.device)
        renew = same_model_file(stored, source, joining=False)
    else:
        # A continued session keeps the device it was measured on; a new one must not start
        # on the CPU by accident.
        refuse_absent_gpu(profile, settings.device)
        refuse_unused_gpu(profile, settings)
    if request.workers:
        needs_server(request.storage)
    space = space or SearchSpace(policies=hardware_prior(profile, settings.device))
    # Before any trial: values no trial can work with are refused, not run until they fail.
    try:
        settings.check_workable()
    except ValueError as exc:
        raise MptuneError(str(exc)) from None
    refuse_unfit_batches(source, space, profile, settings)
    if stored is None and space.user_batch is None and source.user_batch is not None:
        # The batch size the model file trains with (its BATCH_SIZE), for the recommendation's
        # learning-rate note; every face gets it, not only the command line.
        space = dataclasses.replace(space, user_batch=source.user_batch)
    if stored is None and source.user_policy in KNOWN_POLICIES and space.user_policy is None:
        # The precision a training script sets itself (issue 49): what the user runs today, so
        # it is searched and the speed-up is stated against it.
        space = dataclasses.replace(
            space,
            user_policy=source.user_policy,
            user_policy_at=source.user_policy_at,
            policies=space.policies
            if source.user_policy in space.policies
            else (*space.policies, source.user_policy),
        )
    return _Plan(model, source, space, settings, profile, stored, renew)


def _as_observed(plan: _Plan, cancel: threading.Event | None) -> SearchSpace:
    """The space of a script search with what the script's ``fit`` trains today, observed
    (:func:`~tuner.trials.observe.observe_script`): its setup is the baseline, trial #0; its
    batch size is where the ladders start and the batch it keeps (with its accumulation, the
    global batch, unless one was asked for); its precision is searched. Where it cannot be
    read or run, the space as it was (the first trial then fails as the script does, or
    float32 is the reference, said in the notes)."""
    space, settings = plan.space, plan.settings
    try:
        seen = observe_script(plan.source, settings.backend, settings.device, settings.seed, cancel)
    except ObserveFailed:
        return space  # the first trial meets the same failure, and says it as a trial does
    if seen.setup is None:
        return dataclasses.replace(space, user_setup_words=seen.words())
    own = seen.setup
    if own.policy == FLOAT32 and plan.device.default_precision(settings.backend) == TF32:
        own = own.replace(tf32=True)  # its float32 runs as TF32 by default on this device
    policy = own.policy.name
    accumulated = own.batch_size * own.gradient_accumulation_steps
    global_batch = space.global_batch
    if global_batch is None and own.gradient_accumulation_steps > 1:
        global_batch = accumulated  # the samples per update it trains with: kept
    return dataclasses.replace(
        space,
        policies=space.policies if policy in space.policies else (*space.policies, policy),
        batch_sizes=tuple(sorted({*space.batch_sizes, own.batch_size})),
        start_batch=own.batch_size if global_batch is None else global_batch,
        global_batch=global_batch,
        user_batch=accumulated,
        user_policy=policy,
        user_policy_at=seen.at.get("policy"),
        user_setup=own,
        user_setup_words=seen.words(),
    )


def _open(
    plan: _Plan, storage: str | None, study: str | None, resume: bool
) -> tuple[TuningSession, Lease]:
    """The search's session, created or continued, and its lease, held."""
    with storage_errors(storage):
        session = TuningSession.create(
            study or default_study_name(plan.model),
            storage,
            {
                "model": plan.model,
                "space": plan.space.to_dict(),
                "settings": plan.settings.to_dict(),
                "hardware": plan.profile.to_dict(),
                "model_digest": plan.source.digest,
            },
            resume=resume,
        )
        if plan.renew_digest:
            session.set_attr("model_digest", plan.source.digest)
        lease = Lease(session.storage, session.name)
        lease.acquire()
    return session, lease


def _slots(
    runner: TrialRunner, devices: list[str | None], precisions: int
) -> tuple[list[WorkerPool], list[Slot], TrialRunner, StartAhead | None]:
    """Where the trials run: with the default runner, a worker pool per device (closed when the
    search ends), each keeping a waiting worker per precision the search measures (its
    policies, and TF32 beside float32: ``precisions``), so that going from policy to policy
    and back starts none anew; the slots, the runner of the first and what starts workers
    ahead."""
    if runner is not run_trial:
        slots = [Slot(runner, device) for device in devices]
        return [], slots, runner, getattr(runner, "start_ahead", None)
    pools = [WorkerPool(max_idle=max(3, precisions)) for _ in devices]
    slots = [Slot(pool.run, device) for pool, device in zip(pools, devices, strict=True)]
    return pools, slots, pools[0].run, pools[0].start_ahead


def stored_session(study: str | None, storage: str | None) -> SessionView | None:
    """The stored session called ``study``, read whole; None when there is none (or no name)."""
    session = TuningSession.find(study, storage) if study else None
    if session is None:
        return None
    with storage_errors(storage):
        return session.view()


def _absolute(source: ModelSource) -> ModelSource:
    """``source`` known by its absolute path, where it is a file (a script with its
    arguments)."""
    if source.kind == "script" and source.path:
        return dataclasses.replace(
            source, spec=ScriptCommand(source.path, source.args, source.fit_call).spec
        )
    return dataclasses.replace(source, spec=source.path) if source.path else source


def _continue(
    stored: SessionView,
    given: ModelSource | None,
    space: SearchSpace | None,
    settings: SearchSettings | None,
) -> tuple[ModelSource, SearchSpace, SearchSettings]:
    """The model, space and settings of a continued session; refuses a different one."""
    mine = stored.model
    if given is not None and given.spec != mine:
        raise MptuneError(
            f"session {stored.name!r} tunes {mine}, not {given.spec}: one session holds one "
            f"model's trials. Leave out {setting('model')} to continue it, or give another "
            f"{setting('study')} to start a new session"
        )
    kept_space = stored.search_space()
    if space is not None and space != kept_space:
        raise MptuneError(
            f"session {stored.name!r} was searched over another space "
            f"({'; '.join(kept_space.differences(space))}): continue it without those settings, "
            f"or give another {setting('study')}"
        )
    kept = stored.search_settings()
    if settings is not None:
        changed = kept.differences(settings, ignore=SearchSettings.BUDGET_FIELDS)
        if changed:
            raise MptuneError(
                f"session {stored.name!r} was measured with other settings "
                f"({'; '.join(changed)}): its trials would not compare. Continue it without "
                f"those settings, or give another {setting('study')}"
            )
        kept = settings
    return given or _absolute(parse_model_spec(mine)), kept_space, kept
