"""``--parallel``: independent trials at once, one a slot (a GPU), on scripted outcomes; and
once for real, with CPU workers, for correctness."""

from __future__ import annotations

import collections
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from test_search_strategy import FakeGpu, FakeProfile, Machine, run, tune_with
from tests_support import running_children

from tuner.errors import MptuneError
from tuner.search.lease import Heartbeat
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import parallel_devices, tune
from tuner.setup import Setup
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec

SPEEDS = {"float32": 1000, "mixed_bfloat16": 1300, "mixed_float16": 1200}


class Tracked:
    """A scripted machine that records how many trials run at once, on which device, and
    never lets two trials share a device. ``meet``: the first this many trials of mixed
    policies must all be running at the same time before any of them ends (a barrier: a search
    that ran them one by one fails)."""

    def __init__(self, machine: Machine, meet: int = 0) -> None:
        self.machine = machine
        self.lock = threading.Lock()
        self.active: collections.Counter[str] = collections.Counter()
        self.running = 0
        self.peak = 0
        self.barrier = threading.Barrier(meet, timeout=30) if meet else None
        self.met = 0
        self.devices: list[str] = []

    def __call__(self, spec: TrialSpec, on_event: Any = None, **kwargs: Any) -> TrialResult:
        with self.lock:
            self.active[spec.device] += 1
            assert spec.device == "auto" or self.active[spec.device] == 1, "a GPU ran two"
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.devices.append(spec.device)
            wait = (
                self.barrier is not None
                and spec.policy.is_mixed
                and self.met < self.barrier.parties
            )
            if wait:
                self.met += 1
        try:
            if wait:
                assert self.barrier is not None
                self.barrier.wait()  # broken (an error) unless the others run meanwhile
            return self.machine(spec, on_event, **kwargs)
        finally:
            with self.lock:
                self.active[spec.device] -= 1
                self.running -= 1


def setups_of(tmp_path: Path, study: str = "t") -> collections.Counter[Any]:
    session = TuningSession.load(study, f"sqlite:///{tmp_path / 's.db'}")
    return collections.Counter(t.result.spec.setup for t in session.trials() if t.result)


