"""The compute-capability table and the policy advice built on it."""

from __future__ import annotations

import pytest

from tuner.hardware import CpuInfo, GpuInfo, PolicyAdvice, advise, units_for
from tuner.policies import POLICIES

# -- the capability table -------------------------------------------------------------------


@pytest.mark.parametrize(
    "cc, arch, summary_has",
    [
        ((3, 7), "Kepler", "no Tensor Cores"),
        ((5, 2), "Maxwell", "no Tensor Cores"),
        ((5, 3), "Maxwell", "twice"),
        ((6, 0), "Pascal", "twice"),
        ((6, 1), "Pascal", "1/64"),
        ((6, 2), "Pascal", "twice"),
        ((7, 0), "Volta", "float16 Tensor Cores"),
        ((7, 2), "Volta", "float16 Tensor Cores"),
        ((7, 5), "Turing", "float16 Tensor Cores"),
        ((8, 0), "Ampere", "bfloat16"),
        ((8, 6), "Ampere", "bfloat16"),
        ((8, 7), "Ampere", "bfloat16"),
        ((8, 9), "Ada Lovelace", "FP8"),
        ((9, 0), "Hopper", "FP8"),
        ((10, 0), "Blackwell", "FP4"),
        ((11, 0), "Blackwell", "FP4"),
        ((12, 0), "Blackwell", "FP4"),
    ],
)
def test_capability_table(cc: tuple[int, int], arch: str, summary_has: str) -> None:
    units = units_for(cc)
    assert units.architecture == arch
    assert summary_has in units.summary
    assert units.tensor_cores is (cc >= (7, 0))
    assert units.fp16_tensor_cores is (cc >= (7, 0))
    assert units.bf16_tensor_cores is (cc >= (8, 0))
    assert units.tf32 is (cc >= (8, 0))
    assert units.fp8 is (cc >= (8, 9))


def test_an_unknown_future_gpu_gets_the_newest_row() -> None:
    units = units_for((15, 0))
    newest = units_for((12, 0))
    assert units.architecture == "newer than Blackwell"
    assert (units.fp16_tensor_cores, units.bf16_tensor_cores, units.tf32, units.fp8) == (
        newest.fp16_tensor_cores,
        newest.bf16_tensor_cores,
        newest.tf32,
        newest.fp8,
    )


def test_a_very_old_gpu_has_nothing() -> None:
    units = units_for((2, 1))
    assert not units.tensor_cores
    assert "no fast float16" in units.summary


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce GTX 1660 Ti",
        "NVIDIA GeForce GTX 1650",
        "NVIDIA GeForce MX450",
        "NVIDIA T1000",
        "Quadro T400",
    ],
)
def test_turing_chips_without_tensor_cores(name: str) -> None:
    units = units_for((7, 5), name)
    assert units.architecture == "Turing"
    assert not units.tensor_cores
    assert not units.fp16_tensor_cores
    assert "TU116/TU117" in units.summary


@pytest.mark.parametrize(
    "name", ["Tesla T4", "NVIDIA GeForce RTX 2080 Ti", "Quadro RTX 4000", "NVIDIA TITAN RTX", None]
)
def test_turing_chips_with_tensor_cores(name: str | None) -> None:
    assert units_for((7, 5), name).fp16_tensor_cores


def test_units_round_trip() -> None:
    units = units_for((8, 9))
    assert type(units).from_dict(units.to_dict()) == units


# -- advice ----------------------------------------------------------------------------------

PLAIN_CPU = CpuInfo("cpu", "x86_64", 8, 16, 32000.0, ("avx2", "fma", "f16c"))


def gpu(cc: tuple[int, int] | None, name: str = "GPU") -> GpuInfo:
    return GpuInfo(
        index=0, name=name, compute_capability=cc, units=units_for(cc, name) if cc else None
    )


def cpu(*flags: str, arch: str = "x86_64") -> CpuInfo:
    return CpuInfo("cpu", arch, 8, 16, 32000.0, flags)


def checked(advice: tuple[PolicyAdvice, ...]) -> list[str]:
    """The order, after checking what every advice must be: all policies once, one sentence."""
    policies = [a.policy for a in advice]
    assert sorted(policies) == sorted(POLICIES)
    for item in advice:
        assert item.reason
        assert ". " not in item.reason
        assert not item.reason.endswith(".")
    return policies


@pytest.mark.parametrize(
    "cc, expected",
    [
        ((9, 0), ["mixed_float16", "mixed_bfloat16", "float32"]),
        ((8, 9), ["mixed_float16", "mixed_bfloat16", "float32"]),
        ((8, 0), ["mixed_float16", "mixed_bfloat16", "float32"]),
        ((12, 0), ["mixed_float16", "mixed_bfloat16", "float32"]),
        ((7, 5), ["mixed_float16", "float32", "mixed_bfloat16"]),
        ((7, 0), ["mixed_float16", "float32", "mixed_bfloat16"]),
        ((6, 1), ["float32", "mixed_float16", "mixed_bfloat16"]),
        ((6, 0), ["float32", "mixed_float16", "mixed_bfloat16"]),
        ((5, 2), ["float32", "mixed_float16", "mixed_bfloat16"]),
        (None, ["float32", "mixed_float16", "mixed_bfloat16"]),
    ],
)
def test_gpu_advice_order(cc: tuple[int, int] | None, expected: list[str]) -> None:
    assert checked(advise([gpu(cc)], PLAIN_CPU)) == expected


