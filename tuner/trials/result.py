"""How a trial ended: :class:`TrialStatus` and the frozen :class:`TrialResult`."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from tuner.record import added, from_data, to_data
from tuner.trials.hazards import Hazard
from tuner.trials.spec import TrialSpec


class TrialStatus(str, enum.Enum):
    """The outcome of a trial. :func:`tuner.trials.outcome.classify` is the only code that
    decides it."""

    OK = "ok"
    OOM = "oom"  #: ResourceExhaustedError, or over the memory limit
    DIVERGED = (
        "diverged"  #: non-finite loss/weights, or the loss scale at its floor still overflowing
    )
    USER_ERROR = "user_error"  #: an exception raised by the user's model, data or code
    #: the policy corrupts this model's data, or the model fails only under this policy (not
    #: under float32 on the same data): not the user's error, and never recommended. A trial
    #: that measured keeps its figures, taken with mptune's fix applied.
    UNSAFE = "unsafe"
    #: the setup asks for something this model cannot do (XLA cannot compile it) while the same
    #: setup without it trains: the knob is dropped for this model, nothing else is wrong
    UNSUPPORTED = "unsupported"
    TIMEOUT = "timeout"  #: killed at its time limit
    CRASHED = "crashed"  #: the worker died without a result, or mptune itself failed

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class StageTimes:
    """The seconds of a trial's stages as its worker timed them, in the worker's ``result``
    message and (with the parent's own) in :class:`Timings`.

    ``build_s`` loading the model, making the data and compiling; ``probe_s`` the numerics
    probe (low-precision policies, the first trial of each in a search); ``compile_s`` the step
    compiled ahead of its first run to predict its memory (JAX; the warm-up then skips that
    compile); ``warmup_s`` the untimed first steps (tracing, autotuning); ``measure_s`` the
    timed steps.
    """

    build_s: float | None = None
    probe_s: float | None = None
    warmup_s: float | None = None
    measure_s: float | None = None
    compile_s: float | None = added(None)


@dataclass(frozen=True, kw_only=True)
class Timings(StageTimes):
    """Where a trial's wall time went, in seconds: the worker's :class:`StageTimes`, and
    ``startup_s`` (process start and the framework's import), ``input_s`` (fit's own loop on
    the user's input, timed; before issue 35 the input timed alone) and ``total_s`` (everything,
    as the parent saw it).
    """

    startup_s: float | None = None
    total_s: float | None = None
    input_s: float | None = None

    @property
    def measured_share(self) -> float | None:
        """Measuring as a share of the trial's wall time: the measured steps and fit's own
        loop on the input (the figure that ranks)."""
        if not self.measure_s or not self.total_s:
            return None
        return (self.measure_s + (self.input_s or 0.0)) / self.total_s

    def to_dict(self) -> dict[str, Any]:
        return {**to_data(self), "measured_share": self.measured_share}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timings:
        return from_data(cls, data)


#: The worker's phase before its ``started`` message: the interpreter's start, the framework's
#: import and the device's set-up, which no setup and no model changes.
START_PHASE = "import"
#: The worker's phase in which the model's own code runs and nothing of the setup's but its
#: policy: the user's module imported and its ``build_model()`` called (or the ``.keras`` file
#: loaded). The setup's own steps (its data at its batch size, the probe, compile) come after.
MODEL_PHASE = "build"


@dataclass(frozen=True)
class TrialError:
    """Why a trial did not end ``ok``: one line for the user, details for ``--verbose``."""

    message: str
    location: str | None = None  #: ``file:line`` in the user's code, where there is one
    exception: str | None = None  #: the exception's class name
    #: the worker's traceback or log tail; for a timeout, every thread's Python stack when it
    #: was killed (where the worker could still say it)
    traceback: str | None = None
    #: the worker's phase when it was killed at a limit or died without a word (``import``,
    #: ``build``, ``prepare``, ``probe``, ...: :data:`tuner.trials.events.PHASES`); None for
    #: an error the worker reported itself, and in trials stored before it was kept
    phase: str | None = added(None)

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialError:
        return from_data(cls, data)


@dataclass(frozen=True)
class MemoryPrediction:
    """A trial's peak memory predicted before its first step, from its compiled step (JAX:
    :func:`tuner.worker.training.predict_peak` says how), and what the trial may use.

    Attributes:
        peak_mb: the predicted peak: what the process held plus what one step adds.
        live_mb: what the process held before the step (GPU: the allocator's live bytes; CPU:
            resident memory).
        step_mb: what one step adds (XLA's temporary buffers, outputs not written over the
            donated state, code).
        limit_mb: what the trial may use (``--memory-limit``, or on a GPU the allocator's
            limit); None: no limit.
        limit_source: where the limit comes from, in words.
        method: how the prediction was made, in words.
        parts_mb: XLA's ``memory_analysis()`` figures (argument, output, alias, temp, code).
        compile_s: the step's compile ahead of its first run.
        peak_so_far_mb: on a CPU, the trial's peak before the step (the build, the compile),
            which the predicted peak is no less than.
    """

    peak_mb: float
    live_mb: float | None = None
    step_mb: float | None = None
    limit_mb: float | None = None
    limit_source: str | None = None
    method: str | None = None
    parts_mb: dict[str, float] = field(default_factory=dict)
    compile_s: float | None = None
    peak_so_far_mb: float | None = None

    @property
    def over_limit(self) -> bool:
        return self.limit_mb is not None and self.peak_mb > self.limit_mb

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryPrediction:
        return from_data(cls, data)


#: A setup is input-bound when what fit can reach with its input is under this share of the
#: device's rate.
INPUT_BOUND = 0.9


def reachable(device: float, fed: InputRate) -> float:
    """What ``fit`` can reach: fit's own rate on the input where its loop was timed
    (``fit_loop``, issue 35). Trials stored before it timed the input alone: the lower of the
    device's rate and the input's where fit overlaps them, else the two one after the other."""
    if fed.fit_loop:
        return fed.samples_per_second
    if fed.overlapped:
        return min(device, fed.samples_per_second)
    return 1 / (1 / device + 1 / fed.samples_per_second)


def input_bound(device: float | None, fed: InputRate | None) -> bool:
    """The input holds ``fit`` under :data:`INPUT_BOUND` of the device's rate."""
    return (
        fed is not None
        and device is not None
        and device > 0
        and reachable(device, fed) < INPUT_BOUND * device
    )


