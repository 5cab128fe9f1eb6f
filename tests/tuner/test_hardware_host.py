"""The CPU (from /proc/cpuinfo and sysctl text) and the software versions (TensorFlow's
build_info read without importing TensorFlow; the Keras backends installed, importing none)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuner.hardware import software as software_module
from tuner.hardware.cpu import parse_cpuinfo, parse_sysctl, read_cpu
from tuner.hardware.profile import SoftwareInfo
from tuner.hardware.software import (
    check_backend,
    find_tensorflow_dir,
    read_backends,
    read_build_info,
    read_software,
)
from tuner.policies import BACKENDS

ROOT = Path(__file__).resolve().parents[2]

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx f16c fma avx2 avx512f avx512dq avx512_bf16 avx512_fp16 \
amx_bf16 amx_tile amx_int8 avx_vnni
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx
"""

AVX2_CPUINFO = """\
processor\t: 0
model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
flags\t\t: fpu sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
"""

# Graviton3 (Neoverse-V1): no model name line, only implementer and part numbers.
AARCH64_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs \
paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1

processor\t: 1
"""

RPI_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU part\t: 0xd08
"""

MAC_ARM_SYSCTL = """\
machdep.cpu.brand_string: Apple M2 Pro
hw.optional.arm.FEAT_FP16: 1
hw.optional.arm.FEAT_BF16: 1
"""

MAC_INTEL_SYSCTL = """\
machdep.cpu.brand_string: Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz
machdep.cpu.features: FPU VME DE PSE TSC SSE SSE2 SSE3 FMA CX16 SSE4.1 AVX1.0 RDRAND F16C
machdep.cpu.leaf7_features: RDWRFSGS TSC_THREAD_OFFSET SGX BMI1 AVX2 SMEP BMI2 ERMS
"""