def test_parallel_trials_run_at_once_and_find_what_one_at_a_time_finds(tmp_path: Path) -> None:
    """Two slots: the policies' first trials meet (each waits for the other to be running),
    and the search runs the same setups and recommends the same as with one slot."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    alone = run(Machine(speed=SPEEDS), tmp_path / "one")
    tracked = Tracked(Machine(speed=SPEEDS), meet=2)
    both = run(tracked, tmp_path / "two", parallel=2)  # type: ignore[arg-type]
    assert tracked.peak == 2
    assert both.recommendation.setup == alone.recommendation.setup
    assert setups_of(tmp_path / "two") == setups_of(tmp_path / "one")
    parallel_note = next(n for n in both.recommendation.notes if "at once on the CPU" in n)
    assert set(both.recommendation.notes) - {parallel_note} == set(alone.recommendation.notes)
    # The trials of a lane keep their order: each ladder climbs as it does alone.
    assert both.recommendation.knobs == alone.recommendation.knobs


def test_each_slot_has_a_gpu_of_the_searched_model(tmp_path: Path) -> None:
    profile = FakeProfile(
        gpus=(FakeGpu(index=0), FakeGpu(index=1), FakeGpu(index=2, name="Other GPU")),
    )
    tracked = Tracked(Machine(speed=SPEEDS), meet=2)
    run(tracked, tmp_path, parallel="auto", profile=profile)  # type: ignore[arg-type]
    assert set(tracked.devices) == {"gpu:0", "gpu:1"}
    assert tracked.peak == 2  # and never two on one card (Tracked asserts it)


def test_a_parallel_search_resumes_where_it_stopped(tmp_path: Path) -> None:
    def machine(**kwargs: Any) -> Machine:
        return Machine(speed=SPEEDS, **kwargs)

    (tmp_path / "whole").mkdir()
    whole = run(machine(), tmp_path / "whole", study="p", parallel=3)
    stopped = machine(interrupt_at=6)
    with pytest.raises(KeyboardInterrupt):
        run(stopped, tmp_path, study="p", parallel=3)
    assert setups_of(tmp_path, "p")  # the trials that ended are kept
    second = machine()
    done = run(second, tmp_path, study="p", parallel=3, resume=True)
    # Nothing measured twice, nothing lost: the same measurements as a search never stopped.
    assert setups_of(tmp_path, "p") == setups_of(tmp_path / "whole", "p")
    # (the trials' numbers differ: lanes take them in the order they happen to start)
    assert done.recommendation.setup == whole.recommendation.setup
    assert done.recommendation.samples_per_second == whole.recommendation.samples_per_second
    third = machine()
    again = run(third, tmp_path, study="p", parallel=3, resume=True)
    assert third.calls == []
    assert again.recommendation == done.recommendation


def test_parallel_trials_never_pass_the_trial_budget(tmp_path: Path) -> None:
    machine = Machine(speed=SPEEDS)
    result = run(machine, tmp_path, parallel=3, settings=SearchSettings(max_trials=7))
    assert len(machine.calls) <= 7
    assert "stopped early" in " ".join(result.recommendation.notes)


def test_a_trial_that_fails_in_one_lane_stops_the_others_from_starting_more(
    tmp_path: Path,
) -> None:
    """mptune's own failure in one lane (not a trial's outcome): the other lane finishes its
    running trial, starts no other, and the error is raised."""
    machine = Machine(speed=SPEEDS)

    def runner(spec: TrialSpec, *args: Any, **kwargs: Any) -> TrialResult:
        if spec.policy == "mixed_float16" and spec.batch_size > 64:
            raise RuntimeError("the runner broke")
        return machine(spec, *args, **kwargs)

    space = SearchSpace(policies=("float32", "mixed_float16", "mixed_bfloat16"))
    with pytest.raises(RuntimeError, match="the runner broke"):
        run(runner, tmp_path, parallel=2, space=space)  # type: ignore[arg-type]
    session = TuningSession.load("t", f"sqlite:///{tmp_path / 's.db'}")
    assert not session._running()  # every opened trial was closed
    broken = [t for t in session.trials() if t.result is None]
    assert len(broken) == 1


@pytest.mark.parametrize(
    ("parallel", "gpus", "device", "expected"),
    [
        ("auto", (), "auto", [None]),
        (1, (), "auto", [None]),
        (3, (), "auto", [None, None, None]),
        ("auto", (FakeGpu(index=0),), "auto", [None]),
        ("auto", (FakeGpu(index=0), FakeGpu(index=1)), "auto", ["gpu:0", "gpu:1"]),
        (4, (FakeGpu(index=0), FakeGpu(index=1)), "auto", ["gpu:0", "gpu:1"]),
        ("auto", (FakeGpu(index=0), FakeGpu(index=1)), "cpu", [None]),
        ("auto", (FakeGpu(index=0), FakeGpu(index=1)), "gpu:1", [None]),
    ],
)
def test_parallel_devices(parallel: Any, gpus: Any, device: str, expected: list[Any]) -> None:
    devices, note = parallel_devices(parallel, FakeProfile(gpus=gpus), device)
    assert devices == expected
    if parallel == 3:
        assert note is not None
        assert "sharing its cores" in note
        assert "auto" in note
    elif parallel == 4:
        assert note is not None
        assert "2 Test GPU GPUs" in note
    else:
        assert note is None


@pytest.mark.parametrize("wrong", ["0", "-2", "two", 0])
def test_parallel_takes_a_whole_number_or_auto(wrong: Any) -> None:
    with pytest.raises(
        MptuneError, match=re.escape("[[parallel]] takes a whole number of 1 or more")
    ):
        parallel_devices(wrong, FakeProfile(), "auto")


def test_parallel_with_one_pinned_gpu_is_refused() -> None:
    profile = FakeProfile(gpus=(FakeGpu(index=0), FakeGpu(index=1)))
    with pytest.raises(MptuneError, match="pins every trial to one"):
        parallel_devices(2, profile, "gpu:1")


def test_the_heartbeat_keeps_every_running_trial_alive() -> None:
    beats: list[int] = []

    class Storage:
        def record_heartbeat(self, trial_id: int) -> None:
            beats.append(trial_id)

    class NoLease:
        def beat(self) -> None:
            pass

    heartbeat = Heartbeat(Storage(), NoLease(), interval_s=3600)  # type: ignore[arg-type]
    heartbeat.started(4)
    heartbeat.started(7)
    heartbeat.beat()
    heartbeat.ended(4)
    heartbeat.beat()
    assert beats == [4, 7, 7]


@pytest.mark.slow
def test_real_trials_in_parallel_on_the_cpu(tmp_path: Path) -> None:
    """Real workers, two slots, on a CPU (for correctness: the figures distort each other, as
    the note says): every trial ends ok, none twice, and no worker outlives the search. The
    slots are the search's, the same whatever the workers import: on JAX, a small MLP."""
    before = {p.pid for p in running_children()}
    result = tune(
        TuneRequest(
            "builtin:mlp:features=16,width=32,depth=1",
            space=SearchSpace(policies=("float32", "mixed_bfloat16"), batch_sizes=(32, 64, 128)),
            settings=SearchSettings(
                measure_seconds=0.3, warmup_steps=2, max_trials=6, backend="jax"
            ),
            storage=f"sqlite:///{tmp_path / 's.db'}",
            study="real",
            parallel=2,
        )
    )
    session = TuningSession.load("real", f"sqlite:///{tmp_path / 's.db'}")
    trials = session.trials()
    assert trials
    assert all(t.result is not None and t.result.ok for t in trials)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    assert len(trials) <= 6
    assert any("at once on the CPU" in n for n in result.recommendation.notes)
    left = {p.pid for p in running_children()} - before
    assert not left, f"workers outlived the search: {left}"


