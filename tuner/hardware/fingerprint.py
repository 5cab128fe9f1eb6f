"""The hardware a setup was measured on, in the few facts that decide its speed.

A session records the machine it measures on; a continued session, an applied config and a
shared store compare fingerprints, so measurements of different hardware never mix.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

_GPU_DEVICE_RE = re.compile(r"^gpu(?::(\d+))?\b", re.IGNORECASE)


@dataclass(frozen=True)
class HardwareFingerprint:
    """The machine the setup was measured on, to warn when it is applied elsewhere."""

    device: str
    gpu_name: str | None = None
    compute_capability: str | None = None
    gpu_memory_total_mb: float | None = None
    cpu_model: str | None = None
    cpu_flags: tuple[str, ...] = ()
    digest: str = ""

    @classmethod
    def from_profile(cls, profile: Any, device: str) -> HardwareFingerprint:
        """The fingerprint of ``profile`` (a :class:`~tuner.hardware.HardwareProfile`) for the
        device the trials ran on (``cpu`` or ``gpu:N ...``)."""
        gpu = None
        match = _GPU_DEVICE_RE.match(device.strip())
        if match and profile.gpus:
            # The worker reports "gpu:N (name)"; a bare "gpu" means the first one.
            index = int(match.group(1) or 0)
            gpu = next(
                (g for g in profile.gpus if getattr(g, "index", None) == index), profile.gpus[0]
            )
        cc = gpu.compute_capability if gpu else None
        values = {
            "device": "gpu" if gpu else "cpu",
            "gpu_name": gpu.name if gpu else None,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "gpu_memory_total_mb": gpu.memory_total_mb if gpu else None,
            "cpu_model": profile.cpu.model,
            "cpu_flags": tuple(profile.cpu.flags),
        }
        return cls(**values, digest=_digest(values))

    @classmethod
    def from_profile_dict(cls, data: dict[str, Any], device: str) -> HardwareFingerprint:
        """The same as :meth:`from_profile`, from a profile as stored
        (:meth:`~tuner.hardware.HardwareProfile.to_dict`, e.g. a session's ``hardware``)."""
        gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
        cpu = data.get("cpu") or {}
        gpu = None
        match = _GPU_DEVICE_RE.match(device.strip())
        if match and gpus:
            index = int(match.group(1) or 0)
            gpu = next((g for g in gpus if g.get("index") == index), gpus[0])
        values: dict[str, Any] = {
            "device": "gpu" if gpu else "cpu",
            "gpu_name": gpu.get("name") if gpu else None,
            "compute_capability": gpu.get("compute_capability") if gpu else None,
            "gpu_memory_total_mb": gpu.get("memory_total_mb") if gpu else None,
            "cpu_model": cpu.get("model"),
            "cpu_flags": tuple(cpu.get("flags") or ()),
        }
        return cls(**values, digest=_digest(values))

    @property
    def kind(self) -> str:
        """The kind of machine in a few words: ``GPU NVIDIA H100 80GB HBM3 (8.0)``, or
        ``CPU AMD EPYC (avx2, fma)`` on a CPU."""
        if self.device == "gpu":
            cc = f" ({self.compute_capability})" if self.compute_capability else ""
            return f"GPU {self.gpu_name or 'unknown'}{cc}"
        flags = f" ({', '.join(self.cpu_flags)})" if self.cpu_flags else ""
        return f"CPU {self.cpu_model or 'unknown'}{flags}"

    def mismatches(self, other: HardwareFingerprint) -> list[str]:
        """Differences that matter, worded for a warning."""
        found = []
        if self.device != other.device:
            found.append(f"tuned on {self.device}, running on {other.device}")
        if self.device == "gpu" and other.device == "gpu":
            if self.gpu_name != other.gpu_name:
                found.append(f"GPU {self.gpu_name} vs {other.gpu_name}")
            if self.compute_capability != other.compute_capability:
                found.append(
                    f"compute capability {self.compute_capability} vs {other.compute_capability}"
                )
        if self.device == "cpu" and other.device == "cpu":
            if self.cpu_model != other.cpu_model:
                found.append(f"CPU {self.cpu_model} vs {other.cpu_model}")
            lost = sorted(set(self.cpu_flags) - set(other.cpu_flags))
            if lost:
                found.append(f"this CPU lacks {', '.join(lost)}")
        return found


def _digest(values: dict[str, Any]) -> str:
    ident = {
        k: values[k] for k in ("device", "gpu_name", "compute_capability", "cpu_model", "cpu_flags")
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=list).encode()).hexdigest()[:16]


def device_of(profile_data: dict[str, Any], device: str) -> str:
    """The device a search's trials run on, for a fingerprint: ``gpu:N`` when ``device``
    (``auto``, ``cpu`` or ``gpu:N``) picks one of the profile's GPUs, else ``cpu``."""
    gpus = list(profile_data.get("gpus") or [])
    if device == "cpu" or not gpus:
        return "cpu"
    return device if device.startswith("gpu:") else f"gpu:{gpus[0].get('index', 0)}"


def session_fingerprint(attrs: dict[str, Any]) -> HardwareFingerprint | None:
    """The kind of machine a stored session was measured on, from its attributes (its
    ``hardware`` profile and its settings' ``device``); None where it did not record one."""
    hardware, settings = attrs.get("hardware"), attrs.get("settings")
    if not isinstance(hardware, dict) or not hardware:
        return None
    device = settings.get("device", "auto") if isinstance(settings, dict) else "auto"
    return HardwareFingerprint.from_profile_dict(hardware, device_of(hardware, str(device)))
