"""The engine's one face: what the command line and the window may call.

The CLI (:mod:`tuner.cli`, :mod:`tuner.console`) and the desktop application (``app/``) use the
engine through this module and the value types it returns, nothing deeper; an import-linter
contract in pyproject.toml says so. Everything here is safe to call from any thread; the calls
that touch storage, files or the network (sessions, export, model checks) are blocking, so the
window runs them off its GUI thread (``app/controller.py``).

Importing this module is cheap (no TensorFlow, no Optuna, no Jinja2): the types that need them
load on first use, so ``mptune detect`` stays fast.

Typical use::

    from tuner import api

    profile = api.detect()
    result = api.tune("builtin:cnn", on_event=print)
    view = api.open_session(result.session)
    print(api.render_config(api.session_config(view), "snippet"))
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner import said
from tuner.errors import MptuneError
from tuner.policies import (
    BACKENDS,
    BFLOAT16,
    FLOAT16,
    FLOAT32,
    FULL_HALF,
    KNOWN_POLICIES,
    MIXED_BFLOAT16,
    MIXED_FLOAT16,
    POLICIES,
    TENSORFLOW,
)
from tuner.search.events import (
    LeaderChanged,
    PlanUpdated,
    Recommended,
    SearchEvent,
    SessionOpened,
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkerReported,
    minutes,
)
from tuner.search.measures import TrialGap, figure_notes, trial_loss_gaps
from tuner.search.request import JoinRequest, TuneRequest
from tuner.search.space import (
    DEFAULT_LOSS_SCALES,
    OBJECTIVES,
    XLA_MODES,
    SearchSettings,
    SearchSpace,
    ladder_range,
    parse_batch_sizes,
    parse_loss_scales,
    parse_policies,
)
from tuner.search.stage import Stage
from tuner.setup import (
    BACKEND_NAMES,
    KNOBS,
    SWITCH_MODES,
    SWITCHED,
    Knob,
    LossScale,
    Policy,
    Setup,
)
from tuner.trials.events import PHASES
from tuner.trials.hazards import Hazard
from tuner.trials.messages import (
    ErrorMessage,
    HazardMessage,
    ImportedMessage,
    MemoryMessage,
    NumericsMessage,
    OtherMessage,
    PhaseMessage,
    ReadyMessage,
    ResultMessage,
    StartedMessage,
    StepMessage,
    WarningMessage,
    WorkerMessage,
    parse_message,
)
from tuner.trials.models import (
    BUILTINS,
    RUN_CONTEXT_VARIABLE,
    RUN_SETUP_VARIABLE,
    ModelSource,
    ScriptCommand,
)
from tuner.trials.process import TrialCancelled
from tuner.trials.protocol import TrialRunner
from tuner.trials.result import InputRate, Timings, TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

if TYPE_CHECKING:
    from tuner.export import FORMATS, ConfigError, TunedConfig
    from tuner.export.apply import config_notes
    from tuner.hardware import HardwareProfile
    from tuner.hardware.gpu_use import UnusedGpu
    from tuner.hardware.nvml import FakeNvmlBackend, NvmlBackend, NvmlUnavailable
    from tuner.hardware.profile import INSTALL_HINTS as BACKEND_INSTALL_HINTS
    from tuner.hardware.profile import CpuInfo, GpuInfo, SoftwareInfo
    from tuner.hardware.report import AdviceRow
    from tuner.search.fleet import WorkDone, work
    from tuner.search.measured import PolicyMeasured
    from tuner.search.recommend import Alternative, NoViableSetup, Recommendation, evidence_rows
    from tuner.search.records import SessionFailure
    from tuner.search.session import SessionSummary, SessionView, StoredTrial, stored_result
    from tuner.search.tune import TuneResult, tune
    from tuner.search.wording import run_lines

__all__ = [
    "BACKENDS",
    "BACKEND_INSTALL_HINTS",
    "BACKEND_NAMES",
    "BFLOAT16",
    "BUILTINS",
    "DEFAULT_LOSS_SCALES",
    "FLOAT16",
    "FLOAT32",
    "FORMATS",
    "FULL_HALF",
    "KNOBS",
    "KNOWN_POLICIES",
    "MIXED_BFLOAT16",
    "MIXED_FLOAT16",
    "OBJECTIVES",
    "PHASES",
    "POLICIES",
    "RUN_CONTEXT_VARIABLE",
    "RUN_SETUP_VARIABLE",
    "SWITCHED",
    "SWITCH_MODES",
    "TENSORFLOW",
    "XLA_MODES",
    "AdviceRow",
    "Alternative",
    "ConfigError",
    "CpuInfo",
    "ErrorMessage",
    "FakeNvmlBackend",
    "GpuInfo",
    "HardwareProfile",
    "Hazard",
    "HazardMessage",
    "ImportedMessage",
    "InputRate",
    "JoinRequest",
    "Knob",
    "LeaderChanged",
    "LossScale",
    "MemoryMessage",
    "ModelSource",
    "MptuneError",
    "NoViableSetup",
    "NumericsMessage",
    "NvmlBackend",
    "NvmlUnavailable",
    "OtherMessage",
    "PhaseMessage",
    "PlanUpdated",
    "Policy",
    "PolicyMeasured",
    "ReadyMessage",
    "Recommendation",
    "Recommended",
    "ResultMessage",
    "ScriptCommand",
    "SearchEvent",
    "SearchSettings",
    "SearchSpace",
    "SessionFailure",
    "SessionOpened",
    "SessionSummary",
    "SessionView",
    "Setup",
    "SoftwareInfo",
    "Stage",
    "StageStarted",
    "StartedMessage",
    "StepMessage",
    "StoredTrial",
    "Timings",
    "TrialCancelled",
    "TrialFinished",
    "TrialGap",
    "TrialResult",
    "TrialRunner",
    "TrialSpec",
    "TrialStarted",
    "TrialStatus",
    "TuneRequest",
    "TuneResult",
    "TunedConfig",
    "UnusedGpu",
    "WarningMessage",
    "WorkDone",
    "WorkerMessage",
    "WorkerReported",
    "advice_heading",
    "advice_rows",
    "backend_from_env",
    "check_backend",
    "check_gpu_use",
    "check_model",
    "config_notes",
    "default_storage_url",
    "detect",
    "event_from_dict",
    "evidence_rows",
    "figure_notes",
    "hardware_prior",
    "installed_backends",
    "kill_all_workers",
    "ladder_range",
    "list_sessions",
    "memory_budget_mb",
    "minutes",
    "nvml_backend_from_env",
    "open_session",
    "parse_batch_sizes",
    "parse_loss_scales",
    "parse_message",
    "parse_policies",
    "record_run",
    "redact_url",
    "render_config",
    "render_hardware",
    "run_lines",
    "run_trial",
    "said",
    "save_export",
    "session_config",
    "stored_result",
    "trial_loss_gaps",
    "tune",
    "tuned_config",
    "unused_gpu",
    "work",
]

#: Names served on first use (PEP 562) from the module that defines them, so that importing
#: the face does not import Optuna, Jinja2 or pynvml.
_LAZY = {
    "BACKEND_INSTALL_HINTS": "tuner.hardware.profile",
    "FORMATS": "tuner.export",
    "ConfigError": "tuner.export",
    "TunedConfig": "tuner.export",
    "config_notes": "tuner.export.apply",
    "HardwareProfile": "tuner.hardware",
    "UnusedGpu": "tuner.hardware.gpu_use",
    "CpuInfo": "tuner.hardware.profile",
    "GpuInfo": "tuner.hardware.profile",
    "SoftwareInfo": "tuner.hardware.profile",
    "FakeNvmlBackend": "tuner.hardware.nvml",
    "NvmlBackend": "tuner.hardware.nvml",
    "NvmlUnavailable": "tuner.hardware.nvml",
    "AdviceRow": "tuner.hardware.report",
    "PolicyMeasured": "tuner.search.measured",
    "Alternative": "tuner.search.recommend",
    "NoViableSetup": "tuner.search.recommend",
    "Recommendation": "tuner.search.recommend",
    "evidence_rows": "tuner.search.recommend",
    "SessionFailure": "tuner.search.records",
    "SessionSummary": "tuner.search.session",
    "SessionView": "tuner.search.session",
    "StoredTrial": "tuner.search.session",
    "stored_result": "tuner.search.session",
    "run_lines": "tuner.search.wording",
    "TuneResult": "tuner.search.tune",
    # The search itself (issue 36: re-exported, not restated); it takes a TuneRequest.
    "tune": "tuner.search.tune",
    "work": "tuner.search.fleet",
    "WorkDone": "tuner.search.fleet",
}


#: Names whose defining module calls them otherwise.
_RENAMED = {"BACKEND_INSTALL_HINTS": "INSTALL_HINTS"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), _RENAMED.get(name, name))


# -- the machine ----------------------------------------------------------------------------
def detect(backend: NvmlBackend | None = None) -> HardwareProfile:
    """Read the GPUs (NVML), the CPU and the software; never imports TensorFlow.

    Args:
        backend: an NVML backend; ``None`` is the real one (or ``MPTUNE_FAKE_NVML``'s scripted
            one).
    """
    from tuner.hardware import detect as _detect

    return _detect(backend)


def render_hardware(
    profile: HardwareProfile,
    backend: str = TENSORFLOW,
    measured: dict[str, PolicyMeasured] | None = None,
) -> str:
    """``profile`` as the text ``mptune detect`` prints, its verdict for trials on
    ``backend``, each policy's advice with what was ``measured`` of it here."""
    from tuner.hardware.report import render_text

    return render_text(profile, backend, measured)