def test_a_worker_sees_only_its_gpu_in_nvml_order() -> None:
    from tuner.trials.environment import worker_environment

    spec = TrialSpec("builtin:mlp", Setup("float32", 64), device="gpu:2")
    env = worker_environment(spec, base={"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # A user's own narrowing is kept: gpu:N is the N-th of the GPUs they made visible.
    env = worker_environment(spec, base={"CUDA_VISIBLE_DEVICES": "5,6,7"})
    assert env["CUDA_VISIBLE_DEVICES"] == "7"


def test_a_script_that_distributes_its_training_takes_every_gpu_one_trial_at_a_time(
    tmp_path: Path,
) -> None:
    """Issue 49: a script under a distribution strategy spans the GPUs it sees, so
    ``--parallel auto`` on two GPUs must not split them: each trial sees both (device
    ``auto``), one at a time, and the recommendation says why. The script's own
    mixed_float16 is what the speed-up is stated against."""
    script = Path(__file__).parent / "data" / "scripts" / "mirrored.py"
    own = tmp_path / "own_mirrored.py"
    own.write_text(
        script.read_text().replace(
            "import keras  # noqa: E402\n",
            "import keras  # noqa: E402\n\n"
            "keras.mixed_precision.set_global_policy('mixed_float16')\n",
        )
    )
    profile = FakeProfile(gpus=(FakeGpu(index=0), FakeGpu(index=1)))
    tracked = Tracked(Machine(speed=SPEEDS))
    result = tune_with(
        model=f"script:{own}",
        settings=SearchSettings(),
        storage=f"sqlite:///{tmp_path / 's.db'}",
        study="t",
        runner=tracked,
        profile=profile,
        parallel="auto",
    )
    assert set(tracked.devices) == {"auto"}
    assert tracked.peak == 1
    rec = result.recommendation
    assert any("its trials took them all, one trial at a time" in n for n in rec.notes)
    assert rec.reference == "mixed_float16"
    line = (
        own.read_text()
        .splitlines()
        .index("keras.mixed_precision.set_global_policy('mixed_float16')")
    )
    assert rec.reference_at == f"own_mirrored.py:{line + 1}"
