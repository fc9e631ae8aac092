"""Each progress state is shown once (the quickstart printed "100% done" twice: the
running job's last report, then the same report again once the finished job had lost
its time left), the intermediate states a job reports are shown, and a finished
percentage says no time left."""

from __future__ import annotations

import threading
from pathlib import Path

from local_helpers import wait_for

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import Progress
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

# Every report is printed at once (no 5 s coalescing), so each step can show.
FAST = {"KF_TRAINER_REPORT_INTERVAL": "0"}


def paced_then_saves(steps: int, gate: str) -> dict[str, int]:
    """Report each step once the test opens ``gate/<step>``, then keep running after
    the loop (as a function that saves its model does) until ``gate/end`` opens."""
    import os
    import time

    from kf_trainer_core.report import report, track

    def wait(name: str) -> None:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(gate, name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {name} never opened")
            time.sleep(0.02)

    for i in track(range(steps)):
        report(metrics={"loss": round(1.0 / (i + 1), 4), "step": i})
        wait(str(i))
    wait("end")
    return {"steps": steps}


def test_each_progress_state_is_shown_once(client: TrainerClient, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    spec = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(
            paced_then_saves, func_args={"steps": 3, "gate": str(gate)}, env=FAST
        ),
    )
    name = client.submit(spec).job.name
    seen: list[Progress] = []
    outcome: list[object] = []

    def wait() -> None:
        outcome.append(client.wait(name, timeout=60, on_progress=seen.append))

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        for step in range(3):

            def shown(want: int = step) -> bool:
                return any(p.metrics.get("step") == want for p in list(seen))

            wait_for(shown, what=f"step {step} shown")
            (gate / str(step)).touch()
        # The running job at 100% (its time left: 0 s), then the finished one.
        wait_for(lambda: any(p.percentage == 100 for p in list(seen)), what="100% shown")
        (gate / "end").touch()
    finally:
        for step in [*map(str, range(3)), "end"]:
            (gate / step).touch()
        waiter.join(60)
    assert outcome, "the wait did not end"
    texts = ["; ".join(p.summary()) for p in seen]
    assert len(texts) == len(set(texts)), texts
    # The job's intermediate reports are shown, in order, and the end once.
    percentages = [p.percentage for p in seen]
    assert percentages == sorted(percentages), texts  # type: ignore[type-var]
    assert any(p is not None and 0 < p < 100 for p in percentages), texts
    assert percentages.count(100) == 1, texts
    assert texts[-1] == "100% done; loss=0.3333, step=2"


def test_a_finished_percentage_says_no_time_left() -> None:
    assert Progress(percentage=100, estimated_remaining_seconds=0).summary() == ["100% done"]
    assert Progress(percentage=40, estimated_remaining_seconds=90).summary() == [
        "40% done",
        "about 1m 30s left",
    ]