def advice_rows(
    profile: HardwareProfile, measured: dict[str, PolicyMeasured] | None = None
) -> list[AdviceRow]:
    """The hardware advice as ``mptune detect`` lists it: each policy with its reason and what
    was ``measured`` of it here (:func:`measured_here`), measured ones first, fastest first."""
    from tuner.hardware.report import advice_rows as _rows

    return _rows(profile, measured)


def advice_heading(measured: dict[str, PolicyMeasured] | None = None) -> str:
    """The advice list's heading, as ``mptune detect`` prints it (without its colon)."""
    from tuner.hardware.report import advice_heading as _heading

    return _heading(measured)


def measured_here(
    profile: HardwareProfile, storage: str | None = None
) -> dict[str, PolicyMeasured]:
    """Per policy, what the finished sessions of this kind of machine measured of it against
    float32 (empty where there are none, or the store cannot be read)."""
    from tuner.search.measured import measured_here as measured

    return measured(profile, storage)


def unused_gpu(profile: HardwareProfile, backend: str) -> UnusedGpu | None:
    """Whether NVML sees NVIDIA GPUs on ``profile`` that ``backend`` cannot use (its trials
    would run on the CPU), known from the installed packages: the finding, with its reason and
    the command that fixes it; ``None`` when there is no GPU or nothing known stops the
    backend. Reads no framework."""
    from tuner.hardware.gpu_use import unused_gpu as _unused

    return _unused(profile, backend)


