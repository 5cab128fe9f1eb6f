"""Hardware detection through NVML: the scripted backend, the real one (with a stand-in for
the NVML library, and as it is on this machine), detection, the profile's JSON and the report."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tuner.hardware import (
    CpuInfo,
    FakeNvmlBackend,
    GpuInfo,
    HardwareProfile,
    NvmlBackend,
    NvmlUnavailable,
    PynvmlBackend,
    SoftwareInfo,
    detect,
)
from tuner.hardware.nvml import (
    NO_DRIVER,
    NO_GPU,
    NOT_SUPPORTED,
    SCENARIOS,
    backend_from_env,
    cuda_version_text,
    read_gpus,
)
from tuner.hardware.report import render_text
from tuner.policies import POLICIES

ROOT = Path(__file__).resolve().parents[2]


def profile_of(scenario: str) -> HardwareProfile:
    return detect(FakeNvmlBackend.named(scenario))


# -- every backend keeps the same contract --------------------------------------------------


def all_backends() -> list[Any]:
    return [
        pytest.param(lambda name=name: FakeNvmlBackend.named(name), id=name) for name in SCENARIOS
    ] + [pytest.param(PynvmlBackend, id="real-nvml")]


@pytest.mark.parametrize("make", all_backends())
def test_backend_contract(make: Any) -> None:
    backend: NvmlBackend = make()
    backend.shutdown()  # before init: harmless
    unavailable: NvmlUnavailable | None = None
    try:
        backend.init()
    except NvmlUnavailable as exc:
        unavailable = exc
    if unavailable is not None:  # it says why, in its message too
        assert unavailable.reason
        assert str(unavailable) == unavailable.reason
        backend.shutdown()
        return
    try:
        count = backend.device_count()
        assert count >= 0
        for index in range(count):
            gpu = backend.device(index)
            assert gpu.index == index
            json.dumps(gpu.to_dict())
            used, total = backend.memory(index)
            assert used is None or used >= 0
            assert total is None or total > 0
            if gpu.compute_capability is not None:
                assert gpu.units is not None
    finally:
        backend.shutdown()
    backend.shutdown()  # twice: harmless


# -- the scripted backend -------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario, cc, arch, fp16, bf16",
    [
        ("pascal_6.1", (6, 1), "Pascal", False, False),
        ("volta_7.0", (7, 0), "Volta", True, False),
        ("ampere_8.0", (8, 0), "Ampere", True, True),
        ("hopper_9.0", (9, 0), "Hopper", True, True),
    ],
)
def test_scripted_gpus_are_read_with_their_units(
    scenario: str, cc: tuple[int, int], arch: str, fp16: bool, bf16: bool
) -> None:
    profile = profile_of(scenario)
    (gpu,) = profile.gpus
    assert gpu.compute_capability == cc
    assert gpu.name
    assert gpu.units is not None
    assert gpu.units.architecture == arch
    assert gpu.units.fp16_tensor_cores is fp16
    assert gpu.units.bf16_tensor_cores is bf16
    assert gpu.memory_total_mb
    assert gpu.memory_used_mb is not None
    assert gpu.memory_free_mb == gpu.memory_total_mb - gpu.memory_used_mb
    assert gpu.uuid
    assert gpu.uuid.startswith("GPU-")
    assert gpu.power_limit_w
    assert gpu.sm_clock_mhz
    assert gpu.memory_clock_mhz
    assert profile.gpu_unavailable_reason is None
    assert profile.driver_version
    assert profile.cuda_driver_version


def test_scripted_h100_figures() -> None:
    (gpu,) = profile_of("hopper_9.0").gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_total_mb == 81559
    assert gpu.mig_mode is False
    assert gpu.units is not None
    assert gpu.units.fp8


@pytest.mark.parametrize(("scenario", "fp8"), [("hopper_9.0", True), ("ampere_8.0", False)])
def test_detect_says_what_keras_does_with_fp8_tensor_cores(scenario: str, fp8: bool) -> None:
    """A card with FP8 Tensor Cores (8.9 and later) is said to have them, with what Keras does
    with them and where; an A100 (8.0) has none, and nothing is said."""
    text = " ".join(render_text(profile_of(scenario)).split())
    said = "FP8 Tensor Cores: Keras trains Dense and EinsumDense layers in float8 after model"
    assert (said in text) is fp8
    if fp8:
        assert "on JAX or on TensorFlow with XLA (jit_compile=True" in text


def test_wsl2_unsupported_fields_are_none_not_a_crash() -> None:
    profile = profile_of("wsl2")
    (gpu,) = profile.gpus
    assert gpu.power_limit_w is None
    assert gpu.memory_clock_mhz is None
    assert gpu.mig_mode is None
    assert gpu.uuid is None
    assert gpu.compute_capability == (8, 6)
    assert gpu.name == "NVIDIA GeForce RTX 3060"
    assert gpu.sm_clock_mhz == 1777
    assert gpu.memory_total_mb == 12288
    data = json.loads(json.dumps(profile.to_dict()))
    assert data["gpus"][0]["power_limit_w"] is None
    assert data["gpus"][0]["uuid"] is None
    text = render_text(profile)
    assert "power limit n/a" in text
    assert "MIG n/a" in text


def test_missing_driver_and_no_gpus_are_states_with_reasons() -> None:
    profile = profile_of("no_driver")
    assert profile.gpus == ()
    assert profile.gpu_unavailable_reason == "NVML library not found (no NVIDIA driver installed)"
    assert profile.driver_version is None
    # The GUI's test looks for both phrases in the verdict.
    assert "no NVIDIA GPU found" in profile.verdict
    assert "no NVIDIA driver" in profile.verdict
    assert "((" not in profile.verdict
    assert "))" not in profile.verdict
    empty = profile_of("no_gpus")
    assert empty.gpus == ()
    assert empty.gpu_unavailable_reason == NO_GPU
    assert empty.driver_version == "550.90.07"
    assert empty.verdict.startswith("no NVIDIA GPU found by NVML: ")


def test_a_field_that_errors_is_none() -> None:
    backend = FakeNvmlBackend(
        {
            "gpus": [
                {
                    "name": "X",
                    "compute_capability": "7.5",
                    "memory_total_mb": "error",
                    "memory_used_mb": 10,
                    "sm_clock_mhz": "not_supported",
                }
            ]
        }
    )
    (gpu,) = read_gpus(backend).gpus
    assert gpu.memory_total_mb is None
    assert gpu.memory_free_mb is None
    assert gpu.memory_used_mb == 10
    assert gpu.sm_clock_mhz is None
    assert gpu.units is not None
    assert gpu.units.architecture == "Turing"


def test_an_unknown_capability_is_none_with_no_units() -> None:
    (gpu,) = read_gpus(
        FakeNvmlBackend({"gpus": [{"name": "Mystery", "compute_capability": NOT_SUPPORTED}]})
    ).gpus
    assert gpu.compute_capability is None
    assert gpu.units is None
    assert gpu.to_dict()["compute_capability"] is None


def test_count_and_init_errors_become_reasons() -> None:
    reading = read_gpus(FakeNvmlBackend({"count_error": "GPU is lost"}))
    assert reading.gpus == ()
    assert reading.unavailable_reason is not None
    assert "GPU is lost" in reading.unavailable_reason
    backend = FakeNvmlBackend(
        {"init_error": "NVML failed to initialise: Driver/library version mismatch"}
    )
    reading = read_gpus(backend)
    assert reading.unavailable_reason is not None
    assert "mismatch" in reading.unavailable_reason


def test_a_failing_nvml_never_breaks_detection() -> None:
    class Broken(FakeNvmlBackend):
        def device_count(self) -> int:
            raise RuntimeError("driver/library version mismatch")

    backend = Broken({"gpus": []})
    reading = read_gpus(backend)
    assert reading.gpus == ()
    assert reading.unavailable_reason is not None
    assert "version mismatch" in reading.unavailable_reason
    assert not backend.started  # shut down all the same

    class BrokenInit(FakeNvmlBackend):
        def init(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    reading = read_gpus(BrokenInit({}))
    assert reading.unavailable_reason is not None
    assert reading.unavailable_reason.startswith("NVML failed to initialise")


def test_a_gpu_that_cannot_be_read_keeps_its_index() -> None:
    class HalfBroken(FakeNvmlBackend):
        def device(self, index: int) -> GpuInfo:
            if index == 1:
                raise RuntimeError("GPU has fallen off the bus")
            return super().device(index)

    scenario = {"gpus": SCENARIOS["ampere_8.0"]["gpus"] * 2}
    gpus = read_gpus(HalfBroken(scenario)).gpus
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name
    assert gpus[1] == GpuInfo(index=1)


def test_detect_always_shuts_the_backend_down() -> None:
    class Counting(FakeNvmlBackend):
        shutdowns = 0

        def shutdown(self) -> None:
            type(self).shutdowns += 1
            super().shutdown()

    for name in ("ampere_8.0", "no_driver", "no_gpus"):
        before = Counting.shutdowns
        backend = Counting(SCENARIOS[name])
        detect(backend)
        assert Counting.shutdowns == before + 1
        assert not backend.started


def test_memory_sampling_call() -> None:
    backend = FakeNvmlBackend.named("ampere_8.0")
    backend.init()
    assert backend.memory(0) == (620, 40960)
    assert backend.memory(7) == (None, None)  # no such GPU: no crash either
    assert backend.memory_calls == 2


def test_scenarios_are_private_copies() -> None:
    backend = FakeNvmlBackend.named("volta_7.0")
    backend.scenario["gpus"][0]["name"] = "changed"
    assert SCENARIOS["volta_7.0"]["gpus"][0]["name"] == "Tesla V100-SXM2-16GB"


# -- the environment hook -------------------------------------------------------------------


def test_fake_backend_from_env_by_name_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPTUNE_FAKE_NVML", "volta_7.0")
    assert detect().gpus[0].name == "Tesla V100-SXM2-16GB"
    scenario = tmp_path / "two.json"
    scenario.write_text(
        json.dumps(
            {
                "driver": "1",
                "cuda": "12.0",
                "gpus": [SCENARIOS["pascal_6.1"]["gpus"][0], SCENARIOS["hopper_9.0"]["gpus"][0]],
            }
        )
    )
    monkeypatch.setenv("MPTUNE_FAKE_NVML", str(scenario))
    backend = backend_from_env()
    assert isinstance(backend, FakeNvmlBackend)
    profile = detect(backend)
    assert [g.compute_capability for g in profile.gpus] == [(6, 1), (9, 0)]
    # Advice follows GPU 0, the one trials use.
    assert profile.advice[0].policy == "float32"
    monkeypatch.delenv("MPTUNE_FAKE_NVML")
    assert isinstance(backend_from_env(), PynvmlBackend)


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"])
def test_a_bad_env_value_is_a_reason_not_a_crash(
    tmp_path: Path, content: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scenario.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("MPTUNE_FAKE_NVML", str(path))
    profile = detect()
    assert profile.gpus == ()
    assert profile.gpu_unavailable_reason is not None
    assert "MPTUNE_FAKE_NVML" in profile.gpu_unavailable_reason


# -- the real backend, against a stand-in NVML library ---------------------------------------


class FakeNvmlLibrary:
    """Replaces pynvml's functions; raises pynvml's own exception classes."""

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml
        self.inits = 0
        self.shutdowns = 0
        self.handle_calls = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        nvml = self.pynvml

        def error(code: int) -> Exception:
            return nvml.NVMLError(code)

        def not_supported(*_: Any) -> Any:
            raise error(nvml.NVML_ERROR_NOT_SUPPORTED)

        def handle(index: int) -> int:
            self.handle_calls += 1
            if index >= 2:
                raise error(nvml.NVML_ERROR_INVALID_ARGUMENT)
            return index

        def name(h: int) -> Any:
            return b"NVIDIA A100-PCIE-40GB" if h == 0 else "NVIDIA GeForce GTX 1660 Ti"

        def uuid(h: int) -> str:
            if h == 1:
                raise error(nvml.NVML_ERROR_UNKNOWN)
            return "GPU-12345678-abcd-ef01-2345-6789abcdef01"

        def memory(h: int) -> Any:
            total = 40 * 2**30 if h == 0 else 6 * 2**30
            return SimpleNamespace(total=total, used=2**30, free=total - 2**30)

        def clock(h: int, kind: int) -> int:
            if h == 1 and kind == nvml.NVML_CLOCK_MEM:
                raise error(nvml.NVML_ERROR_NOT_SUPPORTED)
            return 1410 if kind == nvml.NVML_CLOCK_SM else 1215

        def init() -> None:
            self.inits += 1

        def shutdown() -> None:
            self.shutdowns += 1

        for attr, value in {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlSystemGetDriverVersion": lambda: b"550.54.15",
            "nvmlSystemGetCudaDriverVersion": lambda: 12040,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": handle,
            "nvmlDeviceGetName": name,
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetCudaComputeCapability": lambda h: (8, 0) if h == 0 else (7, 5),
            "nvmlDeviceGetPowerManagementLimit": lambda h: 250000 if h == 0 else not_supported(),
            "nvmlDeviceGetMaxClockInfo": clock,
            "nvmlDeviceGetMigMode": lambda h: [1, 1] if h == 0 else not_supported(),
        }.items():
            monkeypatch.setattr(nvml, attr, value)


@pytest.fixture
def fake_library(monkeypatch: pytest.MonkeyPatch) -> FakeNvmlLibrary:
    pynvml = pytest.importorskip("pynvml")
    library = FakeNvmlLibrary(pynvml)
    library.install(monkeypatch)
    return library


def test_pynvml_backend_reads_every_field(fake_library: FakeNvmlLibrary) -> None:
    reading = read_gpus(PynvmlBackend())
    assert reading.driver_version == "550.54.15"  # bytes from an old binding, decoded
    assert reading.cuda_driver_version == "12.4"
    a100, gtx = reading.gpus
    assert a100.name == "NVIDIA A100-PCIE-40GB"
    assert a100.compute_capability == (8, 0)
    assert a100.memory_total_mb == 40 * 1024
    assert a100.memory_used_mb == 1024
    assert a100.memory_free_mb == 39 * 1024
    assert a100.power_limit_w == 250
    assert a100.sm_clock_mhz == 1410
    assert a100.memory_clock_mhz == 1215
    assert a100.mig_mode is True
    assert a100.uuid == "GPU-12345678-abcd-ef01-2345-6789abcdef01"
    assert a100.units is not None
    assert a100.units.bf16_tensor_cores
    # Not Supported and an unknown error: None, and the rest of the GPU is still read.
    assert gtx.power_limit_w is None
    assert gtx.mig_mode is None
    assert gtx.uuid is None
    assert gtx.memory_clock_mhz is None
    assert gtx.sm_clock_mhz == 1410
    # TU116 is 7.5 without Tensor Cores: the name decides.
    assert gtx.units is not None
    assert not gtx.units.tensor_cores
    assert fake_library.inits == fake_library.shutdowns == 1


def test_pynvml_backend_lacking_a_function_gives_none(
    fake_library: FakeNvmlLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(fake_library.pynvml, "nvmlDeviceGetMigMode")
    (a100, _) = read_gpus(PynvmlBackend()).gpus
    assert a100.mig_mode is None
    assert a100.name == "NVIDIA A100-PCIE-40GB"


def test_pynvml_memory_sampling_and_nested_init(fake_library: FakeNvmlLibrary) -> None:
    backend = PynvmlBackend()
    backend.init()
    backend.init()  # a detector and a sampler sharing one backend
    assert backend.memory(0) == (1024, 40 * 1024)
    assert backend.memory(0) == (1024, 40 * 1024)
    assert fake_library.handle_calls == 1  # the handle is cached
    assert backend.memory(5) == (None, None)
    backend.shutdown()
    assert backend.memory(0) == (1024, 40 * 1024)  # one start still holds NVML
    backend.shutdown()
    backend.shutdown()  # one too many: ignored
    assert fake_library.inits == fake_library.shutdowns == 2


@pytest.mark.parametrize(
    "code_name, reason",
    [
        ("NVML_ERROR_LIBRARY_NOT_FOUND", NO_DRIVER),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "NVIDIA driver not loaded"),
        ("NVML_ERROR_NO_PERMISSION", "no permission to use NVML"),
        ("NVML_ERROR_UNKNOWN", "NVML failed to initialise: Unknown Error"),
    ],
)
def test_pynvml_init_failures_are_reasons(
    monkeypatch: pytest.MonkeyPatch, code_name: str, reason: str
) -> None:
    pynvml = pytest.importorskip("pynvml")
    code = getattr(pynvml, code_name)

    def fail() -> None:
        raise pynvml.NVMLError(code)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(NvmlUnavailable) as caught:
        PynvmlBackend().init()
    assert caught.value.reason == reason


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    reading = read_gpus(PynvmlBackend())
    assert reading.gpus == ()
    assert reading.unavailable_reason is not None
    assert "nvidia-ml-py" in reading.unavailable_reason


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(12090) == "12.9"
    assert cuda_version_text(13000) == "13.0"


# -- the real backend on this machine --------------------------------------------------------


def test_real_nvml_gives_gpus_or_a_reason() -> None:
    """Passes here (no driver: a reason) and on a GPU machine (the GPUs, fully described)."""
    reading = read_gpus(PynvmlBackend())
    if reading.gpus:
        assert reading.unavailable_reason is None
        assert reading.driver_version
        for index, gpu in enumerate(reading.gpus):
            assert gpu.index == index
            assert gpu.name
            assert gpu.compute_capability
            assert gpu.units is not None
            assert gpu.memory_total_mb
    else:
        assert reading.unavailable_reason
        assert "NVML" in reading.unavailable_reason or "NVIDIA" in reading.unavailable_reason


def test_detect_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPTUNE_FAKE_NVML", raising=False)
    profile = detect()
    assert profile.gpus or profile.gpu_unavailable_reason
    assert sorted(a.policy for a in profile.advice) == sorted(POLICIES)
    assert profile.cpu.arch
    assert profile.software.python
    assert profile.verdict


def test_detection_imports_no_tensorflow_keras_or_qt() -> None:
    script = (
        "import sys, tuner.hardware as h; p = h.detect(); h.report.render_text(p); "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'keras', 'tf_keras', 'PySide6', 'pyqtgraph')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the profile as data ---------------------------------------------------------------------

TOP_LEVEL = {
    "gpus",
    "gpu_unavailable_reason",
    "driver_version",
    "cuda_driver_version",
    "cpu",
    "software",
    "advice",
    "verdict",
    "unused_gpus",
    "schema",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_profile_round_trips_through_json(scenario: str) -> None:
    profile = profile_of(scenario)
    data = json.loads(json.dumps(profile.to_dict()))
    assert set(data) == TOP_LEVEL
    assert data["schema"] == 1
    assert isinstance(data["gpus"], list)
    assert [a["policy"] for a in data["advice"]] == [a.policy for a in profile.advice]
    assert all(set(a) == {"policy", "reason"} for a in data["advice"])
    assert data["verdict"] == profile.verdict
    assert HardwareProfile.from_dict(data) == profile


def test_gpu_json_layout() -> None:
    data = profile_of("ampere_8.0").to_dict()["gpus"][0]
    assert data["compute_capability"] == "8.0"
    assert data["units"]["architecture"] == "Ampere"
    assert data["units"]["tf32"] is True
    assert set(data) == {
        "index",
        "name",
        "uuid",
        "compute_capability",
        "memory_total_mb",
        "memory_used_mb",
        "memory_free_mb",
        "power_limit_w",
        "sm_clock_mhz",
        "memory_clock_mhz",
        "mig_mode",
        "units",
    }


def test_from_dict_tolerates_newer_and_older_layouts() -> None:
    data = profile_of("volta_7.0").to_dict()
    data["future_key"] = 1
    data["gpus"][0]["future_field"] = "x"
    data["gpus"][0]["units"]["fp4"] = False
    data["cpu"]["future"] = True
    profile = HardwareProfile.from_dict(data)
    assert profile == profile_of("volta_7.0")
    assert GpuInfo.from_dict({"index": 0, "compute_capability": [8, 6]}).compute_capability == (
        8,
        6,
    )


def test_records_are_frozen() -> None:
    profile = profile_of("ampere_8.0")
    with pytest.raises(AttributeError):
        profile.gpus[0].name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        profile.cpu.flags = ()  # type: ignore[misc]


def test_verdicts() -> None:
    # The hardware's verdict: with this machine's packages the backend may add why it cannot
    # use the GPU (test_gpu_use.py).
    assert profile_of("ampere_8.0").verdict_for(None) == (
        "float16 and bfloat16 Tensor Cores, TF32: mixed precision should pay here"
    )
    assert "mixed_float16 should pay" in profile_of("volta_7.0").verdict
    assert "float32 is expected to be fastest" in profile_of("pascal_6.1").verdict
    cpu_only_tf = HardwareProfile.from_dict(
        {
            **profile_of("hopper_9.0").to_dict(),
            "software": {"python": "3.11", "tf_is_cuda_build": False},
        }
    )
    assert "CPU-only build" in cpu_only_tf.verdict


# -- the report ------------------------------------------------------------------------------


def test_report_with_a_gpu() -> None:
    text = render_text(profile_of("ampere_8.0"))
    assert "GPU 0: NVIDIA A100-SXM4-40GB (compute capability 8.0, Ampere)" in text
    assert "float16 and bfloat16 Tensor Cores" in text
    assert "620 / 40,960 MiB" in text
    assert "NVIDIA driver 550.90.07, CUDA 12.4" in text
    assert "  1. mixed_float16" in text
    assert "  3. float32" in text
    assert "Advice" in text
    assert "Verdict: " in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_report_without_a_gpu() -> None:
    text = render_text(profile_of("no_driver"))
    assert text.startswith("GPU: none - NVML library not found (no NVIDIA driver installed)")
    assert "CPU: " in text
    assert "Software: Python" in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_report_lists_the_backends_and_how_to_install_the_missing_ones() -> None:
    profile = dataclasses.replace(
        profile_of("no_driver"),
        software=SoftwareInfo(python="3.11", tensorflow="2.17.0", keras="3.6.0", torch="2.5.1"),
    )
    text = render_text(profile)
    assert all(len(line) <= 100 for line in text.splitlines())
    flat = " ".join(line.strip() for line in text.splitlines())
    assert (
        "Keras backends: TensorFlow 2.17.0, PyTorch 2.5.1; not installed: JAX (pip install "
        "'mptune[jax]')" in flat
    ), text
    every = dataclasses.replace(
        profile,
        software=SoftwareInfo(
            python="3.11", tensorflow="2.17.0", jax="0.6.2", jaxlib="0.6.1", torch="2.5.1"
        ),
    )
    assert (
        "Keras backends: TensorFlow 2.17.0, JAX 0.6.2 (jaxlib 0.6.1), PyTorch 2.5.1\n"
        in render_text(every) + "\n"
    )
    half = dataclasses.replace(profile, software=SoftwareInfo(python="3.11", jax="0.4.30"))
    flat = " ".join(line.strip() for line in render_text(half).splitlines())
    assert "JAX (jax 0.4.30 without jaxlib: pip install 'mptune[jax]')" in flat


def test_report_shows_missing_fields_as_na() -> None:
    profile = HardwareProfile(
        gpus=(GpuInfo(index=0),),
        gpu_unavailable_reason=None,
        driver_version=None,
        cuda_driver_version=None,
        cpu=CpuInfo(None, "", None, None, None, ()),
        software=SoftwareInfo(python="3.11"),
        advice=(),
    )
    text = render_text(profile)
    assert "GPU 0: n/a (compute capability n/a): units unknown" in text
    assert "NVIDIA driver n/a, CUDA n/a" in text
    assert "CPU: n/a (n/a), n/a cores / n/a threads, n/a MiB RAM" in text
    assert "TensorFlow n/a (build info n/a)" in text


def test_detect_says_what_each_installed_backends_float32_runs_in_by_default() -> None:
    """On compute capability 8.0 and up, the float32 a user runs today is TF32 on TensorFlow and
    JAX, and half TF32 on PyTorch: detect names each installed backend's default (issue 25);
    on an older card there is no TF32 to name."""
    text = " ".join(render_text(profile_of("ampere_8.0")).split())
    assert "float32 by default: TensorFlow runs float32 matmuls and convolutions in TF32" in text
    installed = profile_of("ampere_8.0").software.backends
    if installed.get("torch"):
        assert "PyTorch runs float32 convolutions in TF32 and matmuls in IEEE float32" in text
    if not installed.get("jax"):
        assert "JAX runs" not in text
    assert "float32 by default" not in render_text(profile_of("volta_7.0"))
