"""Helpers shared by the export tests."""

from __future__ import annotations

from typing import Any

from tuner import __version__
from tuner.export import Evidence, HardwareFingerprint, Hazard, Setup, TunedConfig


def make_config(
    model: str = "builtin:mlp:features=8,width=16,depth=1",
    policy: str = "float32",
    loss_scale: str = "none",
    batch_size: int = 16,
    hazards: tuple[Hazard, ...] = (),
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
        hazards=hazards,
    )


#: Hazards as the numerics probe words them: one unsafe for mixed_float16 (the values of a
#: vocabulary of 30,000 ids), a warning for each mixed policy (one of the model as a whole).
HAZARDS = (
    Hazard(
        "integer_cast",
        "mixed_float16",
        "'embedding' (Embedding)",
        "its float32 input holds whole numbers up to 30,000 (ids, indices or counts), and "
        "mixed_float16 casts it to float16, which holds whole numbers exactly only up to "
        "2,048: 412 of 512 values changed (2,049 became 2,048) before they reach 'embedding' "
        "(Embedding)",
        "declare the model input that carries these numbers as integers (keras.Input(..., "
        "dtype=\"int32\")), or keep 'embedding' from casting its inputs (autocast=False)",
        severity="unsafe",
        figure="2,049 became 2,048",
    ),
    Hazard(
        "divergence",
        "mixed_bfloat16",
        "'dense_1' (Dense)",
        "its output differs from float32's by 14.2% on the same batch and weights (the "
        "threshold is 12.5%)",
        'keep this layer in float32 (dtype="float32" on it) and compare the loss curves',
    ),
    Hazard(
        "underflow",
        "mixed_float16",
        None,
        "3.2% of the gradient values that float32 computes flush to zero in float16",
        "use dynamic loss scaling (LossScaleOptimizer)",
    ),
)


def running_children() -> list[Any]:
    """This process's descendants that run, but for the fork servers it keeps between tests
    and their keepers (each ends with its worker, which is counted)."""
    import psutil

    from tuner.trials.forking import server_pids

    servers = set(server_pids())
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in servers or child.ppid() in servers:
                continue
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found