def test_x86_cpuinfo() -> None:
    model, flags = parse_cpuinfo(X86_CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    # Only the relevant ones (not amx_int8, avx_vnni, ...), in a fixed order.
    assert flags == (
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512_bf16",
        "avx512_fp16",
        "amx_tile",
        "amx_bf16",
    )
    assert parse_cpuinfo(AVX2_CPUINFO) == (
        "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz",
        ("avx2", "fma", "f16c"),
    )


def test_aarch64_cpuinfo() -> None:
    model, flags = parse_cpuinfo(AARCH64_CPUINFO)
    assert model == "Arm Neoverse-V1"
    # Linux's "fphp" is Arm's FP16; svebf16/i8mm are not on the list.
    assert flags == ("fp16", "asimdhp", "bf16", "sve")
    assert parse_cpuinfo(RPI_CPUINFO) == ("Arm Cortex-A72", ())


def test_unknown_arm_part_and_empty_text() -> None:
    model, _ = parse_cpuinfo("Features\t: fp asimd\nCPU implementer\t: 0x61\nCPU part\t: 0x32\n")
    assert model == "Apple CPU part 0x32"
    assert parse_cpuinfo("") == (None, ())
    assert parse_cpuinfo("garbage without colons\n\x00") == (None, ())


def test_macos_sysctl() -> None:
    assert parse_sysctl(MAC_ARM_SYSCTL) == ("Apple M2 Pro", ("fp16", "asimdhp", "bf16"))
    model, flags = parse_sysctl(MAC_INTEL_SYSCTL)
    assert model
    assert model.startswith("Intel(R) Core(TM) i9")
    assert flags == ("avx2", "fma", "f16c")
    assert parse_sysctl("") == (None, ())


def test_read_cpu_here_and_without_cpuinfo() -> None:
    here = read_cpu()
    assert here.arch
    assert here.logical_cores
    assert here.ram_total_mb
    missing = read_cpu("/nonexistent/cpuinfo")
    assert missing.logical_cores == here.logical_cores  # psutil still answers
    if sys.platform.startswith("linux"):
        assert missing.flags == ()
        assert missing.model is None


def test_read_cpu_from_a_sample_file(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(X86_CPUINFO)
    info = read_cpu(str(path))
    if sys.platform.startswith("linux"):
        assert info.model == "Intel(R) Xeon(R) Platinum 8480+"
        assert "amx_bf16" in info.flags


# -- software --------------------------------------------------------------------------------

FAKE_BUILD_INFO = textwrap.dedent("""\
    import collections
    build_info = collections.OrderedDict([('cpu_compiler', 'clang'),
        ('cuda_compute_capabilities', ['sm_70', 'sm_80', 'compute_90']),
        ('cuda_version', '12.3'), ('cudnn_version', '8'), ('is_cuda_build', True),
        ('is_rocm_build', False)])
    """)


def fake_tensorflow(root: Path, source: str) -> Path:
    platform_dir = root / "tensorflow" / "python" / "platform"
    platform_dir.mkdir(parents=True)
    (platform_dir / "build_info.py").write_text(source)
    return root / "tensorflow"


def test_build_info_from_a_fake_tensorflow(tmp_path: Path) -> None:
    software = read_software(fake_tensorflow(tmp_path, FAKE_BUILD_INFO))
    assert software.tf_cuda_version == "12.3"
    assert software.tf_cudnn_version == "8"
    assert software.tf_is_cuda_build is True
    assert software.tf_cuda_compute_capabilities == ("sm_70", "sm_80", "compute_90")
    assert "_mptune_tf_build_info" not in sys.modules


def test_cpu_only_build_info(tmp_path: Path) -> None:
    source = "build_info = {'is_cuda_build': False, 'is_rocm_build': False}\n"
    software = read_software(fake_tensorflow(tmp_path, source))
    assert software.tf_is_cuda_build is False
    assert software.tf_cuda_version is None
    assert software.tf_cuda_compute_capabilities == ()


def test_missing_or_broken_build_info(tmp_path: Path) -> None:
    assert read_build_info(None) == {}
    assert read_build_info(tmp_path / "missing") == {}
    missing = read_software(tmp_path / "missing")
    assert missing.tf_cuda_version is None
    assert missing.tf_cudnn_version is None
    assert missing.tf_is_cuda_build is None
    assert missing.tf_cuda_compute_capabilities == ()
    broken = fake_tensorflow(tmp_path / "broken", "raise RuntimeError('odd build')\n")
    assert read_build_info(broken) == {}
    not_a_dict = fake_tensorflow(tmp_path / "list", "build_info = [1, 2]\n")
    assert read_build_info(not_a_dict) == {}


def test_real_software_here() -> None:
    software = read_software()
    assert software.python == ".".join(map(str, sys.version_info[:3]))
    if importlib.util.find_spec("tensorflow") is None:
        assert software.tensorflow is None
        return
    assert software.tensorflow
    assert software.keras
    tf_dir = find_tensorflow_dir()
    assert tf_dir is not None
    assert (tf_dir / "python" / "platform" / "build_info.py").is_file()
    assert software.tf_is_cuda_build is not None
    if software.tf_is_cuda_build:
        assert software.tf_cuda_version
        assert software.tf_cuda_compute_capabilities


def test_reading_build_info_does_not_import_tensorflow() -> None:
    script = (
        "import sys; from tuner.hardware.software import read_software; read_software(); "
        "sys.exit(1 if {'tensorflow', 'jax', 'jaxlib', 'torch', 'keras'} & set(sys.modules) "
        "else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# -- the Keras backends -----------------------------------------------------------------------


def installed_only(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]) -> None:
    """The packages' metadata as if only ``versions`` (distribution: version) were installed."""

    def version(distribution: str) -> str:
        if distribution in versions:
            return versions[distribution]
        raise importlib.metadata.PackageNotFoundError(distribution)

    monkeypatch.setattr(software_module.importlib.metadata, "version", version)


def test_backends_installed_here_match_their_packages() -> None:
    backends = read_backends()
    assert tuple(backends) == BACKENDS
    for name, version in backends.items():
        present = importlib.util.find_spec(name) is not None
        if name == "jax":
            present = present and importlib.util.find_spec("jaxlib") is not None
        assert bool(version) is present, (name, version)
        if version:
            assert check_backend(name) == version
    software = read_software()
    assert software.backends == backends


def test_backends_from_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    installed_only(monkeypatch, {"tensorflow-cpu": "2.17.0", "jax": "0.4.30", "torch": "2.5.1"})
    # jax without jaxlib cannot run: it counts as missing, with the fix.
    assert read_backends() == {"tensorflow": "2.17.0", "jax": None, "torch": "2.5.1"}
    software = read_software()
    assert (software.jax, software.jaxlib, software.torch) == ("0.4.30", None, "2.5.1")
    assert software.missing_backends == {"jax": "pip install 'mptune[jax]'"}
    with pytest.raises(ValueError, match="not installed here") as missing:
        check_backend("jax")
    assert str(missing.value) == (
        "the JAX backend (jax) is not installed here: install it with pip install 'mptune[jax]'"
    )
    assert check_backend("torch") == "2.5.1"
    with pytest.raises(ValueError, match="unknown backend 'numpy': choose one of tensorflow"):
        check_backend("numpy")

    installed_only(monkeypatch, {"jax": "0.6.2", "jaxlib": "0.6.2"})
    assert read_backends() == {"tensorflow": None, "jax": "0.6.2", "torch": None}
    with pytest.raises(ValueError, match=r"install it with pip install 'mptune\[torch\]'"):
        check_backend("torch")
    with pytest.raises(ValueError, match="install it with pip install tensorflow"):
        check_backend("tensorflow")


def test_software_round_trips_with_the_backends_and_older_dicts_load() -> None:
    software = SoftwareInfo(
        python="3.11", tensorflow="2.17.0", keras="3.6.0", jax="0.6.2", jaxlib="0.6.2"
    )
    data = software.to_dict()
    assert data["backends"] == {"tensorflow": "2.17.0", "jax": "0.6.2", "torch": None}
    assert data["missing_backends"] == {"torch": "pip install 'mptune[torch]'"}
    assert SoftwareInfo.from_dict(data) == software
    # A profile stored before the backends were read: loads, with none but TensorFlow known.
    old = {k: v for k, v in data.items() if k not in ("jax", "jaxlib", "torch", "backends")}
    loaded = SoftwareInfo.from_dict(old)
    assert loaded.backends == {"tensorflow": "2.17.0", "jax": None, "torch": None}
