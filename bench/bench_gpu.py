"""mptune on a real NVIDIA GPU: detect, tune two models sized to load the card on each installed
backend, reach an out-of-memory error, and write the figures to docs/benchmarks.md.

    python bench/bench_gpu.py [--device auto|cpu] [--backends jax,torch] [--models transformer,cnn]
                              [--budget-minutes 4] [--write] [--section gpu]

For each backend and model: ``mptune tune`` (the engine, in this process, so that its events
time each trial) with the card's memory sampled through NVML every 20 ms beside it; then each
precision's fastest setup against float32's and TF32's, the loss-scale behaviour of the
float16 trials, the peak memory per precision from the backend's allocator and from NVML side
by side, the search's wall time, and the best setup's FLOP rate against the card's Tensor Core
peak. The FLOPs per sample come from XLA's cost analysis of the model's forward pass (JAX),
times 3 for a training step (the backward pass costs about twice the forward: Kaplan et al.,
"Scaling Laws for Neural Language Models", 2020, section 2.1). Then one ``mptune trial`` at a
batch far too large for the card, which must end ``oom``.

``--device cpu`` runs the same steps on the CPU with small models (the test suite runs it so):
no NVML, no peak figures, and the out-of-memory error is reached through ``--memory-limit``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import write_section

from tuner.search.events import TrialFinished, TrialStarted
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import tune

ROOT = Path(__file__).resolve().parents[1]

#: Models sized to load an 80 GB card (GPU), and tiny ones for ``--device cpu``.
MODELS = {
    "gpu": {
        "transformer": "builtin:transformer:seq_len=256,vocab=16000,embed_dim=512,heads=8,"
        "ff_dim=2048,layers=4",
        "cnn": "builtin:cnn:image_size=128,channels=3,filters=64,dense=256",
    },
    "cpu": {
        "transformer": "builtin:transformer:seq_len=16,vocab=200,embed_dim=16,heads=2,ff_dim=32,"
        "layers=1",
        "cnn": "builtin:cnn:image_size=12,filters=4,dense=16",
    },
}
BATCHES = {"gpu": (64, 2048), "cpu": (8, 32)}
#: A batch size no 80 GB card holds for the GPU transformer (its attention scores alone are
#: 16384 x 8 heads x 256 x 256 x 2 bytes = 17 GB per layer, kept for the backward pass).
OOM_BATCH = {"gpu": 16384, "cpu": 64}

#: Dense Tensor Core peaks in TFLOP/s (NVIDIA's datasheets: A100 "NVIDIA A100 Tensor Core GPU"
#: datasheet, H100/H200 "NVIDIA H100 Tensor Core GPU" datasheet, SXM forms; the sparse figures
#: there are twice these).
PEAKS_TFLOPS = {
    "A100": {"float16": 312.0, "tf32": 156.0, "float32": 19.5},
    "H100": {"float16": 989.4, "tf32": 494.7, "float32": 66.9},
    "H200": {"float16": 989.4, "tf32": 494.7, "float32": 66.9},
}


def installed_backends() -> list[str]:
    return [b for b in ("tensorflow", "jax", "torch") if importlib.util.find_spec(b)]


class NvmlSampler:
    """The card's used memory every 20 ms (NVML), kept with its time."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (a CPU machine): no samples
            self._handle = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def available(self) -> bool:
        return self._handle is not None

    def used_mb(self) -> float:
        return float(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used) / 2**20

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append((time.monotonic(), self.used_mb()))

    def __enter__(self) -> NvmlSampler:
        if self.available:
            self.idle_mb = self.used_mb()
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def peak_between(self, start: float, end: float) -> float | None:
        values = [mb for t, mb in self.samples if start <= t <= end]
        return max(values) - self.idle_mb if values else None


@dataclass
class Run:
    backend: str
    model: str
    wall_s: float = 0.0
    trials: list[dict[str, Any]] = field(default_factory=list)
    pick: str = ""
    error: str | None = None


