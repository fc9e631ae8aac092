"""Torchrun logs of failures this machine cannot produce (it has no GPU), composed from
the documented texts of CUDA, NCCL and torch in the shape torchrun 2.13 prints (the
shape of ``torchrun_logs/``, captured here with gloo): the workers' errors, prefixed
``[rankN]:``, then torchrun's ``ChildFailedError`` traceback and failure summary.

The texts are written here, from the error strings CUDA's runtime, NCCL and torch
document; see ``torchrun_logs/README.md`` for the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "torchrun_logs"

#: The lines torch adds after every CUDA error it raises.
CUDA_TRAILER = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]


def fixture(name: str) -> list[str]:
    """A captured log of ``torchrun_logs/``."""
    return (FIXTURES / name).read_text().splitlines()


@dataclass
class Worker:
    """One failed worker: its rank, its output (without prefix) and how it ended."""

    rank: int
    output: list[str] = field(default_factory=list)
    exitcode: int = 1
    local_rank: int | None = None

    @property
    def local(self) -> int:
        return self.rank if self.local_rank is None else self.local_rank


def traceback(exception: list[str], call: str = "train()") -> list[str]:
    """A worker's traceback ending with ``exception`` (its lines)."""
    return [
        "Traceback (most recent call last):",
        '  File "<dir>/train.py", line 31, in <module>',
        f"    {call}",
        '  File "<dir>/train.py", line 22, in train',
        "    loss = model(batch).sum()",
        "           ^^^^^^^^^^^^",
        *exception,
    ]


_LAUNCHER_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    '  File "<venv>/lib/python3.12/site-packages/torch/distributed/run.py", line 1032, in <module>',
    "    main()",
    '  File "<venv>/lib/python3.12/site-packages/torch/distributed/launcher/api.py", line 383, '
    "in launch_agent",
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
]

_SIGNALS = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM"}


def _record(index: int, worker: Worker, pid: int, host: str) -> list[str]:
    code = worker.exitcode
    name = _SIGNALS.get(code)
    trace = (
        f"Signal {-code} ({name}) received by PID {pid}"
        if name
        else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    )
    return [
        f"[{index}]:",
        "  time      : 2026-11-27_09:41:07",
        f"  host      : {host}",
        f"  rank      : {worker.rank} (local_rank: {worker.local})",
        f"  exitcode  : {code} (pid: {pid})" + (f"  ({name})" if name else " "),
        "  error_file: <N/A>",
        f"  traceback : {trace}",
    ]


def torchrun_log(
    *workers: Worker, root: int = 0, host: str = "train-node-0-0", script: str = "train.py"
) -> list[str]:
    """A node's log: each worker's output prefixed with its rank, then torchrun's
    traceback and summary naming ``workers[root]`` the root cause."""
    lines: list[str] = []
    for worker in workers:
        lines += [f"[rank{worker.rank}]: {line}" for line in worker.output]
    first = workers[root]
    lines.append(
        f"E1127 09:41:07.118000 88 torch/distributed/elastic/multiprocessing/api.py:1002] "
        f"failed (exitcode: {first.exitcode}) local_rank: {first.local} (pid: 4100) of "
        "binary: <venv>/bin/python3"
    )
    lines += _LAUNCHER_TRACEBACK
    bar, rule = "=" * 60, "-" * 60
    lines += [bar, f"{script} FAILED", rule, "Failures:"]
    others = [w for i, w in enumerate(workers) if i != root]
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    for n, worker in enumerate(others, start=1):
        lines += _record(n, worker, 4100 + n, host)
    lines += [rule, "Root Cause (first observed failure):"]
    lines += _record(0, first, 4100, host)
    lines.append(bar)
    return lines
