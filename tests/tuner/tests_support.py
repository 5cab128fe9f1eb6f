"""Helpers shared by the export tests."""

from __future__ import annotations

from tuner import __version__
from tuner.export import Evidence, HardwareFingerprint, Setup, TunedConfig


def make_config(
    model: str = "builtin:mlp:features=8,width=16,depth=1",
    policy: str = "float32",
    loss_scale: str = "none",
    batch_size: int = 16,
) -> TunedConfig:
    return TunedConfig(
        setup=Setup(policy, batch_size, loss_scale),
        model=model,
        evidence=Evidence(
            samples_per_second=1234.5,
            samples_per_second_spread=(1200.0, 1250.0),
            speedup_vs_float32=1.0,
            loss_gap=0.0,
            reason="float32 is fastest here",
            trials=(0, 3),
        ),
        hardware=HardwareFingerprint(
            device="cpu", cpu_model="Test CPU", cpu_flags=("avx2",), digest="abc"
        ),
        versions={"tensorflow": "2.21.0"},
        created="2026-11-22T00:00:00+00:00",
        mptune_version=__version__,
        session="s1",
    )
