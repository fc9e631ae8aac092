"""Training functions for the local backend's tests (importable, defined in a real file
so their source can be captured), and a small command line that submits or waits from
another process::

    python local_jobs.py submit STATE_DIR IDENTITY [FUNC]   # prints the job's name
    python local_jobs.py wait STATE_DIR NAME                # prints the result as JSON
"""

from __future__ import annotations

import json
import sys
from typing import Any


def trivial(x: int = 1) -> dict[str, int]:
    return {"doubled": x * 2}


def report_env(out: str) -> dict[str, str]:
    """Write this rank's distributed environment to ``out/rank-<RANK>.json``."""
    import json
    import os

    keys = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "JOB_COMPLETION_INDEX",
        "KF_TRAINER_WORKSPACE",
        "KF_TRAINER_LAUNCHER",
    ]
    env = {k: os.environ.get(k, "") for k in keys}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank-{env['RANK']}.json"), "w") as fh:
        json.dump(env, fh)
    print(f"rank {env['RANK']} of {env['WORLD_SIZE']}", flush=True)
    return env


def fail_on_rank(rank: int = 1) -> None:
    import os
    import time

    me = int(os.environ.get("RANK", "0"))
    print(f"rank {me} starting", flush=True)
    if me == rank:
        raise ValueError(f"boom on rank {me}")
    time.sleep(60)


def spawn_tree(out: str) -> None:
    """A child that has a grandchild, and a daemon that leaves the process group;
    their pids go to ``out/pids.txt``; then sleep until cancelled."""
    import os
    import subprocess
    import sys
    import time

    grandchild_code = (
        "import subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(g.pid, flush=True); time.sleep(120)"
    )
    child = subprocess.Popen([sys.executable, "-c", grandchild_code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    escaped = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    os.makedirs(out, exist_ok=True)
    pids = [os.getpid(), child.pid, grandchild, escaped.pid]
    with open(os.path.join(out, "pids.tmp"), "w") as fh:
        fh.write(" ".join(str(p) for p in pids))
    os.replace(os.path.join(out, "pids.tmp"), os.path.join(out, "pids.txt"))
    print("tree started", flush=True)
    time.sleep(120)


def chatty(lines: int = 5, delay: float = 0.1) -> int:
    import time

    for i in range(lines):
        print(f"line {i}", flush=True)
        time.sleep(delay)
    return lines


def read_inputs(dataset: str, model: str) -> dict[str, str]:
    import os

    with open(os.path.join(dataset, "train.txt")) as fh:
        data = fh.read()
    with open(os.path.join(model, "weights.txt")) as fh:
        weights = fh.read()
    return {"data": data, "weights": weights, "workspace": os.environ["KF_TRAINER_WORKSPACE"]}


def resumable(marker: str) -> str:
    """Sleeps on its first run; returns at once when run again (after a resume)."""
    import os
    import time

    if os.path.exists(marker):
        return "second run"
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w"):
        pass
    print("first run: sleeping", flush=True)
    time.sleep(120)
    return "first run"


def kill_self() -> None:
    import os
    import signal

    print("about to die", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def scripted(counter: str, plan: str = "fail,sleep") -> str:
    """Run number i (counted in directory ``counter``) does the i-th action of ``plan``
    (the last one repeats): ``fail``, ``sleep`` (a minute) or ``ok``."""
    import os
    import time

    os.makedirs(counter, exist_ok=True)
    n = len(os.listdir(counter))
    with open(os.path.join(counter, f"run-{n}-{os.getpid()}"), "w"):
        pass
    actions = plan.split(",")
    action = actions[min(n, len(actions) - 1)]
    if action == "fail":
        raise SystemExit(3)
    if action == "sleep":
        time.sleep(60)
    return f"run {n}"


def sleep_on_rank(rank: int = 0, seconds: float = 60) -> None:
    """Rank ``rank`` sleeps; the others end at once."""
    import os
    import time

    if int(os.environ.get("RANK", "0")) == rank:
        time.sleep(seconds)


def sleeper(seconds: float = 60) -> None:
    import time

    print("sleeping", flush=True)
    time.sleep(seconds)


def wait_for_file(path: str) -> str:
    """Print a line, then return once ``path`` exists (a barrier a test releases)."""
    import os
    import time

    print("waiting", flush=True)
    while not os.path.exists(path):
        time.sleep(0.01)
    return "released"


def gloo_all_reduce() -> float:
    """Sum of (rank + 1) over all ranks, through a gloo all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return float(value.item())


def main(argv: list[str]) -> int:
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.config import LocalConfig
    from kf_trainer_core.spec import CustomTrainer

    command, state_dir, arg = argv[0], argv[1], argv[2]
    with TrainerClient(LocalConfig(state_dir=state_dir)) as client:
        if command == "submit":
            func: Any = globals()[argv[3] if len(argv) > 3 else "trivial"]
            args = {"x": 5} if func is trivial else None
            name = client.train(trainer=CustomTrainer(func, func_args=args), identity=arg)
            print(name, flush=True)
            return 0
        if command == "wait":
            _, result = client.wait(arg, timeout=60)
            print(json.dumps(result), flush=True)
            return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