@dataclass(frozen=True)
class AsTrained:
    """What a model trains under, read back from the model (issue 49;
    :mod:`tuner.worker.as_trained`): a trial's record holds it twice, for the model the trial
    compiled (``trained``: what its figure is about) and, for a training script, for the model
    as the script handed it to ``fit`` (``script``: what the user runs today)."""

    #: the policy most of the model's weights are computed under (its layers' compute and
    #: variable dtypes: ``bfloat16`` is the full half policy, ``mixed_bfloat16`` the mixed one)
    policy: str = "float32"
    #: the optimizer's loss scaling, as a setting's text (``dynamic:32768:2000``, ``fixed:128``,
    #: ``none``); None: not compiled
    loss_scale: str | None = None
    jit_compile: bool | None = None
    steps_per_execution: int | None = None
    #: the ``tf.distribute`` strategy or ``keras.distribution`` it trains in, by class name, and
    #: over how many devices (fit's batch is the global one, each device takes its share)
    distribution: str | None = None
    replicas: int = 1
    #: where the script set its precision itself (``train.py:9``), which the trial held off
    policy_at: str | None = None
    #: the batch size the script's fit trains at (its ``batch_size``, or its input's own)
    batch_size: int | None = None
    #: what the script's fit does besides training that the trial's figure leaves out
    #: (``validation_split=0.1``, ``validation_data``, callbacks, class or sample weights)
    left_out: tuple[str, ...] = ()
    #: seconds one validation pass of the script's fit takes (timed once by the trial; it is
    #: left out of the ranking figure, said beside it): None where the fit validates nothing
    validation_s: float | None = None
    #: the quantization mode its quantized layers train in (``float8``: Keras'
    #: ``float8_from_<policy>``), read from their policies; None where none is quantized
    quantized: str | None = added(None)
    #: the share of its multiply-adds per sample in the layers ``model.quantize()`` takes
    #: (``Dense`` and ``EinsumDense`` themselves: :func:`tuner.worker.as_trained.quantizable_work`);
    #: None: no layer with a kernel, or a record from before it was read
    quantizable_share: float | None = added(None)
    #: the Dense and EinsumDense layers it leaves in the policy's dtype, each with why
    not_quantizable: tuple[str, ...] = added(())
    #: the share of its weights (by values) that train (issue 71: a frozen backbone, LoRA,
    #: hold few); None: no weights, or a record from before it was read
    trainable_share: float | None = added(None)
    #: the dtypes its trainable weights are kept in (LoRA's adapters: float32 under any policy)
    trainable_dtypes: tuple[str, ...] = added(())


