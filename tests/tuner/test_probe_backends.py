"""The numerics probe on JAX, where each model's pass is one compiled function: it finds what
the eager pass finds (the same hazards, in the same layers, with the same figures), falls back
to the eager pass where the model cannot be traced or fails, and says where its seconds went.

The cases run in a process of their own (tests/tuner/probe_cases.py), as the backend is chosen
before Keras is imported; tests/tuner/test_numerics.py covers the probe on TensorFlow in this
process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuner.trials.hazards import DIVERGENCE, INTEGER_CAST, OVERFLOW, POLICY_FAILURE, UNDERFLOW

#: One xdist worker runs the module (``--dist loadgroup``), and its fixture is session-scoped:
#: made once. (Module-scoped, it was made twice in one run: xdist put another module's tests
#: between this one's, and pytest tears a module's fixtures down between them.)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("probe_backends")]

SCRIPT = Path(__file__).with_name("probe_cases.py")

#: What each case must find (the kinds, in the probe's order), compiled or eager.
EXPECTED = {
    "integer_cast_f16": [INTEGER_CAST],
    "integer_cast_bf16": [INTEGER_CAST],
    "overflow": [OVERFLOW, DIVERGENCE],
    "underflow": [UNDERFLOW],
    "underflow_scaled": [],
    "divergence": [DIVERGENCE, UNDERFLOW],
    "reads_its_values": [],
    "policy_failure": [POLICY_FAILURE],
    "cnn": [],
}


@pytest.fixture(scope="session")
def jax_cases() -> dict[str, Any]:
    pytest.importorskip("jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def close(a: Any, b: Any, rel: float = 1e-4) -> bool:
    """Equal, floats within ``rel`` (the compiled float32 twin may sum in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_compiled_pass_finds_what_the_eager_pass_finds(
    jax_cases: dict[str, Any], case: str
) -> None:
    compiled, eager = jax_cases[case]["default"], jax_cases[case]["eager"]
    assert [kind for kind, _, _ in compiled["hazards"]] == EXPECTED[case]
    assert compiled["hazards"] == eager["hazards"]
    assert compiled["failure"] == eager["failure"]
    assert compiled["compared"]
    assert eager["compared"]
    assert close(compiled["numerics"], eager["numerics"]), (compiled["numerics"], eager)


def test_each_model_is_compiled_once_and_its_parts_are_reported(jax_cases: dict[str, Any]) -> None:
    # mixed_float16: each model's one compiled pass gives its gradients too.
    parts = jax_cases["cnn"]["default"]["parts"]
    for side in ("float32", "policy"):
        assert {f"{side}_trace", f"{side}_compile", f"{side}_run"} <= parts.keys()
        assert f"{side}_forward" not in parts
        assert f"{side}_gradients" not in parts
    assert {"twin", "weights", "compare", "flush_check"} <= parts.keys()
    assert sum(parts.values()) <= jax_cases["cnn"]["default"]["probe_s"] + 0.01
    # The fix for an integer cast is compiled as a pass of its own.
    assert "fixed_compile" in jax_cases["integer_cast_bf16"]["default"]["parts"]
    # Eagerly, nothing is compiled as a whole.
    assert not any(k.endswith("_compile") for k in jax_cases["cnn"]["eager"]["parts"])


def test_a_model_that_cannot_be_traced_or_fails_runs_eagerly(jax_cases: dict[str, Any]) -> None:
    # A layer that reads its values in Python: the tracing fails, the pass runs eagerly.
    parts = jax_cases["reads_its_values"]["default"]["parts"]
    assert "policy_forward" in parts
    assert "policy_compile" not in parts
    # A layer that raises under the policy: reported from the eager pass, as before.
    found = jax_cases["policy_failure"]["default"]
    assert "needs float32 inputs" in found["failure"]
    assert "policy_forward" in found["parts"]
    assert "float32_compile" in found["parts"]
