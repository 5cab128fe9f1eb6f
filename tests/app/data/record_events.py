"""Record a real search's engine events for the GUI's replay tests.

    python tests/app/data/record_events.py

Runs a small real search on the CPU (a tiny MLP, float32 and mixed_bfloat16, batch 8-32) and
writes every event the engine emits (``to_dict``), one JSON object per line, to
search_events.jsonl. The replay tests read them back with ``tuner.api.event_from_dict``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tuner.api import FakeNvmlBackend, SearchSettings, SearchSpace, detect, tune
from tuner.search.request import TuneRequest

HERE = Path(__file__).resolve().parent


def main() -> None:
    events = []
    with tempfile.TemporaryDirectory() as tmp:
        tune(
            TuneRequest(
                "builtin:mlp:features=16,width=32,depth=1",
                space=SearchSpace(
                    policies=("float32", "mixed_bfloat16", "mixed_float16"),
                    batch_sizes=(8, 16, 32),
                    start_batch=8,
                ),
                settings=SearchSettings(measure_seconds=0.3, warmup_steps=2, device="cpu"),
                storage=f"sqlite:///{tmp}/s.db",
                study="recorded",
                profile=detect(FakeNvmlBackend.named("no_driver")),
            ),
            on_event=events.append,
        )
    with open(HERE / "search_events.jsonl", "w", encoding="utf-8") as fh:
        for event in events:
            fh.write(json.dumps(event.to_dict()) + "\n")
    print(f"{len(events)} events")


if __name__ == "__main__":
    main()
