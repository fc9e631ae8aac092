"""Training functions that checkpoint and resume, for the checkpoint tests (in a real
file so that their source can be captured and shipped)."""

from __future__ import annotations

from typing import Any


def counting(steps: int = 8, stall_after: int = -1, ready: str = "") -> dict[str, Any]:
    """Count ``steps`` steps, a checkpoint after each. On the first attempt (nothing to
    resume from) it stalls after step ``stall_after``, touching ``ready``, until it is
    killed: a node lost mid-training."""
    import os
    import time

    from kf_trainer_core.checkpoints import checkpoint_dir, latest, load_json, save_json, step_of

    last = latest()
    start = step_of(last) + 1 if last is not None else 0
    total = load_json(last)["total"] if last is not None else 0
    print(f"checkpoint dir {checkpoint_dir()}; starting at step {start}", flush=True)
    for step in range(start, steps):
        total += step
        save_json(step, {"total": total})
        print(f"step {step} saved", flush=True)
        if last is None and step == stall_after:
            if ready:
                with open(ready, "w") as fh:
                    fh.write(str(os.getpid()))
            time.sleep(600)
    return {
        "resumed_from": start,
        "total": total,
        "dir": os.environ.get("KF_TRAINER_CHECKPOINT_DIR"),
    }
