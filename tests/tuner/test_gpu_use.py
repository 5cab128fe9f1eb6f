"""A GPU the backend cannot use (issue 33, item 2): NVML sees an NVIDIA card, the Keras backend
sees none (a plain ``pip install tensorflow`` without its CUDA libraries, JAX without its CUDA
plugin, a PyTorch CPU wheel). Read from the packages without importing them; said by detect,
the recommendation and tune(), which refuses to go on to the CPU unless asked to."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_hardware_host import installed_only
from test_search_strategy import Machine

from tuner.errors import MptuneError
from tuner.hardware import FakeNvmlBackend, HardwareProfile, SoftwareInfo, detect
from tuner.hardware import software as software_module
from tuner.hardware.gpu_use import (
    STATIC,
    TF_FIX,
    TRIAL,
    UnusedGpu,
    static_problem,
    unused_gpu,
    unused_gpus,
    unused_in_search,
)
from tuner.hardware.report import render_text
from tuner.hardware.software import jax_cuda, read_software, torch_cuda
from tuner.search.recommend import Recommendation, evidence_rows
from tuner.search.request import TuneRequest
from tuner.search.session import list_sessions
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import hardware_prior, tune

#: A CUDA 12 build of TensorFlow, as the Linux wheel of ``pip install tensorflow`` is.
CUDA_BUILD_INFO = textwrap.dedent("""\
    build_info = {'cuda_version': '12.5.1', 'cudnn_version': '9', 'is_cuda_build': True,
                  'is_rocm_build': False}
    """)
TF_LIBRARIES = ("libcudart.so.12", "libcublas.so.12", "libcudnn.so.9")

#: The software of a plain ``pip install tensorflow`` on Linux: a CUDA build, no CUDA libraries.
PLAIN_TF = SoftwareInfo(
    python="3.11",
    tensorflow="2.21.0",
    keras="3.15.1",
    tf_cuda_version="12.5.1",
    tf_cudnn_version="9",
    tf_is_cuda_build=True,
    tf_cuda_libraries_missing=TF_LIBRARIES,
)
#: The same with ``pip install 'tensorflow[and-cuda]'``.
TF_WITH_CUDA = dataclasses.replace(PLAIN_TF, tf_cuda_libraries_missing=())


def machine(scenario: str, software: SoftwareInfo) -> HardwareProfile:
    """The scripted GPUs of ``scenario`` (tuner.hardware.nvml) with ``software`` installed."""
    return dataclasses.replace(detect(FakeNvmlBackend.named(scenario)), software=software)


# -- reading the packages, importing none ----------------------------------------------------


def fake_tensorflow(root: Path) -> Path:
    platform_dir = root / "tensorflow" / "python" / "platform"
    platform_dir.mkdir(parents=True)
    (platform_dir / "build_info.py").write_text(CUDA_BUILD_INFO)
    return root / "tensorflow"


@pytest.fixture
def no_system_libraries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The loader finds nothing outside the pip packages: no system CUDA, no ld.so.conf."""
    monkeypatch.setattr(software_module, "SYSTEM_LIBRARY_GLOBS", ())
    monkeypatch.setattr(software_module, "LD_SO_CONF", tmp_path / "no-ld.so.conf")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)


def put_libraries(folder: Path, names: tuple[str, ...] = TF_LIBRARIES) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")


def test_a_cuda_build_without_its_libraries_is_read_as_such(
    tmp_path: Path, no_system_libraries: None
) -> None:
    """A plain ``pip install tensorflow``: build_info says CUDA 12 / cuDNN 9, and no
    libcudart.so.12, libcublas.so.12 or libcudnn.so.9 is anywhere TensorFlow looks."""
    tf_dir = fake_tensorflow(tmp_path / "site")
    assert read_software(tf_dir).tf_cuda_libraries_missing == TF_LIBRARIES
    # Another CUDA's libraries (the cu13 packages PyTorch brings) are not TensorFlow's.
    put_libraries(tmp_path / "site" / "nvidia" / "cu13" / "lib", ("libcudart.so.13",))
    assert read_software(tf_dir).tf_cuda_libraries_missing == TF_LIBRARIES


