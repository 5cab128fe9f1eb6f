"""Whether a Keras backend can use the NVIDIA GPUs NVML sees: the finding that a GPU would go
unused, with its reason and the command that fixes it.

NVML reads the driver, not the framework: a machine with an H100 and a plain ``pip install
tensorflow`` (no CUDA libraries), JAX without its CUDA plugin, or a PyTorch CPU wheel shows the
GPU to ``mptune detect`` while every trial runs on the CPU. Two kinds of evidence say so:

- static, read by :mod:`tuner.hardware.software` without importing any framework: a CPU-only
  build, CUDA libraries that are nowhere the loader looks, no CUDA plugin, a framework built
  for a newer CUDA than the driver supports (:func:`static_problem`);
- a trial's own report: a worker asked for the default device trained on the CPU while NVML
  sees a GPU (:func:`unused_in_search`).

The finding is data (:class:`UnusedGpu`: backend, GPUs, reason, fix); the CLI, the window and
the recommendation each word it. Only what is known to be wrong is reported: a backend whose
packages look right is never called unable, since a wrong refusal would stop a working search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.policies import BACKENDS, JAX, TENSORFLOW, TORCH
from tuner.record import from_data, to_data
from tuner.setup import BACKEND_NAMES

if TYPE_CHECKING:  # the profile is above: it asks this module for its findings
    from tuner.hardware.profile import HardwareProfile, SoftwareInfo

#: How each finding was known: from the installed packages, or from a trial that ran.
STATIC = "packages"
TRIAL = "trial"

#: The command that gives TensorFlow its CUDA libraries (its own pip extra).
TF_FIX = "pip install 'tensorflow[and-cuda]'"

#: PyTorch's CUDA wheels (https://pytorch.org/get-started/locally/), by the least CUDA the
#: driver must support, newest first: the first the driver supports is the one to install. A
#: CUDA 12 wheel runs on any CUDA 12 driver (CUDA's minor version compatibility); cu128 is the
#: first with Blackwell's kernels, so a driver for 12.8 or later gets it.
TORCH_CUDA_WHEELS: tuple[tuple[tuple[int, int], str], ...] = (
    ((13, 0), "cu130"),
    ((12, 8), "cu128"),
    ((12, 0), "cu126"),
    ((11, 8), "cu118"),
)


@dataclass(frozen=True)
class UnusedGpu:
    """NVML sees NVIDIA GPUs that ``backend`` cannot use: its trials run on the CPU.

    Attributes:
        backend: the Keras backend (:data:`tuner.policies.BACKENDS`).
        gpus: how many GPUs NVML sees.
        gpu_name: the first one's name, as NVML reports it (``None`` when it does not).
        reason: why the backend cannot use them, in a few words; ``None`` when unknown.
        fix: the command that fixes it (or, where no command does, what to do); ``None``
            when unknown.
        evidence: :data:`STATIC` (the installed packages) or :data:`TRIAL` (a trial ran on
            the CPU).
    """

    backend: str = TENSORFLOW
    gpus: int = 0
    gpu_name: str | None = None
    reason: str | None = None
    fix: str | None = None
    evidence: str = STATIC

    @property
    def headline(self) -> str:
        """``NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use
        none``."""
        count = f"{self.gpus} NVIDIA GPU{'s' if self.gpus != 1 else ''}"
        name = f" ({self.gpu_name})" if self.gpu_name else ""
        backend = BACKEND_NAMES.get(self.backend, self.backend)
        return f"NVML sees {count}{name} but the {backend} backend can use none"

    @property
    def sentence(self) -> str:
        """The headline, the reason and the fix, in one line of plain text."""
        text = self.headline + (f" ({self.reason})" if self.reason else "")
        return text + (f": fix it with {self.fix}" if self.fix else "")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, from the declared fields (:mod:`tuner.record`)."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnusedGpu:
        """Inverse of :meth:`to_dict`."""
        return from_data(cls, data)


def _version_tuple(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def jax_fix(cuda_driver_version: str | None) -> str:
    """JAX's CUDA install command for the driver's CUDA: ``jax[cuda13]`` from CUDA 13 on,
    else ``jax[cuda12]``."""
    driver = _version_tuple(cuda_driver_version)
    cuda = "cuda13" if driver and driver >= (13, 0) else "cuda12"
    return f"pip install -U 'jax[{cuda}]'"


def torch_fix(cuda_driver_version: str | None) -> str:
    """PyTorch's CUDA wheel for the driver's CUDA, from pytorch.org's index (the newest CUDA
    the driver supports; CUDA 12.6, the widest, when the driver's is unknown). The CPU wheel has
    the same version number, so pip must be told to replace it."""
    driver = _version_tuple(cuda_driver_version)
    tag = "cu126"
    if driver:
        tag = next((t for v, t in TORCH_CUDA_WHEELS if driver >= v), TORCH_CUDA_WHEELS[-1][1])
    return f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag}"


def _too_new(
    what: str, cuda: str | None, cuda_driver_version: str | None
) -> tuple[str, None] | None:
    """``what`` was built for a CUDA major version the driver does not support."""
    built, driver = _version_tuple(cuda), _version_tuple(cuda_driver_version)
    if built is None or driver is None or built[0] <= driver[0]:
        return None
    return (
        f"{what} is built for CUDA {built[0]}, and the NVIDIA driver supports CUDA "
        f"{cuda_driver_version} at most",
        None,
    )


def static_problem(
    software: SoftwareInfo, backend: str, cuda_driver_version: str | None
) -> tuple[str, str] | None:
    """Why ``backend`` cannot use an NVIDIA GPU here, from the installed packages alone, and
    the fix; ``None`` when nothing known stops it (including when it is not installed, which
    is another finding, :attr:`SoftwareInfo.missing_backends`)."""
    # TensorFlow's build facts come from its own files: where they were read, it is there.
    if not software.backends.get(backend) and not (
        backend == TENSORFLOW and software.tf_is_cuda_build is not None
    ):
        return None
    if backend == TENSORFLOW:
        what = f"TensorFlow {software.tensorflow}" if software.tensorflow else "this TensorFlow"
        if software.tf_is_cuda_build is False:
            return f"{what} is a CPU-only build", TF_FIX
        missing = software.tf_cuda_libraries_missing
        if software.tf_is_cuda_build and missing:
            cuda = (software.tf_cuda_version or "").split(".")[0]
            return (
                f"{what} is a CUDA {cuda} build, but its CUDA libraries are not installed: "
                f"{', '.join(missing)} not found",
                TF_FIX,
            )
        old = _too_new(what, software.tf_cuda_version, cuda_driver_version)
        if old:
            cuda = (software.tf_cuda_version or "").split(".")[0]
            return old[0], f"an NVIDIA driver that supports CUDA {cuda}"
        return None
    if backend == JAX:
        fix = jax_fix(cuda_driver_version)
        if software.jax_is_cuda_build is False:
            return (
                f"jaxlib {software.jaxlib} runs on the CPU only, with no jax-cuda12-plugin or "
                "jax-cuda13-plugin installed",
                fix,
            )
        old = _too_new("JAX's CUDA plugin", software.jax_cuda_version, cuda_driver_version)
        return (old[0], fix) if old else None
    if backend == TORCH:
        fix = torch_fix(cuda_driver_version)
        what = f"PyTorch {software.torch}"
        if software.torch_is_cuda_build is False:
            return f"{what} is a CPU-only build", fix
        old = _too_new(what, software.torch_cuda_version, cuda_driver_version)
        return (old[0], fix) if old else None
    return None


def unused_gpu(profile: Any, backend: str) -> UnusedGpu | None:
    """The finding for ``backend`` on ``profile`` (a :class:`HardwareProfile`), known from the
    installed packages; ``None`` when NVML sees no GPU or nothing known stops the backend. A
    profile without software facts (a test's stand-in) has no finding."""
    gpus = tuple(getattr(profile, "gpus", ()) or ())
    software = getattr(profile, "software", None)
    if software is None or not gpus or not hasattr(software, "tf_is_cuda_build"):
        return None
    problem = static_problem(software, backend, getattr(profile, "cuda_driver_version", None))
    if problem is None:
        return None
    reason, fix = problem
    return UnusedGpu(backend, len(gpus), getattr(gpus[0], "name", None), reason, fix)


def unused_gpus(profile: HardwareProfile) -> tuple[UnusedGpu, ...]:
    """The finding for each installed backend that cannot use the GPUs NVML sees."""
    found = (unused_gpu(profile, backend) for backend in BACKENDS)
    return tuple(f for f in found if f is not None)


def unused_in_search(
    profile: HardwareProfile | None, backend: str, device: str, ran_on: str | None
) -> UnusedGpu | None:
    """The finding for a search's recommendation: its trials ran on the CPU while NVML saw a
    GPU the backend could not use.

    Args:
        profile: the profile the search stored (``HardwareProfile.from_dict`` of it).
        backend: the search's backend.
        device: the device the search asked for (``auto``, ``cpu``, ``gpu:N``).
        ran_on: where its trials ran, as the worker reported (``cpu``, ``gpu:0 (...)``).

    Returns:
        The static finding when there is one and the trials ran on the CPU; else, when the
        search asked for a GPU (``auto`` or ``gpu:N``) and the worker trained on the CPU, that
        proof with the reason unknown; ``None`` when the trials used a GPU, or the CPU was
        chosen while the backend could have used one.
    """
    if profile is None or (ran_on is not None and ran_on != "cpu"):
        return None
    if not profile.gpus:
        return None
    found = unused_gpu(profile, backend)
    if found is not None or ran_on is None or device == "cpu":
        return found
    return UnusedGpu(
        backend,
        len(profile.gpus),
        profile.gpus[0].name,
        f"its trials ran on the CPU although {device} was asked for",
        None,
        TRIAL,
    )