def test_gpu_reasons_say_why() -> None:
    ampere = {a.policy: a.reason for a in advise([gpu((8, 0))], PLAIN_CPU)}
    assert "loss scaling" in ampere["mixed_float16"]
    assert "no loss scaling" in ampere["mixed_bfloat16"]
    assert "baseline" in ampere["float32"]
    assert "TF32" in ampere["float32"]
    volta = {a.policy: a.reason for a in advise([gpu((7, 0))], PLAIN_CPU)}
    assert "no bfloat16 Tensor Cores" in volta["mixed_bfloat16"]
    assert "emulated" in volta["mixed_bfloat16"]
    pascal = {a.policy: a.reason for a in advise([gpu((6, 1))], PLAIN_CPU)}
    assert "no Tensor Cores" in pascal["float32"]
    assert "memory" in pascal["mixed_float16"]


def test_a_turing_card_without_tensor_cores_is_advised_like_pascal() -> None:
    order = checked(advise([gpu((7, 5), "NVIDIA GeForce GTX 1660 SUPER")], PLAIN_CPU))
    assert order[0] == "float32"


def test_only_the_first_gpu_counts() -> None:
    first_old = advise([gpu((6, 1)), gpu((9, 0))], PLAIN_CPU)
    assert first_old[0].policy == "float32"
    first_new = advise([gpu((9, 0)), gpu((6, 1))], PLAIN_CPU)
    assert first_new[-1].policy == "float32"


def test_the_cpu_does_not_matter_when_there_is_a_gpu() -> None:
    assert advise([gpu((7, 0))], cpu("amx_bf16")) == advise([gpu((7, 0))], PLAIN_CPU)


@pytest.mark.parametrize(
    "flags, expected",
    [
        # Plain AVX2: float32, then float16 ahead of a bfloat16 converted in software.
        (("avx2", "fma", "f16c"), ["float32", "mixed_float16", "mixed_bfloat16"]),
        ((), ["float32", "mixed_float16", "mixed_bfloat16"]),
        # avx512_bf16 without AMX (AMD Zen 4, Cooper Lake): float32 first, bfloat16 worth measuring.
        (("avx2", "avx512f", "avx512_bf16"), ["float32", "mixed_bfloat16", "mixed_float16"]),
        # AMX (Sapphire Rapids): bfloat16 first.
        (
            ("avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"),
            ["mixed_bfloat16", "mixed_float16", "float32"],
        ),
        (("amx_tile", "amx_bf16"), ["mixed_bfloat16", "float32", "mixed_float16"]),
        # Float16 units lift mixed_float16 one place above its usual one.
        (("avx512_fp16",), ["mixed_float16", "float32", "mixed_bfloat16"]),
        (("avx512_bf16", "avx512_fp16"), ["float32", "mixed_float16", "mixed_bfloat16"]),
        (("amx_bf16", "amx_fp16"), ["mixed_bfloat16", "mixed_float16", "float32"]),
    ],
)
def test_cpu_advice_order(flags: tuple[str, ...], expected: list[str]) -> None:
    assert checked(advise((), cpu(*flags))) == expected


def test_arm_cpu_advice() -> None:
    graviton3 = advise((), cpu("fp16", "asimdhp", "bf16", "sve", arch="aarch64"))
    assert checked(graviton3) == ["float32", "mixed_bfloat16", "mixed_float16"]
    reasons = {a.policy: a.reason for a in graviton3}
    assert "bf16 may make" in reasons["mixed_bfloat16"]
    assert "asimdhp" in reasons["mixed_float16"]
    older = advise((), cpu("fp16", "asimdhp", arch="aarch64"))
    assert checked(older) == ["float32", "mixed_float16", "mixed_bfloat16"]


def test_cpu_reasons_say_why() -> None:
    plain = {a.policy: a.reason for a in advise((), cpu("avx2"))}
    assert "no bf16/AMX units" in plain["float32"]
    assert "2-4x slower" in plain["float32"]
    assert "slower" in plain["mixed_float16"]
    assert "software" in plain["mixed_bfloat16"]
    bf16 = {a.policy: a.reason for a in advise((), cpu("avx512_bf16"))}
    assert bf16["mixed_bfloat16"] == (
        "avx512_bf16 may make bfloat16 matmuls and convolutions faster through oneDNN; measure"
    )
    amx = {a.policy: a.reason for a in advise((), cpu("amx_bf16"))}
    assert "AMX" in amx["mixed_bfloat16"]
    fp16 = {a.policy: a.reason for a in advise((), cpu("avx512_fp16"))}
    assert "avx512_fp16" in fp16["mixed_float16"]
    assert "measure" in fp16["mixed_float16"]