def test_the_libraries_are_found_where_tensorflow_finds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_system_libraries: None
) -> None:
    tf_dir = fake_tensorflow(tmp_path / "site")
    # tensorflow[and-cuda]: the nvidia-* packages beside it (TensorFlow's RUNPATH).
    put_libraries(tmp_path / "site" / "nvidia" / "cuda_runtime" / "lib", TF_LIBRARIES[:1])
    put_libraries(tmp_path / "site" / "nvidia" / "cublas" / "lib", TF_LIBRARIES[1:2])
    put_libraries(tmp_path / "site" / "nvidia" / "cudnn" / "lib", TF_LIBRARIES[2:])
    assert read_software(tf_dir).tf_cuda_libraries_missing == ()

    bare = fake_tensorflow(tmp_path / "bare")
    # A system CUDA on LD_LIBRARY_PATH,
    put_libraries(tmp_path / "ld_path")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "ld_path"))
    assert read_software(bare).tf_cuda_libraries_missing == ()
    monkeypatch.delenv("LD_LIBRARY_PATH")
    # or in a folder /etc/ld.so.conf names through an include.
    put_libraries(tmp_path / "cuda" / "lib64")
    conf_d = tmp_path / "ld.so.conf.d"
    conf_d.mkdir()
    (conf_d / "cuda.conf").write_text(f"# CUDA\n{tmp_path / 'cuda' / 'lib64'}\n")
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"include {conf_d}/*.conf\n")
    monkeypatch.setattr(software_module, "LD_SO_CONF", conf)
    assert read_software(bare).tf_cuda_libraries_missing == ()


def test_a_cpu_build_is_not_searched_for_libraries(tmp_path: Path) -> None:
    platform_dir = tmp_path / "tensorflow" / "python" / "platform"
    platform_dir.mkdir(parents=True)
    (platform_dir / "build_info.py").write_text("build_info = {'is_cuda_build': False}\n")
    software = read_software(tmp_path / "tensorflow")
    assert software.tf_is_cuda_build is False
    assert software.tf_cuda_libraries_missing is None


def test_jax_without_a_cuda_plugin_runs_on_the_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    installed_only(monkeypatch, {"jax": "0.6.2", "jaxlib": "0.6.2"})
    assert jax_cuda() == (False, None)
    installed_only(monkeypatch, {"jax": "0.6.2", "jaxlib": "0.6.2", "jax-cuda12-plugin": "0.6.2"})
    assert jax_cuda() == (True, "12")
    installed_only(monkeypatch, {"jax": "0.7.0", "jaxlib": "0.7.0", "jax-cuda13-plugin": "0.7.0"})
    assert jax_cuda() == (True, "13")
    # Before the plugins, the CUDA build was jaxlib itself.
    installed_only(monkeypatch, {"jax": "0.4.20", "jaxlib": "0.4.20+cuda12.cudnn89"})
    assert jax_cuda() == (True, "12")
    installed_only(monkeypatch, {"jax": "0.6.2"})
    assert jax_cuda() == (None, None)


def fake_torch(monkeypatch: pytest.MonkeyPatch, root: Path, version: str, source: str) -> None:
    """PyTorch ``version`` installed at ``root/torch`` with ``source`` as its version.py."""
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "version.py").write_text(source)
    installed_only(monkeypatch, {"torch": version})
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        if name == "torch":
            return SimpleNamespace(submodule_search_locations=[str(root / "torch")])
        return real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(software_module.importlib.util, "find_spec", find_spec)


def test_a_pytorch_cpu_wheel_is_read_from_its_version_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cpu = "from typing import Optional\n__version__ = '2.5.1+cpu'\ncuda: Optional[str] = None\n"
    fake_torch(monkeypatch, tmp_path / "a", "2.5.1+cpu", cpu)
    assert torch_cuda() == (False, None)
    fake_torch(monkeypatch, tmp_path / "b", "2.5.1", "__version__ = '2.5.1'\ncuda = '12.4'\n")
    assert torch_cuda() == (True, "12.4")
    # No readable version file: the version's tag says what it can.
    fake_torch(monkeypatch, tmp_path / "c", "2.5.1+cpu", "this is not python (\n")
    assert torch_cuda() == (False, None)
    fake_torch(monkeypatch, tmp_path / "d", "2.5.1", "")
    assert torch_cuda() == (None, None)


# -- the finding ------------------------------------------------------------------------------


