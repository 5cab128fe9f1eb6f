"""Hardware detection against the scripted NVML backend, the real one, and sample CPU texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.hardware import (FakeNvmlBackend, HardwareProfile, PynvmlBackend, detect, units_for)
from tuner.hardware.advice import advise
from tuner.hardware.cpu import parse_cpuinfo, read_cpu
from tuner.hardware.nvml import SCENARIOS, backend_from_env, read_gpus
from tuner.hardware.profile import CpuInfo, GpuInfo
from tuner.hardware.software import read_build_info, read_software

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2
"""

ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid bf16 i8mm sve
CPU implementer\t: 0x41
"""


def gpu_profile(scenario: str) -> HardwareProfile:
    return detect(FakeNvmlBackend.named(scenario))


@pytest.mark.parametrize("scenario, cc, arch, fp16, bf16", [
    ("pascal_6.1", (6, 1), "Pascal", False, False),
    ("volta_7.0", (7, 0), "Volta", True, False),
    ("ampere_8.0", (8, 0), "Ampere", True, True),
    ("hopper_9.0", (9, 0), "Hopper", True, True),
])
def test_scripted_gpus_are_read_with_their_units(scenario: str, cc: tuple[int, int], arch: str,
                                                 fp16: bool, bf16: bool) -> None:
    profile = gpu_profile(scenario)
    (gpu,) = profile.gpus
    assert gpu.compute_capability == cc
    assert gpu.units is not None and gpu.units.architecture == arch
    assert gpu.units.fp16_tensor_cores is fp16 and gpu.units.bf16_tensor_cores is bf16
    assert gpu.memory_total_mb and gpu.memory_free_mb == gpu.memory_total_mb - gpu.memory_used_mb
    assert profile.gpu_unavailable_reason is None
    assert profile.driver_version and profile.cuda_driver_version


def test_wsl2_unsupported_fields_are_none_not_a_crash() -> None:
    profile = gpu_profile("wsl2")
    (gpu,) = profile.gpus
    assert gpu.power_limit_w is None and gpu.memory_clock_mhz is None and gpu.mig_mode is None
    assert gpu.uuid is None
    assert gpu.compute_capability == (8, 6) and gpu.name == "NVIDIA GeForce RTX 3060"
    data = json.loads(json.dumps(profile.to_dict()))
    assert data["gpus"][0]["power_limit_w"] is None
    from tuner.hardware.report import render_text

    assert "power limit n/a" in render_text(profile)


def test_missing_driver_and_no_gpus_are_states_with_reasons() -> None:
    profile = gpu_profile("no_driver")
    assert profile.gpus == () and "no NVIDIA driver" in profile.gpu_unavailable_reason
    assert "no NVIDIA GPU found" in profile.verdict
    empty = gpu_profile("no_gpus")
    assert empty.gpus == () and empty.gpu_unavailable_reason == "no NVIDIA GPU found by NVML"


def test_a_failing_nvml_never_breaks_detection() -> None:
    class Broken(FakeNvmlBackend):
        def device_count(self) -> int:
            raise RuntimeError("driver/library version mismatch")

    reading = read_gpus(Broken({"gpus": []}))
    assert reading.gpus == () and "version mismatch" in reading.unavailable_reason


def test_a_field_that_errors_is_none() -> None:
    backend = FakeNvmlBackend({"gpus": [{"name": "X", "compute_capability": [7, 5],
                                         "memory_total_mb": "error", "memory_used_mb": 10}]})
    (gpu,) = read_gpus(backend).gpus
    assert gpu.memory_total_mb is None and gpu.memory_free_mb is None
    assert gpu.units.architecture == "Turing"


def test_real_nvml_gives_gpus_or_a_reason() -> None:
    reading = read_gpus(PynvmlBackend())
    assert reading.gpus or reading.unavailable_reason
    if not reading.gpus:  # this project's CI: no driver
        assert "NVML" in reading.unavailable_reason or "NVIDIA" in reading.unavailable_reason


def test_fake_backend_from_env_by_name_and_file(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPTUNE_FAKE_NVML", "volta_7.0")
    assert detect().gpus[0].name == "Tesla V100-SXM2-16GB"
    scenario = tmp_path / "two.json"
    scenario.write_text(json.dumps({"driver": "1", "cuda": "12.0", "gpus": [
        SCENARIOS["pascal_6.1"]["gpus"][0], SCENARIOS["hopper_9.0"]["gpus"][0]]}))
    monkeypatch.setenv("MPTUNE_FAKE_NVML", str(scenario))
    backend = backend_from_env()
    assert isinstance(backend, FakeNvmlBackend)
    profile = detect(backend)
    assert [g.compute_capability for g in profile.gpus] == [(6, 1), (9, 0)]
    monkeypatch.delenv("MPTUNE_FAKE_NVML")
    assert isinstance(backend_from_env(), PynvmlBackend)


def test_memory_sampling_call() -> None:
    backend = FakeNvmlBackend.named("ampere_8.0")
    backend.init()
    assert backend.memory(0) == (620, 40960)


@pytest.mark.parametrize("cc, summary_has", [
    ((5, 2), "no Tensor Cores"), ((6, 0), "twice"), ((6, 1), "1/64"), ((7, 2), "float16 Tensor"),
    ((7, 5), "float16 Tensor"), ((8, 6), "bfloat16"), ((8, 9), "FP8"), ((9, 0), "FP8"),
    ((12, 0), "FP4"),
])
def test_capability_table(cc: tuple[int, int], summary_has: str) -> None:
    units = units_for(cc)
    assert summary_has in units.summary
    assert units.tensor_cores is (cc >= (7, 0))
    assert units.bf16_tensor_cores is (cc >= (8, 0)) and units.tf32 is (cc >= (8, 0))
    assert units.fp8 is (cc >= (8, 9))


def order(gpus: list[GpuInfo] | tuple, flags: tuple[str, ...] = ()) -> list[str]:
    cpu = CpuInfo("cpu", "x86_64", 8, 16, 32000.0, flags)
    advice = advise(gpus, cpu)
    assert all(a.reason for a in advice) and len({a.policy for a in advice}) == 3
    return [a.policy for a in advice]


def test_advice_ordering() -> None:
    assert order(gpu_profile("hopper_9.0").gpus)[-1] == "float32"
    assert order(gpu_profile("ampere_8.0").gpus)[:2] == ["mixed_float16", "mixed_bfloat16"]
    assert order(gpu_profile("volta_7.0").gpus) == ["mixed_float16", "float32", "mixed_bfloat16"]
    assert order(gpu_profile("pascal_6.1").gpus)[0] == "float32"
    assert order((), ("avx2", "fma")) == ["float32", "mixed_float16", "mixed_bfloat16"]
    assert order((), ("avx2", "avx512f", "avx512_bf16")) == [
        "float32", "mixed_bfloat16", "mixed_float16"]
    assert order((), ("avx512_bf16", "amx_bf16", "amx_tile"))[0] == "mixed_bfloat16"
    assert order((), ("avx512_fp16",))[0] == "mixed_float16"


def test_cpu_reasons_say_why() -> None:
    plain = advise((), CpuInfo("cpu", "x86_64", 2, 2, 1.0, ("avx2",)))
    assert "2-4x slower" in plain[1].reason
    bf16 = advise((), CpuInfo("cpu", "x86_64", 2, 2, 1.0, ("avx512_bf16",)))
    assert "avx512_bf16" in bf16[1].reason and "measure" in bf16[1].reason


def test_cpuinfo_parsing_x86_and_arm() -> None:
    model, flags = parse_cpuinfo(X86_CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert flags == ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile",
                     "amx_bf16")
    model, flags = parse_cpuinfo(ARM_CPUINFO)
    assert model is None and flags == ("asimdhp", "bf16", "sve", "i8mm")
    assert read_cpu("/nonexistent").logical_cores  # psutil still answers


def test_build_info_read_without_importing_tensorflow(tmp_path: Path) -> None:
    fake = tmp_path / "tensorflow" / "python" / "platform"
    fake.mkdir(parents=True)
    (fake / "build_info.py").write_text(
        "import collections\nbuild_info = collections.OrderedDict([('cuda_version', '12.3'), "
        "('cudnn_version', '8'), ('is_cuda_build', True), "
        "('cuda_compute_capabilities', ['sm_70', 'sm_80'])])\n")
    software = read_software(tmp_path / "tensorflow")
    assert software.tf_cuda_version == "12.3" and software.tf_cudnn_version == "8"
    assert software.tf_cuda_compute_capabilities == ("sm_70", "sm_80")
    assert read_build_info(tmp_path / "missing") == {}
    real = read_software()
    assert real.python and real.tensorflow  # installed in this environment


def test_profile_round_trips_through_json() -> None:
    for scenario in ("wsl2", "hopper_9.0", "no_driver"):
        profile = gpu_profile(scenario)
        data = json.loads(json.dumps(profile.to_dict()))
        assert set(data) >= {"gpus", "gpu_unavailable_reason", "cpu", "software", "advice",
                             "verdict", "schema"}
        assert HardwareProfile.from_dict(data) == profile
