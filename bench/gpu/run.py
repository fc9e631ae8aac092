"""The GPU benchmark: one short script for a machine with an NVIDIA GPU, measuring the
suite's local backend (torchrun under its supervisor) against bare ``torchrun`` in the
same run, and the failure class the suite gives each failure GPU clusters meet.

    PYTHONPATH=src python3 bench/gpu/run.py           # a GPU, torch installed (~4 min)
    PYTHONPATH=src python3 bench/gpu/run.py --cpu     # the same plumbing on CPU (gloo)

It needs the machine's own Python with torch, plus pydantic and PyYAML: where those are
missing it unpacks the wheels of ``.whl/`` (``bench/gpu/fetch_wheels.sh`` fetches them)
onto its path. Nothing else is installed and nothing is downloaded. Measured, each
against bare torchrun:

* **first step**: from the submit (``client.train``; bare: starting ``torchrun``) to the
  end of the first training step of a 4 x 4096 bf16 MLP (CUDA initialised, model built);
* **steps/s**: the same function's training loop after a warm-up;
* **resume**: a worker SIGKILLed after a checkpoint, to the first step of the resumed
  run — ours: the failure classed ``infrastructure``, the next attempt of the same
  identity submitted (what the adapters' default retry does); bare: ``torchrun
  --max-restarts 1`` restarting its worker;

and the class of each failure (CUDA out of memory, a SIGKILLed worker, two ranks on one
GPU under NCCL, an illegal memory access, a ValueError in rank 1 of 2), with its evidence.
A case that breaks is reported as such; the script goes on. It prints a table and writes
``gpu_bench.json`` to ``$OUT`` (or ``--out``). ``BENCHMARKS.md``'s GPU section is
rendered from that file: ``python -m bench.gpu.record FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import inspect
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JSON = dict[str, Any]


def ensure_path() -> None:
    """``src`` and, where pydantic or PyYAML is missing, the wheels of ``.whl/`` for
    this interpreter, unpacked once into ``.whl/site-cpXY``."""
    for path in (str(REPO / "src"), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        import pydantic  # noqa: F401
        import yaml  # noqa: F401

        return
    except ImportError:
        pass
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    site = REPO / ".whl" / f"site-{tag}"
    if not site.is_dir():
        wheels = [
            w
            for w in glob.glob(str(REPO / ".whl" / "*.whl"))
            if "-py3-none-any" in w or f"-{tag}-" in w
        ]
        if not wheels:
            sys.exit("pydantic and PyYAML are missing and .whl/ has none of their wheels "
                     "(run bench/gpu/fetch_wheels.sh where PyPI is reachable)")  # fmt: skip
        tmp = Path(tempfile.mkdtemp(dir=REPO / ".whl"))
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(tmp)
        tmp.rename(site)
    sys.path.insert(0, str(site))


ensure_path()

from bench.gpu import jobs  # noqa: E402
from kf_trainer_core.client import TrainerClient  # noqa: E402
from kf_trainer_core.config import LocalConfig  # noqa: E402
from kf_trainer_core.errors import TrainJobFailedError  # noqa: E402
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec  # noqa: E402

#: Expected class of each failure case (and what else a good answer says).
EXPECTED = {
    "cuda-oom": ("capacity", "ran out of GPU memory"),
    "sigkilled-worker": ("infrastructure", "killed by SIGKILL"),
    "nccl-duplicate-gpu": ("configuration", "Duplicate GPU"),
    "illegal-memory-access": ("user-code", "illegal memory access"),
    "value-error-rank-1": ("user-code", "rank 1"),
}
GPU_ONLY = {"cuda-oom", "nccl-duplicate-gpu", "illegal-memory-access"}


@dataclass
class Sizes:
    width: int
    layers: int
    batch: int
    warmup: int
    steps: int
    resume_steps: int
    ckpt_every: int
    kill_after: int
    pace: float
    reps: int


# A checkpoint of the GPU model (weights and AdamW state) is ~400 MB: few of them, and
# only the newest kept.
GPU_SIZES = Sizes(4096, 4, 1024, 50, 1050, 1500, 500, 1000, 0.0, 2)
CPU_SIZES = Sizes(128, 2, 32, 5, 105, 400, 20, 100, 0.01, 1)


@dataclass
class Bench:
    """One run: where it works, its client, its clock."""

    cpu: bool
    sizes: Sizes
    work: Path
    deadline: float
    client: TrainerClient
    python: str = sys.executable
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        return "cpu" if self.cpu else "cuda"

    @property
    def marks(self) -> Path:
        return self.work / "marks"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def train_args(self, tag: str, **over: Any) -> JSON:
        s = self.sizes
        args: JSON = {
            "steps": s.steps, "width": s.width, "layers": s.layers, "batch": s.batch,
            "warmup": s.warmup, "marks": str(self.marks), "tag": tag, "device": self.device,
            "pace": s.pace,
        }  # fmt: skip
        args.update(over)
        return args


# ---------------------------------------------------------------------- helpers


def wait_mark(bench: Bench, name: str, timeout: float, proc: Any = None) -> JSON:
    """The mark ``name`` once it is written (``TimeoutError`` after ``timeout`` s, or
    when ``proc`` — a bare torchrun — ended without it)."""
    path = bench.marks / f"{name}.json"
    end = time.monotonic() + min(timeout, max(bench.left(), 1.0))
    while time.monotonic() < end:
        if path.exists():
            with contextlib.suppress(ValueError, OSError):
                return dict(json.loads(path.read_text()))
        if proc is not None and proc.poll() is not None and not path.exists():
            raise RuntimeError(f"torchrun ended ({proc.returncode}) before {name}")
        time.sleep(0.01)
    raise TimeoutError(f"no {name} within {timeout:.0f} s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def bare_torchrun(
    bench: Bench,
    func: Callable[..., Any],
    kwargs: JSON,
    *,
    nproc: int = 1,
    env: dict[str, str] | None = None,
    restarts: int = 0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``func(**kwargs)`` under ``python -m torch.distributed.run`` (its source in a
    script), the baseline; stopped on exit."""
    script = bench.work / f"bare_{func.__name__}_{time.monotonic_ns()}.py"
    script.write_text(
        "from __future__ import annotations\nfrom typing import Any\n\n"
        + inspect.getsource(func)
        + f"\n\nif __name__ == '__main__':\n    {func.__name__}(**{kwargs!r})\n"
    )
    argv = [bench.python, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc-per-node={nproc}", f"--master-port={free_port()}",
            f"--max-restarts={restarts}", str(script)]  # fmt: skip
    log = open(bench.work / f"{script.stem}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def ours(bench: Bench, func: Callable[..., Any], kwargs: JSON, **trainer: Any) -> str:
    """Submit ``func(**kwargs)`` as a job of the local backend; its name."""
    return bench.client.train(trainer=CustomTrainer(func, func_args=kwargs, **trainer))


def stop_all(client: TrainerClient) -> None:
    """Delete whatever job still runs (one that timed out holds the GPU)."""
    with contextlib.suppress(Exception):
        for job in client.list_jobs():
            if not job.status.terminal:
                client.delete_job(job.name)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# ---------------------------------------------------------------------- measurements


def start_and_speed(bench: Bench) -> JSON:
    """Submit to first step, and steps/s, ours and bare alternating."""
    firsts: dict[str, list[float]] = {"ours": [], "bare": []}
    rates: dict[str, list[float]] = {"ours": [], "bare": []}
    for rep in range(bench.sizes.reps):
        for side in ("ours", "bare") if rep % 2 == 0 else ("bare", "ours"):
            if bench.left() < 60:
                bench.notes.append(f"start/speed: {side} run {rep + 1} skipped (time)")
                continue
            tag = f"speed-{side}-{rep}"
            args = bench.train_args(tag)
            bench.say(f"first step and steps/s: {side}, run {rep + 1}/{bench.sizes.reps}")
            t0 = time.time()
            if side == "ours":
                name = ours(bench, jobs.train_mlp, args)
                first = wait_mark(bench, f"{tag}-first-0", 180)
                done = wait_mark(bench, f"{tag}-done-0", 180)
                bench.client.wait(name, timeout=max(bench.left(), 30))
            else:
                with bare_torchrun(bench, jobs.train_mlp, args) as proc:
                    first = wait_mark(bench, f"{tag}-first-0", 180, proc)
                    done = wait_mark(bench, f"{tag}-done-0", 180, proc)
                    proc.wait(timeout=60)
            firsts[side].append(first["t"] - t0)
            if done.get("steps_per_s"):
                rates[side].append(float(done["steps_per_s"]))
    out: JSON = {"first_step_s": firsts, "steps_per_s": rates}
    for key, series in (("first_step_s", firsts), ("steps_per_s", rates)):
        o, b = median(series["ours"]), median(series["bare"])
        out[f"{key}_median"] = {"ours": o, "bare": b, "ratio": o / b if o and b else None}
    return out


def resume(bench: Bench) -> JSON:
    """A worker SIGKILLed after a checkpoint: kill to the resumed run's first step."""
    s = bench.sizes
    out: JSON = {}
    kill_mark = f"ckpt-{s.kill_after - 1}"
    for side in ("ours", "bare"):
        if bench.left() < 60:
            out[side] = {"skipped": "out of time"}
            continue
        tag = f"resume-{side}"
        args = bench.train_args(tag, steps=s.resume_steps, ckpt_every=s.ckpt_every)
        bench.say(f"resume after a lost worker: {side}")
        try:
            out[side] = (_resume_ours if side == "ours" else _resume_bare)(bench, tag, args,
                                                                          kill_mark)  # fmt: skip
        except Exception as exc:
            out[side] = {"error": f"{type(exc).__name__}: {exc}"}
    o, b = (out.get(k, {}).get("resume_s") for k in ("ours", "bare"))
    out["ratio"] = o / b if o and b else None
    return out


def _kill(bench: Bench, tag: str) -> float:
    pid = int(wait_mark(bench, f"{tag}-pid", 60)["pid"])
    os.kill(pid, signal.SIGKILL)
    return time.time()


def _resume_ours(bench: Bench, tag: str, args: JSON, kill_mark: str) -> JSON:
    identity = ("gpu-bench", tag, str(os.getpid()))
    spec = TrainJobSpec(trainer=CustomTrainer(jobs.train_mlp, func_args=args))
    first = bench.client.submit(spec, identity=identity).job.name
    wait_mark(bench, f"{tag}-{kill_mark}", 180)
    killed_at = _kill(bench, tag)
    try:
        bench.client.wait(first, timeout=120)
        return {"error": "the killed attempt completed"}
    except TrainJobFailedError as exc:
        klass, evidence = exc.failure_class.value, exc.failure.classified_by
    detected = time.time() - killed_at
    retry = bench.client.submit(spec, identity=identity).job.name  # the adapters' retry
    resumed = _first_resumed(bench, tag, 180)
    _, result = bench.client.wait(retry, timeout=max(bench.left(), 60))
    return {
        "resume_s": resumed["t"] - killed_at, "failure_seen_s": detected,
        "class": klass, "evidence": evidence, "resumed_from": result.get("resumed_from"),
    }  # fmt: skip


def _resume_bare(bench: Bench, tag: str, args: JSON, kill_mark: str) -> JSON:
    folder = bench.work / "bare-checkpoints"
    env = {"KF_TRAINER_CHECKPOINT_DIR": str(folder)}
    with bare_torchrun(bench, jobs.train_mlp, args, env=env, restarts=1) as proc:
        wait_mark(bench, f"{tag}-{kill_mark}", 180, proc)
        killed_at = _kill(bench, tag)
        resumed = _first_resumed(bench, tag, 180)
        proc.wait(timeout=max(bench.left(), 60))
    return {"resume_s": resumed["t"] - killed_at, "resumed_from": resumed.get("step")}


def _first_resumed(bench: Bench, tag: str, timeout: float) -> JSON:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for path in bench.marks.glob(f"{tag}-first-*.json"):
            if not path.name.endswith("-first-0.json"):
                with contextlib.suppress(ValueError, OSError):
                    return dict(json.loads(path.read_text()))
        time.sleep(0.01)
    raise TimeoutError("the resumed run never made its first step")


def failures(bench: Bench) -> JSON:
    """The class the suite gives each failure."""
    cases: list[tuple[str, Callable[..., Any], JSON, JSON]] = [
        ("cuda-oom", jobs.cuda_oom, {}, {}),
        ("sigkilled-worker", jobs.killed_worker, {"device": bench.device}, {}),
        ("nccl-duplicate-gpu", jobs.duplicate_gpu, {}, {"num_proc_per_node": 2}),
        ("illegal-memory-access", jobs.illegal_memory_access, {}, {}),
        ("value-error-rank-1", jobs.value_error_rank1, {}, {"num_proc_per_node": 2}),
    ]
    out: JSON = {}
    for case, func, kwargs, trainer in cases:
        expected, says = EXPECTED[case]
        if bench.cpu and case in GPU_ONLY:
            out[case] = {"expected": expected, "skipped": "no GPU (--cpu)"}
            continue
        if bench.left() < 25:
            out[case] = {"expected": expected, "skipped": "out of time"}
            continue
        bench.say(f"failure class: {case}")
        t0 = time.monotonic()
        try:
            name = ours(bench, func, kwargs, **trainer)
            bench.client.wait(name, timeout=min(90, max(bench.left(), 20)))
            out[case] = {"expected": expected, "error": "the job completed"}
        except TrainJobFailedError as exc:
            evidence = exc.failure.classified_by
            got = exc.failure_class.value
            out[case] = {
                "expected": expected, "class": got, "evidence": evidence,
                "error_type": type(exc).__name__, "retryable": exc.failure.retryable,
                "right": got == expected and says in evidence,
                "message": exc.failure.message[-500:], "log_tail": exc.failure.log_tail[-12:],
            }  # fmt: skip
        except Exception as exc:
            out[case] = {"expected": expected, "error": f"{type(exc).__name__}: {exc}"}
        out[case]["seconds"] = round(time.monotonic() - t0, 1)
    return out


# ---------------------------------------------------------------------- report


def machine(cpu: bool) -> JSON:
    facts: JSON = {"python": platform.python_version(), "cores": os.cpu_count()}
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        facts["torch"] = version("torch")
    smi = shutil.which("nvidia-smi")
    if smi and not cpu:
        query = "--query-gpu=name,memory.total,driver_version"
        with contextlib.suppress(Exception):
            done = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20, check=False)  # fmt: skip
            facts["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return facts


def _f(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def table(result: JSON) -> str:
    """The compact table the script prints."""
    rows = [("measure", "ours", "bare torchrun", "ours/bare")]
    speed = result.get("start_and_speed") or {}
    for key, label, unit in (("first_step_s", "submit → first step", " s"),
                             ("steps_per_s", "training loop", " steps/s")):  # fmt: skip
        m = speed.get(f"{key}_median") or {}
        rows.append((label, _f(m.get("ours"), unit), _f(m.get("bare"), unit), _f(m.get("ratio"))))
    res = result.get("resume") or {}
    rows.append((
        "SIGKILL after checkpoint → resumed step",
        _f((res.get("ours") or {}).get("resume_s"), " s"),
        _f((res.get("bare") or {}).get("resume_s"), " s"),
        _f(res.get("ratio")),
    ))  # fmt: skip
    lines = [
        " | ".join(f"{c:<40}" if i == 0 else f"{c:>16}" for i, c in enumerate(row)) for row in rows
    ]
    lines.append("")
    lines.append(f"{'failure':<24} {'expected':<15} {'class':<15} right  evidence")
    for case, row in (result.get("failures") or {}).items():
        got = row.get("class") or ("skipped" if "skipped" in row else "error")
        why = row.get("evidence") or row.get("skipped") or row.get("error") or ""
        mark = "yes" if row.get("right") else ("-" if "skipped" in row else "NO")
        lines.append(f"{case:<24} {row['expected']:<15} {got:<15} {mark:<6} {why[:110]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="no GPU: gloo, small sizes")
    parser.add_argument("--budget", type=float, default=330.0, help="seconds (default 330)")
    parser.add_argument("--out", type=Path, default=None, help="folder of gpu_bench.json")
    parser.add_argument("--only", choices=["speed", "resume", "failures"], action="append")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    signs = ("/proc/driver/nvidia/gpus", "/dev/nvidiactl", "/dev/nvidia0")
    if not args.cpu and not shutil.which("nvidia-smi") and not any(map(os.path.exists, signs)):
        print("no NVIDIA GPU here: skipped (run with --cpu for the CPU path)")
        return 0
    out_dir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    work = Path(tempfile.mkdtemp(prefix="kf-gpu-bench-"))
    (work / "marks").mkdir()
    result: JSON = {"mode": "cpu" if args.cpu else "gpu", "machine": machine(args.cpu),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}  # fmt: skip
    config = LocalConfig(state_dir=str(work / "state"), python=sys.executable)
    sizes = CPU_SIZES if args.cpu else GPU_SIZES
    with TrainerClient(config) as client:
        bench = Bench(args.cpu, sizes, work, started + args.budget, client)
        steps: list[tuple[str, Callable[[Bench], JSON]]] = [
            ("speed", start_and_speed), ("resume", resume), ("failures", failures),
        ]  # fmt: skip
        for key, run in steps:
            if args.only and key not in args.only:
                continue
            name = {"speed": "start_and_speed"}.get(key, key)
            try:
                result[name] = run(bench)
            except Exception as exc:  # a broken part is reported, the rest still runs
                traceback.print_exc()
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                stop_all(client)
    result["notes"] = bench.notes
    result["seconds"] = round(time.monotonic() - started, 1)
    text = table(result)
    if args.keep:
        print(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("\n" + text + f"\n\n{result['seconds']} s")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "gpu_bench.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {out_dir / 'gpu_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