def test_a_plain_tensorflow_on_an_h100_cannot_use_it() -> None:
    found = unused_gpu(machine("hopper_9.0", PLAIN_TF), "tensorflow")
    assert found == UnusedGpu(
        "tensorflow",
        1,
        "NVIDIA H100 80GB HBM3",
        "TensorFlow 2.21.0 is a CUDA 12 build, but its CUDA libraries are not installed: "
        "libcudart.so.12, libcublas.so.12, libcudnn.so.9 not found",
        TF_FIX,
        STATIC,
    )
    assert found.headline == (
        "NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use none"
    )
    assert found.sentence.endswith(": fix it with pip install 'tensorflow[and-cuda]'")
    assert UnusedGpu.from_dict(found.to_dict()) == found
    # With its CUDA libraries, nothing stops it; nor where NVML sees no GPU at all.
    assert unused_gpu(machine("hopper_9.0", TF_WITH_CUDA), "tensorflow") is None
    assert unused_gpu(machine("no_driver", PLAIN_TF), "tensorflow") is None
    assert unused_gpu(machine("no_gpus", PLAIN_TF), "tensorflow") is None
    # A stand-in profile with no software facts has no finding.
    assert unused_gpu(SimpleNamespace(gpus=(object(),)), "tensorflow") is None


@pytest.mark.parametrize(
    "scenario, software, backend, reason, fix",
    [
        (
            "ampere_8.0",
            SoftwareInfo(python="3.11", tensorflow="2.17.0", tf_is_cuda_build=False),
            "tensorflow",
            "TensorFlow 2.17.0 is a CPU-only build",
            TF_FIX,
        ),
        (
            "volta_7.0@11.4",  # an old driver: CUDA 11.4 at most, and TensorFlow wants 12
            TF_WITH_CUDA,
            "tensorflow",
            "TensorFlow 2.21.0 is built for CUDA 12, and the NVIDIA driver supports CUDA 11.4 "
            "at most",
            "an NVIDIA driver that supports CUDA 12",
        ),
        (
            "hopper_9.0",  # driver CUDA 13.0: JAX's CUDA 13 build
            SoftwareInfo(python="3.11", jax="0.7.0", jaxlib="0.7.0", jax_is_cuda_build=False),
            "jax",
            "jaxlib 0.7.0 runs on the CPU only, with no jax-cuda12-plugin or jax-cuda13-plugin "
            "installed",
            "pip install -U 'jax[cuda13]'",
        ),
        (
            "ampere_8.0",  # driver CUDA 12.4
            SoftwareInfo(python="3.11", jax="0.6.2", jaxlib="0.6.2", jax_is_cuda_build=False),
            "jax",
            "jaxlib 0.6.2 runs on the CPU only, with no jax-cuda12-plugin or jax-cuda13-plugin "
            "installed",
            "pip install -U 'jax[cuda12]'",
        ),
        (
            "ampere_8.0",
            SoftwareInfo(python="3.11", torch="2.5.1+cpu", torch_is_cuda_build=False),
            "torch",
            "PyTorch 2.5.1+cpu is a CPU-only build",
            "pip install --force-reinstall torch --index-url "
            "https://download.pytorch.org/whl/cu126",
        ),
        (
            "ampere_8.0",  # a CUDA 13 wheel on a CUDA 12.4 driver
            SoftwareInfo(
                python="3.11", torch="2.9.0", torch_is_cuda_build=True, torch_cuda_version="13.0"
            ),
            "torch",
            "PyTorch 2.9.0 is built for CUDA 13, and the NVIDIA driver supports CUDA 12.4 at most",
            "pip install --force-reinstall torch --index-url "
            "https://download.pytorch.org/whl/cu126",
        ),
        (
            "hopper_9.0",
            SoftwareInfo(python="3.11", torch="2.9.0+cpu", torch_is_cuda_build=False),
            "torch",
            "PyTorch 2.9.0+cpu is a CPU-only build",
            "pip install --force-reinstall torch --index-url "
            "https://download.pytorch.org/whl/cu130",
        ),
    ],
)
def test_each_backend_says_why_and_how_to_fix_it(
    scenario: str, software: SoftwareInfo, backend: str, reason: str, fix: str
) -> None:
    scenario, _, driver = scenario.partition("@")
    profile = machine(scenario, software)
    if driver:
        profile = dataclasses.replace(profile, cuda_driver_version=driver)
    assert static_problem(software, backend, profile.cuda_driver_version) == (reason, fix)
    found = unused_gpu(profile, backend)
    assert found is not None
    assert (found.reason, found.fix) == (reason, fix)


