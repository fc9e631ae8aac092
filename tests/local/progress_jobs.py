"""Training functions that report progress (importable from a real file so that their
source can be captured)."""

from __future__ import annotations


def paced(steps: int = 3, gate: str = "") -> dict[str, int]:
    """Report each step, then wait for the test to create ``gate/<step>``: the test
    sees every report arrive while the job runs, without sleeping."""
    import os
    import time

    from kf_trainer_core.report import report, track

    for i in track(range(steps)):
        report(metrics={"loss": round(1.0 / (i + 1), 4), "step": i})
        deadline = time.monotonic() + 60
        while gate and not os.path.exists(os.path.join(gate, str(i))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {i} never opened")
            time.sleep(0.02)
    return {"steps": steps}


def every_rank_reports() -> str:
    """Each rank reports its own rank; only rank 0's may arrive."""
    import os

    from kf_trainer_core.report import report

    rank = os.environ.get("RANK", "0")
    for i in range(20):
        report(progress=i * 5, metrics={"rank": rank})
    return rank