def run_tune(backend: str, name: str, model: str, args: argparse.Namespace, storage: str) -> Run:
    run = Run(backend, name)
    started: dict[int, float] = {}
    settings = SearchSettings(
        device=args.device,
        backend=backend,
        measure_seconds=args.measure_seconds,
        budget_minutes=args.budget_minutes,
        timeout_s=600,
    )
    low, high = BATCHES[args.size]
    space = SearchSpace(
        batch_sizes=tuple(
            b for b in (8, 16, 32, 64, 128, 256, 512, 1024, 2048) if low <= b <= high
        ),
        start_batch=low,
    )
    with NvmlSampler() as nvml:

        def on_event(event: Any) -> None:
            if isinstance(event, TrialStarted):
                started[event.number] = time.monotonic()
            elif isinstance(event, TrialFinished):
                r = event.result
                run.trials.append(
                    {
                        "number": event.number,
                        "stage": event.stage,
                        "setup": r.spec.setup,
                        "status": r.status.value,
                        "speed": r.samples_per_second,
                        "peak_mb": r.peak_memory_mb,
                        "method": r.memory_method,
                        "nvml_mb": nvml.peak_between(started.get(event.number, 0), time.monotonic())
                        if nvml.available
                        else None,
                        "skipped": r.skipped_steps,
                        "scales": [s for s in r.loss_scales if s is not None],
                        "device": r.device,
                        "error": r.error.message if r.error else None,
                    }
                )
                print(
                    f"  {event.number:3d} {r.spec.setup.label:45s} {r.status.value:8s} "
                    f"{r.samples_per_second or 0:12,.0f} samples/s",
                    flush=True,
                )

        t0 = time.monotonic()
        try:
            result = tune(
                TuneRequest(
                    model,
                    space=space,
                    settings=settings,
                    storage=storage,
                    study=f"{backend}-{name}",
                ),
                on_event=on_event,
            )
            run.pick = result.recommendation.setup.label
        except Exception as exc:  # noqa: BLE001 - reported in the section, the others go on
            run.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        run.wall_s = time.monotonic() - t0
    return run


def forward_flops_per_sample(model: str) -> float | None:
    """XLA's cost analysis of the model's forward pass at batch 8, per sample (JAX, in a
    subprocess of its own); None without JAX."""
    if importlib.util.find_spec("jax") is None:
        return None
    code = f"""
import jax, keras, numpy as np
from tuner.trials.models import parse_model_spec
from tuner import workloads
from tuner.search.request import TuneRequest
src = parse_model_spec({model!r})
m = workloads.build(src.name, src.params)
x = workloads.make_batches(src.name, src.params, 8, 1, 0)[0][0]
tv = [v.value for v in m.trainable_variables]; ntv = [v.value for v in m.non_trainable_variables]
f = jax.jit(lambda tv, ntv, x: m.stateless_call(tv, ntv, x)[0])
cost = f.lower(tv, ntv, x).compile().cost_analysis()
cost = cost[0] if isinstance(cost, list) else cost
print(cost["flops"] / 8)
"""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    try:
        return float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(out.stderr[-2000:], file=sys.stderr)
        return None


def cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "tuner", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def peak_for(gpu_name: str) -> dict[str, float] | None:
    return next((v for k, v in PEAKS_TFLOPS.items() if k in gpu_name), None)


