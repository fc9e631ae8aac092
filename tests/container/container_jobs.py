"""Training functions the container tests run (importable by name: their source is
what reaches the containers)."""

from __future__ import annotations


def trivial(x: int = 1) -> dict[str, int]:
    return {"doubled": x * 2}


def chatty(lines: int = 3) -> int:
    import os

    for i in range(lines):
        print(f"line {i} of node {os.environ.get('PET_NODE_RANK')}", flush=True)
    return lines


def gloo_all_reduce() -> dict[str, float]:
    """Sum of (rank + 1) over all ranks, through a gloo all-reduce."""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    result = {"sum": float(value.item()), "world": float(dist.get_world_size())}
    print(f"rank {dist.get_rank()} of {os.environ['WORLD_SIZE']}: sum {value.item()}", flush=True)
    dist.destroy_process_group()
    return result


def read_dataset(path: str) -> dict[str, str]:
    import os

    with open(os.path.join(path, "train.txt")) as fh:
        return {"data": fh.read(), "workspace": os.environ["KF_TRAINER_WORKSPACE"]}


def fail(lr: float) -> None:
    raise ValueError(f"learning rate {lr} diverged")


def sleeper(seconds: float = 120) -> None:
    import time

    print("sleeping", flush=True)
    time.sleep(seconds)


def reports_progress(steps: int = 3) -> dict[str, int]:
    """Reports each step through the suite's reporter (carried in the program: the
    image has no kf_trainer_core)."""
    from kf_trainer_core.report import report

    for step in range(steps):
        report(progress=100 * (step + 1) / steps, metrics={"loss": 1 / (step + 1), "step": step})
    return {"steps": steps}


def resume_once() -> dict[str, object]:
    """Save a checkpoint and die like a lost container on the first attempt; resume from
    it on the next (the checkpoint helper is inlined: the image lacks the suite)."""
    import os

    from kf_trainer_core.checkpoints import latest, save_json, step_of

    last = latest()
    if last is None:
        save_json(0, {"seen": True})
        os._exit(137)
    return {"resumed_from": step_of(last) + 1, "dir": os.environ["KF_TRAINER_CHECKPOINT_DIR"]}