@dataclass(frozen=True)
class InputRate:
    """``fit``'s own loop on the user's input, timed after the measured steps
    (:mod:`tuner.worker.feeding`): the rate fit trains at, fed as it feeds itself. Trials stored
    before issue 35 (``fit_loop`` false) timed the input alone, without training."""

    samples_per_second: float
    #: ``tf_data`` (the user's ``make_dataset`` dataset), ``py_dataset`` (their
    #: ``keras.utils.PyDataset``), ``generator``, ``arrays`` (arrays through Keras' data
    #: adapter: the user's, or a built-in workload's) or ``synthetic`` (mptune's own arrays: the
    #: user's input is not known)
    kind: str
    fed_by: str  #: in words, e.g. "make_dataset(64), a tf.data.Dataset, as fit iterates it"
    batches: int = 0
    seconds: float = 0.0
    #: (input timed alone) fit makes the next batch while the device trains
    overlapped: bool = True
    #: the rate is fit's own loop training on the input (see :func:`reachable`)
    fit_loop: bool = False
    #: whole epochs the window held (the work between epochs counted as fit counts it); 0: a
    #: window within epochs longer than it (:class:`tuner.worker.feeding.FitClock`)
    epochs: int = 0
    #: the first timed epoch, left out as the input settling (a long run pays it once): its
    #: seconds; 0.0 where none was (:data:`tuner.worker.feeding.SETTLING_FACTOR`)
    settling_s: float = added(0.0)
    #: batches at the start of an epoch left out of a window within one (the epoch's start is
    #: paid once an epoch; :data:`tuner.worker.feeding.STEADY_FROM`)
    left_out: int = added(0)
    #: seconds each epoch waits at its end that a window within one epoch did not see, priced
    #: into the rate (TensorFlow's input autotuner, for arrays:
    #: :func:`tuner.worker.feeding.autotune_wait`); 0.0 where none was priced
    epoch_end_wait_s: float = added(0.0)
    #: the library's ``fit`` that made the tf.data pipeline of the script's data (a KerasHub
    #: task's ``GemmaCausalLM.fit``: it batches, maps in parallel and prefetches), None where
    #: the pipeline is the user's own
    made_by: str | None = added(None)

    def advice(self, backend: str) -> str:
        """What to do about this input when it holds ``fit`` back, on ``backend``."""
        if self.kind == "tf_data" and self.made_by:
            return (
                f"the tf.data pipeline fit iterates is the one {self.made_by} makes of the data "
                "the script passes it (it maps in parallel and prefetches already): pass it a "
                "tf.data.Dataset of your own that caches what does not change between epochs; "
                "a faster input gains more here than any precision"
            )
        if self.kind == "tf_data":
            return (
                "in your tf.data pipeline: map with num_parallel_calls=tf.data.AUTOTUNE, .cache() "
                "what does not change between epochs (before random augmentation), and end "
                "with .prefetch(tf.data.AUTOTUNE); a faster input gains more here than any "
                "precision"
            )
        if self.kind in ("py_dataset", "generator"):
            return (
                f"your {'PyDataset' if self.kind == 'py_dataset' else 'generator'} makes each "
                "batch in fit's own thread: give a keras.utils.PyDataset workers=N (and "
                "use_multiprocessing=True for Python-heavy batches), or move the work into a "
                "tf.data pipeline that maps in parallel and prefetches; a faster input gains more "
                "here than any precision"
            )
        pipeline = (
            "a torch DataLoader with num_workers and pin_memory=True"
            if backend == "torch"
            else "a tf.data or grain pipeline that prefetches"
        )
        return (
            f"arrays sliced batch by batch cannot keep up: feed {pipeline}, or keep the data "
            "on the device; a faster input gains more here than any precision"
        )

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InputRate:
        return from_data(cls, data)

    @classmethod
    def read(cls, data: Any) -> InputRate | None:
        """The input's figures as a worker sent them, kept only with a finite rate over 0."""
        if not isinstance(data, dict):
            return None
        try:
            rate = float(data.get("samples_per_second"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        if not math.isfinite(rate) or rate <= 0:
            return None
        return cls.from_dict({**data, "samples_per_second": rate})


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What a trial's worker measured: one frozen record, declared once (issue 36). The worker
    sends it in its ``result`` message (:class:`~tuner.trials.messages.ResultMessage` is one,
    with what only the verdict reads) and the trial's :class:`TrialResult` is one, with what
    the parent adds; :func:`tuner.record.part` carries it from one to the other.

    ``losses`` and ``loss_scales`` hold the measured steps only (warm-up excluded);
    ``loss_scales`` entries are ``None`` when no loss scaling was applied.
    """

    #: the batch size over the median step time (robust to a stray slow step); None for trials
    #: stored before it was kept apart
    median_samples_per_second: float | None = None
    #: ``train_function`` calls in the measured window (steps / steps per execution)
    executions: int | None = None
    step_time_ms: dict[str, float] = field(default_factory=dict)  #: p50, p90, mean
    peak_memory_mb: float | None = None
    memory_kind: str | None = None  #: "gpu" (the backend's allocator peak) or "cpu_rss"
    #: how the peak was read, e.g. ``torch.cuda.max_memory_allocated()`` (None: stored before)
    memory_method: str | None = None
    losses: tuple[float, ...] = ()
    loss_scales: tuple[float | None, ...] = ()
    skipped_steps: int = 0
    nonfinite_steps: int = 0
    #: steps a dynamic loss scale skipped while it came down from its initial value, before
    #: the measured steps (issue 35): calibration, which a real run pays once; not in
    #: :attr:`skipped_steps`, which counts the measured steps' skips against the setup
    calibration_steps: int = added(0)
    #: updates applied before the measured steps (the warm-up and calibration steps less the
    #: skipped ones); None for trials stored before it (their warm-up's steps, all applied as
    #: far as is known): the guard compares losses after the same number of updates
    warmup_updates: int | None = added(None)
    #: stopped measuring early: its rate fell under ``spec.prune_below`` (its figure is kept,
    #: from the steps it ran; its loss window is short)
    pruned: bool = added(False)
    #: fit's own loop on the user's input (None: not timed)
    input: InputRate | None = None
    #: what the trial's model trained under, read back from it after compile (issue 49)
    trained: AsTrained | None = added(None)
    #: a training script's model as the script handed it to fit: what the user runs today
    script: AsTrained | None = added(None)


#: A trial's figure holds when its measured steps agree with their own median: the mean step
#: at most this many times the median step (issue 70). The trials of the recorded CPU searches
#: (tests/tuner/data/searches) keep their mean within 1.10x of their median; on an H200 the
#: first trial of each fresh worker of a search ran about 100x slow and its precision was
#: dropped on that figure, and one such trial run alone measured a mean step of 2.8 ms against
#: a median of 1.3 (a slow start inside its window). A figure that does not hold is measured
#: again before it decides anything (docs/search.md, "A setup dropped only on a figure that
#: holds").
HOLDS_WITHIN = 1.5


@dataclass(frozen=True)
class TrialResult(Measured):
    """Everything one trial measured (its :class:`Measured` figures) and how it ended. Frozen:
    it crosses threads and goes into storage."""

    spec: TrialSpec
    status: TrialStatus
    #: what ``fit`` reaches: fit's own loop on the input where it was timed, else the
    #: device's rate (see :func:`reachable`): the figure the search ranks by, since it ranks
    #: setups as ``fit`` does (bench/bench_fit.py). Trials stored before it existed hold the
    #: median-based figure here.
    samples_per_second: float | None = None
    #: what the device trained at, from batches already in memory (on the device). None for
    #: trials stored before the input was counted (their figure is the device's)
    device_samples_per_second: float | None = None
    steps_completed: int = 0  #: measured steps that finished
    timings: Timings = field(default_factory=Timings)
    error: TrialError | None = None
    warnings: tuple[str, ...] = ()
    device: str | None = None  #: what the worker ran on, e.g. "cpu" or "gpu:0 (NVIDIA A100)"
    versions: dict[str, str] = field(default_factory=dict)
    #: Share of the machine's CPU time that processes other than mptune's used while this trial
    #: measured (0: an idle machine, 1: every core busy with something else); None: not known.
    background_load: float | None = None
    #: precision hazards the numerics probe found (empty: none found, or no probe ran)
    hazards: tuple[Hazard, ...] = ()
    #: the probe's measurements, for the search and the plots: ``probe_s``, ``fixed_layers``
    #: (layers whose inputs mptune kept in float32 to measure an unsafe policy), ``flush_share``
    #: (share of gradient values that flush to zero in float16, by loss scale), ``grad_max``,
    #: ``layer_errors`` (relative error against float32, per layer in call order); empty when no
    #: probe ran
    numerics: dict[str, Any] = field(default_factory=dict)
    #: the peak predicted before the first step, from the compiled step (JAX); beside
    #: :attr:`peak_memory_mb` it shows the prediction's error. None where none was made
    memory_prediction: MemoryPrediction | None = added(None)

    @property
    def trained_samples_per_second(self) -> float | None:
        """The trial's one rate (issue 35): :attr:`samples_per_second` times the share of its
        measured steps that applied (a step the loss scale skipped trained nothing; the skips
        of its calibration are not among them). Every table, plot, recommendation and export
        shows this figure for the trial; None where it measured none."""
        if not self.samples_per_second:
            return None
        if not self.skipped_steps or not self.steps_completed:
            return self.samples_per_second
        return self.samples_per_second * (1 - self.skipped_steps / self.steps_completed)

    @property
    def updates_before(self) -> int:
        """Updates applied before the measured steps (:attr:`warmup_updates`, else the spec's
        warm-up steps)."""
        return self.warmup_updates if self.warmup_updates is not None else self.spec.warmup_steps

    @property
    def predicted_oom(self) -> bool:
        """Out of memory as predicted before any step: the setup was never run."""
        return (
            self.status is TrialStatus.OOM
            and self.memory_prediction is not None
            and self.memory_prediction.over_limit
            and self.steps_completed == 0
        )

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def model_failed(self) -> bool:
        """The trial failed in the model's own code, as every setup of it would: an exception
        of the user's code (``user_error``), or a user's model whose worker hung (``timeout``)
        or ended without a word (``crashed``) while the model was being built
        (:data:`MODEL_PHASE`, before any step of the setup's own). No setup can run until the
        model is fixed."""
        if self.status is TrialStatus.USER_ERROR:
            return True
        return (
            self.status in (TrialStatus.TIMEOUT, TrialStatus.CRASHED)
            and self.error is not None
            and self.error.phase == MODEL_PHASE
            # a built-in's build is mptune's own code: a hang there is not the user's to fix
            and not self.spec.model.startswith("builtin:")
        )

    @property
    def pruned_words(self) -> str:
        """Why the measuring stopped early, in words ("" when it ran in full)."""
        if not self.pruned:
            return ""
        limit = f" under {self.spec.prune_below:,.0f} samples/s" if self.spec.prune_below else ""
        return f"pruned: stopped after {self.steps_completed} steps{limit}, a third of the leader's"

    @property
    def holds(self) -> bool:
        """Whether the trial's figure holds: its measured steps agree with their own median
        (the mean step at most :data:`HOLDS_WITHIN` times the median step), or their times
        are not known (nothing to check)."""
        return not self.unheld_words

    @property
    def unheld_words(self) -> str:
        """Why the figure does not hold, in words ("" where it holds): ``its mean step 98 ms
        was 75.4x its median 1.3 ms``."""
        p50, mean = self.step_time_ms.get("p50"), self.step_time_ms.get("mean")
        if p50 is None or mean is None or not p50 > 0:  # a stored NaN reads as None
            return ""
        ratio = mean / p50
        if not math.isfinite(ratio) or ratio <= HOLDS_WITHIN:
            return ""
        return f"its mean step {_ms(mean)} ms was {ratio:.1f}x its median {_ms(p50)} ms"

    @property
    def input_bound(self) -> bool:
        """The input cannot keep the device busy: ``fit`` is held to the input's rate."""
        return input_bound(self.device_samples_per_second, self.input)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data; non-finite floats become ``None`` (JSON has no NaN)."""
        safe: dict[str, Any] = _json_safe(to_data(self))
        return safe

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        """Inverse of :meth:`to_dict` (a stored non-finite loss comes back as NaN)."""
        return from_data(cls, data)


def _ms(value: float) -> str:
    """Milliseconds in three figures, whole ones from 100 on: ``1.3``, ``42.7``, ``4,267``."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