def nvml_backend_from_env() -> NvmlBackend:
    """The NVML backend to sample with: ``MPTUNE_FAKE_NVML``'s scripted GPUs, or the real one."""
    from tuner.hardware.nvml import backend_from_env

    return backend_from_env()


def installed_backends() -> dict[str, str | None]:
    """Each Keras 3 backend (:data:`BACKENDS`) and its installed version, ``None`` where it is
    not installed; read from the packages' metadata without importing any of them."""
    from tuner.hardware.software import read_backends

    return read_backends()


def check_backend(name: str) -> str:
    """``name``'s installed version, checked before a trial or search runs on it.

    Raises:
        MptuneError: one line: ``name`` is no backend, or it is not installed here (with the
            command that installs it: ``pip install 'mptune[jax]'``).
    """
    from tuner.hardware.software import check_backend as _check

    try:
        return _check(name)
    except ValueError as exc:
        raise MptuneError(str(exc)) from None


def backend_from_env(environ: dict[str, str] | None = None) -> str:
    """The backend chosen by ``KERAS_BACKEND`` (as Keras reads it) when it is set, else
    TensorFlow, Keras' own default.

    Raises:
        MptuneError: ``KERAS_BACKEND`` names a backend mptune does not tune (Keras' ``numpy``
            or ``openvino``, a typo).
    """
    value = (os.environ if environ is None else environ).get("KERAS_BACKEND", "").strip()
    if not value:
        return TENSORFLOW
    if value not in BACKENDS:
        raise MptuneError(
            f"KERAS_BACKEND={value!r} (from the environment) is not a backend mptune tunes "
            f"({', '.join(BACKENDS)}): give {said.setting('backend')}, or unset KERAS_BACKEND"
        )
    return value


def check_gpu_use(profile: HardwareProfile, settings: SearchSettings) -> UnusedGpu | None:
    """Before a new search: whether NVML sees a GPU the search's backend cannot use.

    Returns:
        The finding when the search runs on the CPU as asked (``device`` ``cpu``), for the
        face to say at its top; ``None`` when no GPU goes unused, or ``gpu:N`` was asked for.

    Raises:
        MptuneError: on the default device (``auto``): one line with what is unused, why, the
            fix, and ``--device cpu`` to tune on the CPU anyway (:func:`tune` refuses the same).
    """
    from tuner.search.tune import refuse_unused_gpu

    refuse_unused_gpu(profile, settings)
    return unused_gpu(profile, settings.backend) if settings.device == "cpu" else None


def hardware_prior(profile: HardwareProfile, device: str = "auto") -> tuple[str, ...]:
    """The policies worth trying on ``profile``'s ``device``, most promising first (``cpu``:
    the CPU's advice, even where there is a GPU)."""
    from tuner.search.tune import hardware_prior as _prior

    return _prior(profile, device)


