"""The training functions of the GPU benchmark (``bench/gpu/run.py``): each runs as a
job of the local backend and, for the baseline, under bare ``torchrun`` (its source
written to a script with the call). Standard library and torch only; every import
inside the function, since only its source travels.

Marks: the benchmark learns what happened inside from small JSON files the function
writes into ``marks`` (``<tag>-first-<start>.json`` after its first step, with the time;
``<tag>-done-<start>.json`` with its steps per second; ``<tag>-pid.json`` with its pid;
``<tag>-ckpt-<step>.json`` after each checkpoint). Only rank 0 writes them.
"""

from __future__ import annotations

from typing import Any


def train_mlp(
    steps: int,
    width: int,
    layers: int,
    batch: int,
    warmup: int,
    marks: str,
    tag: str,
    device: str = "cuda",
    ckpt_every: int = 0,
    pace: float = 0.0,
) -> dict[str, Any]:
    """An MLP trained on one random batch (bf16 on a GPU): the first step's time, the
    steps per second after ``warmup`` steps, and — with ``ckpt_every`` — a checkpoint
    every so many steps in ``$KF_TRAINER_CHECKPOINT_DIR``, resumed from on a retry."""
    import json
    import os
    import time

    import torch
    import torch.distributed as dist

    def mark(name: str, **data: Any) -> None:
        if rank == 0:
            path = os.path.join(marks, f"{tag}-{name}.json")
            with open(path + ".tmp", "w") as fh:
                json.dump({"t": time.time(), **data}, fh)
            os.replace(path + ".tmp", path)

    cuda = device == "cuda"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    mark("pid", pid=os.getpid())
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device, dtype=dtype)

    folder = os.environ.get("KF_TRAINER_CHECKPOINT_DIR", "")
    start = 0
    if ckpt_every and folder and os.path.isdir(folder):
        found = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
        if found:
            state = torch.load(os.path.join(folder, found[-1]), map_location=device)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start = int(state["step"]) + 1

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    timed_from = None
    for step in range(start, steps):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if pace:
            time.sleep(pace)
        if step == start:
            sync()
            mark(f"first-{start}", step=step)
        if step == start + warmup:
            sync()
            timed_from = (step, time.perf_counter())
        if ckpt_every and folder and step % ckpt_every == ckpt_every - 1 and rank == 0:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"step-{step:010d}.pt")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                       path + ".tmp")  # fmt: skip
            os.replace(path + ".tmp", path)
            for old in os.listdir(folder):  # the newest is all a resume needs
                if old.startswith("step-") and old < os.path.basename(path):
                    os.remove(os.path.join(folder, old))
            mark(f"ckpt-{step}", step=step)
    sync()
    rate = None
    if timed_from is not None and steps - 1 > timed_from[0]:
        rate = (steps - 1 - timed_from[0]) / (time.perf_counter() - timed_from[1])
    mark(f"done-{start}", steps_per_s=rate, resumed_from=start)
    return {"resumed_from": start, "steps_per_s": rate, "loss": float(loss)}


def cuda_oom() -> None:
    """Ask the GPU for 4000 GiB."""
    import torch

    torch.empty(4000 * 2**30, dtype=torch.uint8, device="cuda")


def killed_worker(device: str = "cuda") -> None:
    """One step, then the worker is SIGKILLed (what the OOM killer or a preemption does)."""
    import os
    import signal

    import torch

    x = torch.ones(1024, device=device)
    x.sum().item()
    print("step 1 done", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def duplicate_gpu() -> None:
    """Two ranks on one GPU under NCCL."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    x = torch.ones(10, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()


def illegal_memory_access() -> str:
    """A kernel that reads an unmapped address: with cupy where it is installed, else a
    torch jiterator kernel (NVRTC, shipped with torch's CUDA wheels)."""
    import torch

    x = torch.ones(1024, device="cuda")
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        code = 'extern "C" __global__ void bad(float* p) { p[1ll << 40] = 1.0f; }'
        kernel = cupy.RawKernel(code, "bad")
        kernel((1,), (1,), (cupy.zeros(1, dtype=cupy.float32),))
        cupy.cuda.runtime.deviceSynchronize()
        return "cupy"
    from torch.cuda.jiterator import _create_jit_fn

    bad = _create_jit_fn(
        "template <typename T> T bad(T x) { return x + *((volatile T*)(0x10ULL)); }"
    )
    bad(x)
    torch.cuda.synchronize()
    return "jiterator"


def value_error_rank1() -> None:
    """Rank 1 of 2 raises; rank 0 then loses its peer (gloo) and is stopped."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad learning rate: -0.1")
    x = torch.ones(4)
    dist.all_reduce(x)