def _si(value: float) -> str:
    """``2.00 G``, ``157.8 T``, ``3.1 M``: a figure with its SI prefix and a space."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "


def _fmt(value: float | None, spec: str = ",.0f", none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


def report(
    args: argparse.Namespace,
    detect: dict[str, Any],
    runs: list[Run],
    flops: dict[str, float | None],
    oom: dict[str, Any],
) -> str:
    gpus = detect.get("gpus") or []
    gpu = gpus[0] if gpus else None
    lines = [f"## mptune on {'an NVIDIA GPU' if gpu else 'the CPU'} (bench/bench_gpu.py)", ""]
    lines.append(f"Run on {date.today().isoformat()}, `--device {args.device}`.")
    if gpu:
        lines.append(
            f"GPU as NVML reports it: **{gpu.get('name')}**, compute capability "
            f"{gpu.get('compute_capability')}, "
            f"{_fmt(gpu.get('memory_total_mb'))} MiB, driver {detect.get('driver_version')}, "
            f"CUDA {detect.get('cuda_driver_version')}."
        )
    else:
        lines.append("No NVIDIA GPU (NVML absent): CPU trials, tiny models; no peak figures.")
    sw = detect.get("software") or {}
    backends = sw.get("backends") or {}
    if backends:
        lines.append("Backends: " + ", ".join(f"{k} {v}" for k, v in backends.items() if v) + ".")
    lines.append("")
    for run in runs:
        lines += _run_section(run, gpu, flops.get(run.model))
    lines.append("### An out-of-memory error")
    lines.append("")
    lines.append(
        f"`mptune trial --backend {oom['backend']} --model {oom['model']} --batch-size "
        f"{oom['batch']}`{oom.get('extra', '')}: exit code {oom['rc']}, status "
        f"**{oom['status']}**: {oom['message']}"
    )
    lines.append("")
    return "\n".join(lines)


def _run_section(run: Run, gpu: dict[str, Any] | None, flops: float | None) -> list[str]:
    lines = [f"### {run.model} on {run.backend}", ""]
    if run.error:
        lines += [f"The search stopped: {run.error}", ""]
    ok = [t for t in run.trials if t["status"] == "ok" and t["speed"]]
    lines.append(
        f"Search: {len(run.trials)} trials in {run.wall_s / 60:.1f} min of wall time; "
        f"recommended: `{run.pick or 'none'}`."
    )
    lines.append("")
    best: dict[str, dict[str, Any]] = {}
    for t in ok:
        precision = t["setup"].precision
        if precision not in best or t["speed"] > best[precision]["speed"]:
            best[precision] = t
    f32 = best.get("float32")
    tf32 = best.get("float32+tf32")
    lines.append(
        "| precision | fastest setup | samples/s | vs float32 | vs TF32 | peak MB (backend) "
        "| peak MB (NVML, card used - idle) | loss scale |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for precision, t in sorted(best.items(), key=lambda kv: -kv[1]["speed"]):
        scale = "-"
        if t["setup"].policy.name == "mixed_float16":
            scales = t["scales"]
            scale = (
                f"{t['setup'].loss_scale}: {t['skipped']} skipped, "
                f"{_fmt(scales[0] if scales else None, 'g')} -> "
                f"{_fmt(scales[-1] if scales else None, 'g')}"
            )
        lines.append(
            f"| {precision} | `{t['setup'].label}` | {t['speed']:,.0f} | "
            f"{t['speed'] / f32['speed']:.2f}x | "
            f"{(t['speed'] / tf32['speed']) if tf32 else float('nan'):.2f}x | "
            f"{_fmt(t['peak_mb'])} | {_fmt(t['nvml_mb'])} | {scale} |".replace("nanx", "n/a")
            if f32
            else f"| {precision} | `{t['setup'].label}` | {t['speed']:,.0f} | n/a | n/a | "
            f"{_fmt(t['peak_mb'])} | {_fmt(t['nvml_mb'])} | {scale} |"
        )
    lines.append("")
    methods = sorted({t["method"] for t in ok if t["method"]})
    if methods:
        lines.append(f"Backend peak read with {', '.join(f'`{m}`' for m in methods)}.")
    scaled = [t for t in run.trials if t["setup"].policy.name == "mixed_float16"]
    if scaled:
        skipped = sum(t["skipped"] for t in scaled)
        lines.append(
            f"Loss scaling: {len(scaled)} float16 trials, {skipped} steps skipped in all "
            f"(scales seen: {', '.join(sorted({str(t['setup'].loss_scale) for t in scaled}))})."
        )
    failed = [t for t in run.trials if t["status"] != "ok"]
    if failed:
        lines.append(
            "Trials that did not end ok: "
            + "; ".join(f"`{t['setup'].label}` {t['status']}" for t in failed[:6])
            + "."
        )
    peak = peak_for(str(gpu.get("name"))) if gpu else None
    if flops and run.pick and ok:
        top = max(ok, key=lambda t: t["speed"])
        rate = 3 * flops * top["speed"] / 1e12
        kind = (
            "float16"
            if top["setup"].policy.is_mixed
            else ("tf32" if top["setup"].tf32 else "float32")
        )
        against = (
            f", {rate / peak[kind]:.1%} of the card's dense {kind} Tensor Core peak "
            f"({peak[kind]:g} TFLOP/s)"
            if peak
            else ""
        )
        lines.append(
            f"FLOP rate of the fastest setup: {_si(3 * flops)}FLOP per sample per step "
            f"(3x XLA's forward count) x {top['speed']:,.0f} samples/s = {_si(rate * 1e12)}FLOP/s"
            f"{against}."
        )
    lines.append("")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (the GPU) or cpu")
    parser.add_argument("--backends", default=None, help="comma-separated (default: installed)")
    parser.add_argument("--models", default="transformer,cnn")
    parser.add_argument("--budget-minutes", type=float, default=4.0)
    parser.add_argument("--measure-seconds", type=float, default=1.0)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--section", default="gpu", help="the section of docs/benchmarks.md")
    parser.add_argument("--out", default=None, help="also write the section's text here")
    parser.add_argument("--storage", default=None, help="SQLite file for the sessions")
    args = parser.parse_args()
    args.size = "cpu" if args.device == "cpu" else "gpu"
    backends = args.backends.split(",") if args.backends else installed_backends()

    detected = cli("detect", "--json")
    if detected.returncode != 0:
        print(detected.stderr, file=sys.stderr)
        return 1
    detect = json.loads(detected.stdout)
    gpus = detect.get("gpus") or []
    print(f"mptune detect: {gpus[0]['name'] if gpus else 'no NVIDIA GPU'}", flush=True)
    if args.device != "cpu" and not gpus:
        print("bench_gpu: no NVIDIA GPU found; run with --device cpu", file=sys.stderr)
        return 1

    storage_file = args.storage or str(Path(tempfile.mkdtemp()) / "gpu.db")
    storage = f"sqlite:///{storage_file}"
    models = {name: MODELS[args.size][name] for name in args.models.split(",")}
    runs = []
    for backend in backends:
        for name, model in models.items():
            print(f"tune {name} on {backend}", flush=True)
            runs.append(run_tune(backend, name, model, args, storage))
    flops = {name: forward_flops_per_sample(model) for name, model in models.items()}

    backend = backends[0]
    oom_model = MODELS[args.size]["transformer"]
    extra = ["--memory-limit", "200"] if args.size == "cpu" else []
    done = cli(
        "trial",
        "--backend",
        backend,
        "--model",
        oom_model,
        "--policy",
        "float32",
        "--batch-size",
        str(OOM_BATCH[args.size]),
        "--device",
        args.device,
        "--steps",
        "3",
        "--json",
        *extra,
    )
    try:
        result = json.loads(done.stdout)
        status, message = result["status"], (result.get("error") or {}).get("message", "")
    except (ValueError, KeyError):
        status, message = "unreadable", done.stderr.strip().splitlines()[-1:]
    oom = {
        "backend": backend,
        "model": oom_model,
        "batch": OOM_BATCH[args.size],
        "rc": done.returncode,
        "status": status,
        "message": str(message).splitlines()[0][:300] if message else "",
        "extra": " " + " ".join(extra) if extra else "",
    }
    text = report(args, detect, runs, flops, oom)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.write:
        write_section(args.section, text)
    return 0 if all(r.error is None for r in runs) and status == "oom" else 1


if __name__ == "__main__":
    sys.exit(main())