def memory_budget_mb(
    profile: HardwareProfile, device: str = "auto", headroom: float | None = None
) -> float | None:
    """The memory a search may use on ``device``: its memory less the headroom (the search
    settings' default when ``None``)."""
    from tuner.search.tune import memory_budget_mb as _budget

    if headroom is None:
        headroom = SearchSettings().memory_headroom
    return _budget(profile, device, headroom)


# -- models and trials ----------------------------------------------------------------------
def check_model(spec: str) -> ModelSource:
    """Parse a model spec and check a model file without running it (syntax, ``build_model``).

    Raises:
        MptuneError: naming the problem (and the file and line).
    """
    from tuner.trials.models import parse_model_spec

    return parse_model_spec(spec)


def run_trial(
    spec: TrialSpec,
    on_event: Callable[[WorkerMessage], None] | None = None,
    *,
    cancel: threading.Event | None = None,
) -> TrialResult:
    """Run one trial in a worker process; see :func:`tuner.trials.runner.run_trial`."""
    from tuner.trials.runner import run_trial as _run

    return _run(spec, on_event, cancel=cancel)


def kill_all_workers() -> int:
    """End every trial worker this process runs, now (their trials end cancelled)."""
    from tuner.trials.runner import kill_all_workers as _kill

    return _kill()


# -- searches and sessions ------------------------------------------------------------------


def default_storage_url() -> str:
    """Where sessions are stored when no URL is given (SQLite in the user data directory)."""
    from tuner.search.storage import default_storage_url as _default

    return _default()


def redact_url(url: str) -> str:
    """A storage URL with its password shown as ``***``, for messages."""
    from tuner.search.storage import redact_url as _redact

    return _redact(url)


def list_sessions(storage: str | None = None) -> list[SessionSummary]:
    """Every stored session, newest first.

    Raises:
        MptuneError: the storage cannot be opened.
    """
    from tuner.search.session import list_sessions as _list

    return _list(storage)


def open_session(name: str, storage: str | None = None) -> SessionView:
    """A stored session read whole: settings, trials, recommendation.

    Raises:
        MptuneError: no such session, or the storage cannot be opened.
    """
    from tuner.search.session import TuningSession

    return TuningSession.load(name, storage).view()


def find_session(name: str, storage: str | None = None) -> SessionView | None:
    """The stored session called ``name``, or None when there is none.

    Raises:
        MptuneError: the storage cannot be opened.
    """
    from tuner.search.tune import stored_session

    return stored_session(name, storage)


def event_from_dict(data: dict[str, Any]) -> SearchEvent:
    """A search event from its ``to_dict`` form (a recorded search, replayed)."""
    from tuner.search.events import from_dict

    return from_dict(data)


# -- export ---------------------------------------------------------------------------------
def record_run(name: str, storage: str | None, run: dict[str, Any]) -> None:
    """Keep a real run of session ``name``'s tuned setup in it (``mptune run``).

    Raises:
        MptuneError: no such session, or the storage cannot be written.
    """
    from tuner.search.session import TuningSession

    TuningSession.load(name, storage).add_run(run)


def session_config(session: SessionView) -> TunedConfig:
    """The tuned config of a finished session.

    Raises:
        ConfigError: the session has no recommendation yet.
    """
    from tuner.export import config_from_session

    return config_from_session(session)


def tuned_config(source: str, storage: str | None = None) -> TunedConfig:
    """A tuned config from a config file (``*.json`` or an existing file) or a session name.

    Raises:
        MptuneError: the file is missing or invalid, or no such finished session.
    """
    from tuner.export import TunedConfig

    if source.lower().endswith(".json") or os.path.isfile(source):
        return TunedConfig.load(source)
    return session_config(open_session(source, storage))


def render_config(config: TunedConfig, fmt: str = "json", keras: str = "3") -> str:
    """``config`` as a JSON config, a paste-ready snippet or a runnable script.

    Raises:
        ConfigError: an unknown format or Keras version.
    """
    from tuner.export import render

    return render(config, fmt, keras)  # type: ignore[arg-type]  # render checks both


def save_export(
    config: TunedConfig, path: str | os.PathLike[str], fmt: str = "json", keras: str = "3"
) -> Path:
    """Render ``config`` and write it to ``path`` atomically, with the mode an editor gives a
    file (a script executable; :func:`~tuner.export.config.write_atomic`).

    Raises:
        ConfigError: an unknown format or Keras version.
        OSError: the file cannot be written.
    """
    from tuner.export.config import write_atomic

    text = render_config(config, fmt, keras)
    target = Path(path)
    write_atomic(target, text, executable=fmt == "script")
    return target
