"""Issue 71, with scripts of our own in the style of KerasHub's fine-tuning guides (plain Keras,
no download): a whole model in bfloat16 with AdamW, whose run today does not train, said first
with its fix; and a frozen backbone with LoRA, where a full half policy is offered and kept only
if its trainable weights move. Real TensorFlow trials on the CPU, few of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_scripts import SCRIPTS

from tuner import cli

FULL_BF16 = SCRIPTS / "full_bf16_adamw.py"
FROZEN = SCRIPTS / "frozen_backbone.py"
FIX = "Fix: use mixed_bfloat16 (float32 weights), or keep the optimizer's state in float32"


def _tune(
    capsys: pytest.CaptureFixture[str], script: Path, store: str, *args: str
) -> dict[str, Any]:
    code = cli.main(
        ["tune", "--script", str(script), "--backend", "tensorflow", "--device", "cpu",
         "--measure-seconds", "0.5", "--max-trials", "8", "--storage", store, "--json",
         *(("--", *args) if args else ())]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _show(capsys: pytest.CaptureFixture[str], session: str, store: str) -> dict[str, Any]:
    assert cli.main(["show", session, "--storage", store, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _trials_of(shown: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    return [t["result"] for t in shown["trials"] if t["result"]["spec"]["policy"] == policy]


def _not_training(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in result["hazards"] if h["kind"] == "not_training"]


@pytest.mark.slow
def test_a_full_bfloat16_run_that_does_not_train_is_said_first_with_its_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    rec = _tune(capsys, FULL_BF16, store)
    shown = _show(capsys, rec["session"], store)
    first = shown["trials"][0]["result"]
    # What the user runs today, read back as the full policy it is, run unchanged as trial #0.
    assert (first["spec"]["policy"], first["spec"]["batch_size"]) == ("bfloat16", 32)
    assert first["trained"]["policy"] == "bfloat16"
    assert first["status"] == "unsafe"
    (trap,) = _not_training(first)
    assert (trap["severity"], trap["whose"]) == ("unsafe", "precision")
    assert "(AdamW's beta_2 0.999 is 1.0 in bfloat16)" in trap["evidence"]
    # The recommendation's first line, the reason's first sentence, and no speed-up against it.
    line = f"your run today does not train: {trap['evidence']}. {FIX}"
    assert rec["today_trap"] == line
    assert rec["reason"].startswith("Y" + line[1:])
    assert rec.get("today") is None
    # A setup that trains is recommended: float32 weights, whose trials moved them.
    assert rec["policy"] in ("float32", "mixed_bfloat16", "mixed_float16")
    picked = [shown["trials"][n]["result"] for n in rec["setup_trials"]]
    assert picked
    assert not any(_not_training(r) for r in picked)
    assert all(
        a["rejected"] and "did not move" in a["rejected"]
        for a in rec["alternatives"]
        if a["policy"] == "bfloat16"
    )
    # The CLI says it before the setup.
    assert cli.main(["show", rec["session"], "--storage", store]) == 0
    text = capsys.readouterr().out
    after = text.split("Recommendation:", 1)[1].strip().splitlines()
    assert after[0].startswith("today")
    assert "Your run today does not train: none of " in after[0]
    assert any(row.startswith("setup") for row in after[1:])


@pytest.mark.slow
def test_a_frozen_backbone_is_offered_bfloat16_kept_only_where_its_weights_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """LoRA on a frozen Dense stack (4% of the weights train): bfloat16 is offered beside
    mixed_bfloat16. Its adapters and its float32 head move: not a trap. With the head in the
    policy (bfloat16 weights under Adam), the head does not move: bfloat16 is unsafe there,
    and never recommended."""
    store = f"sqlite:///{tmp_path / 'lora.db'}"
    rec = _tune(capsys, FROZEN, store)
    shown = _show(capsys, rec["session"], store)
    assert shown["trials"][0]["result"]["trained"]["trainable_share"] < 0.5
    assert any(
        "bfloat16 and float16 (weights in the half type too) tried" in n for n in rec["notes"]
    )
    (half,) = _trials_of(shown, "bfloat16")[:1]
    assert half["trained"]["policy"] == "bfloat16"
    assert half["trained"]["trainable_dtypes"] == ["float32"]  # LoRA's adapters, the head
    assert not _not_training(half)
    assert half["status"] == "ok"

    store = f"sqlite:///{tmp_path / 'head.db'}"
    rec = _tune(capsys, FROZEN, store, "--head-in-policy")
    shown = _show(capsys, rec["session"], store)
    (half,) = _trials_of(shown, "bfloat16")[:1]
    (trap,) = _not_training(half)
    assert half["status"] == "unsafe"
    assert trap["evidence"].startswith(
        "none of the 2 bfloat16 trainable weights (of 8; the float32 ones moved) moved over "
    )
    assert "(Adam's beta_2 0.999 is 1.0 in bfloat16)" in trap["evidence"]
    assert rec["policy"] != "bfloat16"
    assert rec.get("today_trap") is None  # the script's own run (float32) trains