def test_backends_that_can_use_the_gpu_or_are_not_installed_have_no_finding() -> None:
    cuda_everything = SoftwareInfo(
        python="3.11",
        tensorflow="2.21.0",
        tf_is_cuda_build=True,
        tf_cuda_version="12.5.1",
        tf_cuda_libraries_missing=(),
        jax="0.7.0",
        jaxlib="0.7.0",
        jax_is_cuda_build=True,
        jax_cuda_version="12",
        torch="2.9.0",
        torch_is_cuda_build=True,
        torch_cuda_version="12.8",
    )
    assert unused_gpus(machine("hopper_9.0", cuda_everything)) == ()
    # What was not read (a profile stored before) is never taken for a problem.
    assert unused_gpus(machine("hopper_9.0", SoftwareInfo(python="3.11", tensorflow="2.21"))) == ()
    # JAX's CPU-only jaxlib is no finding when JAX is not what is installed.
    only_tf = dataclasses.replace(PLAIN_TF, jax_is_cuda_build=False)
    assert [u.backend for u in unused_gpus(machine("hopper_9.0", only_tf))] == ["tensorflow"]


def test_the_profile_carries_the_facts_and_the_finding() -> None:
    profile = machine("hopper_9.0", PLAIN_TF)
    data = profile.to_dict()
    assert data["software"]["tf_cuda_libraries_missing"] == list(TF_LIBRARIES)
    assert data["unused_gpus"] == [unused_gpu(profile, "tensorflow").to_dict()]  # type: ignore[union-attr]
    again = HardwareProfile.from_dict(data)
    assert again.software == PLAIN_TF
    assert again.unused_gpus == profile.unused_gpus
    # A profile stored before these facts were read: unknown, not missing.
    old = {k: v for k, v in data["software"].items() if k != "tf_cuda_libraries_missing"}
    assert SoftwareInfo.from_dict(old).tf_cuda_libraries_missing is None


# -- where the user looks first: detect's verdict and its report -------------------------------


def test_detect_says_it_in_the_verdict_with_the_fix() -> None:
    profile = machine("hopper_9.0", PLAIN_TF)
    # The CPU's verdict first, where the trials would run (issue 54: it read "mixed precision
    # should pay here" first), then the GPU's once the backend can use it.
    assert profile.verdict == (
        "TensorFlow cannot use the GPU (TensorFlow 2.21.0 is a CUDA 12 build, but its CUDA "
        "libraries are not installed: libcudart.so.12, libcublas.so.12, libcudnn.so.9 not "
        f"found), so trials would run on the CPU: {profile._cpu_verdict()}. Once it can (fix it "
        "with pip install 'tensorflow[and-cuda]'), on the GPU: float16, bfloat16 and FP8 Tensor "
        "Cores, TF32: mixed precision should pay here"
    )
    # Without the reason and the fix, for a face that says them on a line of their own.
    assert profile.verdict_for("tensorflow", detail=False) == (
        f"TensorFlow cannot use the GPU, so trials would run on the CPU: "
        f"{profile._cpu_verdict()}. Once it can, on the GPU: float16, bfloat16 and FP8 Tensor "
        "Cores, TF32: mixed precision should pay here"
    )
    # The hardware alone, for a face that says each backend's finding on its own line.
    assert profile.verdict_for(None) == (
        "float16, bfloat16 and FP8 Tensor Cores, TF32: mixed precision should pay here"
    )
    assert machine("hopper_9.0", TF_WITH_CUDA).verdict == profile.verdict_for(None)


def test_the_report_warns_under_the_gpu_with_the_fix_on_a_line_of_its_own() -> None:
    text = render_text(machine("hopper_9.0", PLAIN_TF))
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), text
    warning = next(i for i, line in enumerate(lines) if line.startswith("Warning: "))
    assert warning < next(i for i, line in enumerate(lines) if line.startswith("CPU: "))
    assert "NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use" in (
        " ".join(lines[warning : warning + 2])
    )
    assert "         fix: pip install 'tensorflow[and-cuda]'" in lines
    # The verdict's fix is never broken across lines: it is copied whole.
    verdict = text[text.index("Verdict: ") :]
    assert any("pip install 'tensorflow[and-cuda]'" in line for line in verdict.splitlines())
    assert "Warning" not in render_text(machine("hopper_9.0", TF_WITH_CUDA))


# -- tune() refuses it, unless the CPU is asked for; the recommendation says it ---------------


def test_a_new_search_on_the_default_device_is_refused_before_any_trial(tmp_path: Path) -> None:
    cpu_machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    storage = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(MptuneError) as refused:
        tune(
            TuneRequest(
                "builtin:mlp", storage=storage, study="t", profile=machine("hopper_9.0", PLAIN_TF)
            ),
            runner=cpu_machine,
        )
    assert str(refused.value) == (
        "NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use none "
        "(TensorFlow 2.21.0 is a CUDA 12 build, but its CUDA libraries are not installed: "
        "libcudart.so.12, libcublas.so.12, libcudnn.so.9 not found): fix it with pip install "
        "'tensorflow[and-cuda]', or tune on the CPU anyway with [[device cpu]]"
    )
    assert refused.value.exit_code == 2
    assert cpu_machine.calls == []
    assert list_sessions(storage) == []


def test_on_the_cpu_as_asked_the_recommendation_says_the_gpu_went_unused(tmp_path: Path) -> None:
    cpu_machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    profile = machine("hopper_9.0", PLAIN_TF)
    result = tune(
        TuneRequest(
            "builtin:mlp",
            space=SearchSpace(policies=("float32",), batch_sizes=(64,)),
            settings=SearchSettings(device="cpu", max_trials=2),
            storage=f"sqlite:///{tmp_path / 's.db'}",
            study="t",
            profile=profile,
        ),
        runner=cpu_machine,
    )
    rec = result.recommendation
    assert cpu_machine.calls
    assert all(spec.device == "cpu" for spec in cpu_machine.calls)
    assert rec.unused_gpu == unused_gpu(profile, "tensorflow")
    rows = evidence_rows(rec)
    assert rows[0] == (
        "Unused GPU",
        f"this setup is for the CPU. {rec.unused_gpu.sentence}",  # type: ignore[union-attr]
    )
    assert Recommendation.from_dict(rec.to_dict()).unused_gpu == rec.unused_gpu


def test_no_gpu_at_all_tunes_on_the_cpu_as_before(tmp_path: Path) -> None:
    """Where NVML sees no GPU, nothing goes unused: no refusal and no warning."""
    cpu_machine = Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300})
    result = tune(
        TuneRequest(
            "builtin:mlp",
            space=SearchSpace(policies=("float32",), batch_sizes=(64,)),
            settings=SearchSettings(max_trials=1),
            storage=f"sqlite:///{tmp_path / 's.db'}",
            study="t",
            profile=machine("no_driver", PLAIN_TF),
        ),
        runner=cpu_machine,
    )
    assert result.recommendation.unused_gpu is None
    assert evidence_rows(result.recommendation)[0][0] == "Setup"


def test_on_the_cpu_the_prior_is_the_cpus() -> None:
    """Tuned on the CPU, the policies are tried in the CPU's order, not the H100's."""
    profile = machine("hopper_9.0", PLAIN_TF)
    assert hardware_prior(profile)[0] == "mixed_float16"  # the H100's advice
    cpu_only = machine("no_driver", PLAIN_TF)
    assert hardware_prior(profile, "cpu") == hardware_prior(cpu_only) != hardware_prior(profile)


def stored(profile: HardwareProfile) -> HardwareProfile:
    """The profile as a search stored it and its recommendation reads it back."""
    return HardwareProfile.from_dict(profile.to_dict())


def test_a_trial_on_the_cpu_while_a_gpu_was_asked_for_is_proof() -> None:
    """The worker's own report: it trained on the CPU although the search asked for the GPU."""
    ok = stored(machine("hopper_9.0", TF_WITH_CUDA))
    found = unused_in_search(ok, "tensorflow", "auto", "cpu")
    assert found is not None
    assert found.evidence == TRIAL
    assert found.fix is None
    assert found.reason == "its trials ran on the CPU although auto was asked for"
    assert unused_in_search(ok, "tensorflow", "auto", "gpu:0 (NVIDIA H100 80GB HBM3)") is None
    assert unused_in_search(ok, "tensorflow", "cpu", "cpu") is None  # the CPU, as chosen
    plain = stored(machine("hopper_9.0", PLAIN_TF))
    assert unused_in_search(plain, "tensorflow", "cpu", "cpu") == unused_gpu(plain, "tensorflow")
    assert (
        unused_in_search(stored(machine("no_driver", PLAIN_TF)), "tensorflow", "auto", "cpu")
        is None
    )
    assert unused_in_search(None, "tensorflow", "auto", "cpu") is None
