"""What every benchmark shares: the test server with a completion clock, driver
processes (ours and the Kubeflow SDK's), the SDK's virtual environment, statistics.

The orchestrator process (``python -m bench``) runs the Kubernetes-API test server and
its simulated Trainer controller; each side under test runs in its own child process
(:mod:`bench.driver_ours`, :mod:`bench.driver_sdk`), so clients never share a GIL with
the server and each side's memory and CPU can be read from its process alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "bench"
NAMESPACE = "default"
SCENARIO_ANNOTATION = "testing.kf-trainer-suite/scenario"
#: The Kubeflow SDK release the baseline uses (it needs kubernetes < 36, which this
#: project's environment cannot hold next to kubernetes_asyncio 36: hence its own venv).
SDK_REQUIREMENT = "kubeflow==0.5.0"

JSON = dict[str, Any]


# ----------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """Options of one ``python -m bench`` run."""

    quick: bool
    out: Path
    cache: Path
    log: list[str] = field(default_factory=list)
    #: Job counts for "scale of waiting" (``--scale-counts``; default: 10, 100, 1,000).
    scale_counts: list[int] | None = None

    def note(self, text: str) -> None:
        """Progress on stderr (benchmarks run for minutes; say what is happening)."""
        stamp = time.strftime("%H:%M:%S")
        line = f"[bench {stamp}] {text}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- stats


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def ratio(baseline: float | None, ours: float | None) -> float | None:
    """How many times ``ours`` beats ``baseline`` (baseline / ours); None when either
    is missing or ``ours`` is zero."""
    if baseline is None or ours is None or ours <= 0 or math.isnan(baseline) or math.isnan(ours):
        return None
    return baseline / ours


# ----------------------------------------------------------------------------- server


class CompletionClock:
    """Records, in the server's process, the moment each TrainJob's ``Complete``
    condition is committed (``time.time()``, first time only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completed: dict[str, float] = {}

    def __call__(self, event: Any) -> None:
        # Runs for every committed change: keep it cheap (no copies, early exits).
        if event.resource.plural != "trainjobs" or event.type == "DELETED":
            return
        obj = event.object
        name = obj["metadata"]["name"]
        if name in self.completed:
            return
        for cond in (obj.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Complete" and cond.get("status") == "True":
                now = time.time()
                with self._lock:
                    self.completed.setdefault(name, now)
                return

    def clear(self) -> None:
        with self._lock:
            self.completed.clear()


class BenchServer:
    """The Kubernetes-API test server with its simulated controller, a completion
    clock, and helpers to create, resume and count jobs."""

    def __init__(self, workdir: Path) -> None:
        # Imported here so that `python -m bench --help` stays instant.
        from kf_trainer_core.testing.server import KubeTestServer

        self.workdir = workdir
        self.clock = CompletionClock()
        # Every job simulated (no process per job): what the figures have always measured.
        self.server = KubeTestServer(default_scenario="success")
        # Stamped before the server fans the change out to watches: a plain store
        # subscription runs after the fan-out, and a fast client could return first.
        self.server.add_commit_hook(self.clock)
        self.kubeconfig = workdir / "kubeconfig"
        self._client: Any = None

    def __enter__(self) -> BenchServer:
        self.server.start(controller=True)
        self.server.kubeconfig(self.kubeconfig, namespace=NAMESPACE)
        self._warm_up()
        return self

    def _warm_up(self) -> None:
        """One job from submit to ``Complete`` before anything is measured: what this
        process does only the first time (the server's and the set-up client's lazy
        imports, caches) is paid here, not inside a benchmark's window — the server's
        CPU over the completions once showed a lazy import, not the work."""
        from kf_trainer_core.k8s.resources import TRAINJOBS

        name = "bench-warm-up"
        self.create_suspended([name], [0.0])
        self.resume([name])
        # Read from the store, not waited on with the client: a wait would leave its
        # informer's watch open (it lingers), and the windows would count it.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job = self.server.store.get(TRAINJOBS, NAMESPACE, name)
            conditions = (job.get("status") or {}).get("conditions") or []
            if any(c["type"] in ("Complete", "Failed") for c in conditions):
                break
            time.sleep(0.02)
        self.reset()

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
        self.server.stop()

    #: Where completion times are stamped (stated in the report).
    clock_source = "the server's commit hook, just before it fans the change out to watches"

    def reset(self) -> None:
        """A fresh cluster (objects, request log, controller) between measurements."""
        self.server.reset()
        self.clock.clear()

    @property
    def requests(self) -> Any:
        return self.server.requests

    def _admin(self) -> Any:
        """Our sync client in the orchestrator, used only to set up jobs (not measured)."""
        if self._client is None:
            from kf_trainer_core.client import TrainerClient
            from kf_trainer_core.config import KubernetesConfig

            self._client = TrainerClient(
                KubernetesConfig(kubeconfig=str(self.kubeconfig), namespace=NAMESPACE)
            )
        return self._client

    def create_suspended(self, names: Sequence[str], durations: Sequence[float]) -> None:
        """Create TrainJobs suspended (as a queue such as Kueue holds them), each with a
        scenario running ``duration`` seconds once resumed: waits can be set up against
        them at leisure, and :meth:`resume` starts the clock."""
        from kf_trainer_core.spec import Annotations, CustomTrainer, Name, Suspend, TrainJobSpec

        client = self._admin()

        def make(item: tuple[str, float]) -> None:
            name, duration = item
            scenario = json.dumps({"preset": "success", "duration": round(duration, 3)})
            spec = TrainJobSpec(
                trainer=CustomTrainer(_bench_train),
                options=[Name(name), Suspend(), Annotations({SCENARIO_ANNOTATION: scenario})],
            )
            client.submit(spec)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(make, zip(names, durations, strict=True)))

    def resume(self, names: Sequence[str]) -> float:
        """Resume the jobs (``spec.suspend: false``, written straight to the store: set-up,
        not measured); returns ``time.time()`` when done."""
        from kf_trainer_core.k8s.resources import TRAINJOBS

        store = self.server.store
        for name in names:
            store.patch(TRAINJOBS, NAMESPACE, name, {"spec": {"suspend": False}})
        return time.time()

    def count_in(self, since: float, until: float, verb: str | None = None) -> int:
        """Requests the server recorded between two ``time.time()`` stamps."""
        return sum(
            1
            for r in self.requests.records
            if since <= r.time <= until and (verb is None or r.verb == verb)
        )


def _bench_train() -> dict[str, int]:
    """The trivial training function of the jobs the orchestrator sets up."""
    return {"ok": 1}


# ----------------------------------------------------------------------------- drivers


class DriverError(RuntimeError):
    """A driver process failed or did not answer in time."""


class Driver:
    """One child process speaking the ``READY`` / ``RESULT {json}`` protocol."""

    def __init__(
        self,
        argv: list[str],
        config: JSON,
        workdir: Path,
        label: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.label = label
        fd, cfg_path = tempfile.mkstemp(prefix=f"{label}-", suffix=".json", dir=workdir)
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh)
        self.stderr_path = workdir / f"{label}.stderr"
        self._stderr = open(self.stderr_path, "w")  # noqa: SIM115 - closed in close()
        # A session of its own: close() ends the driver and anything it started (the
        # SDK's local backend runs a shell that runs pip and torchrun) by process group.
        self.proc = subprocess.Popen(
            [*argv, cfg_path],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next(self, deadline: float) -> str | None:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DriverError(f"{self.label}: no answer in time{self._tail()}")
            try:
                return self._lines.get(timeout=remaining)
            except queue.Empty:
                continue

    def _tail(self) -> str:
        self._stderr.flush()
        try:
            text = self.stderr_path.read_text()[-2000:]
        except OSError:
            text = ""
        return f"\n--- {self.label} stderr (tail) ---\n{text}" if text.strip() else ""

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = self._next(deadline)
            if line is None:
                raise DriverError(f"{self.label}: exited before READY{self._tail()}")
            if line == "READY":
                return

    def result(self, timeout: float) -> JSON:
        deadline = time.monotonic() + timeout
        while True:
            line = self._next(deadline)
            if line is None:
                raise DriverError(f"{self.label}: exited without a result{self._tail()}")
            if line.startswith("RESULT "):
                data: JSON = json.loads(line[len("RESULT ") :])
                # Its answer is in; what the process does on its way out is not measured,
                # so it gets a moment and is then ended (close()). A process that used
                # the sync client's waits can take seconds to exit: at exit, closing an
                # informer's watch blocks until the stream's next line (a bookmark).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(0.5)
                return data

    def close(self) -> None:
        """End the driver and its descendants (its own process group) if still there."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        else:
            # The driver is gone; its group may not be (a job's shell still running).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._stderr.close()


@contextlib.contextmanager
def driver(
    side: str,
    mode: str,
    config: JSON,
    workdir: Path,
    settings: Settings,
    env: dict[str, str] | None = None,
) -> Iterator[Driver]:
    """Start a driver: ``side`` is ``ours`` or ``poll`` (this environment's interpreter)
    or ``sdk`` (the Kubeflow SDK's venv). Always ended on exit."""
    if side == "ours":
        argv = [sys.executable, "-m", "bench.driver_ours", mode]
    elif side == "poll":
        argv = [sys.executable, "-m", "bench.driver_poll", mode]
    else:
        python = sdk_python(settings)
        if python is None:
            raise DriverError("the Kubeflow SDK environment is not available")
        # -I: the SDK venv must not see this repository (or bench/ modules shadowing
        # top-level names) on its path.
        argv = [str(python), "-I", str(BENCH_DIR / "driver_sdk.py"), mode]
    d = Driver(argv, config, workdir, f"{side}-{mode}", env=env)
    try:
        yield d
    finally:
        d.close()


# ----------------------------------------------------------------------------- SDK venv

_SDK_STATE: dict[str, Any] = {}


def sdk_python(settings: Settings) -> Path | None:
    """The interpreter of a venv holding the Kubeflow SDK (created under the cache
    directory on first use, reused after); None, with the reason noted, when it cannot
    be built."""
    if "python" in _SDK_STATE:
        return _SDK_STATE["python"]  # type: ignore[no-any-return]
    venv = settings.cache / "sdk-venv"
    python = venv / "bin" / "python"
    _SDK_STATE["python"] = None
    _SDK_STATE["reason"] = None
    try:
        settings.cache.mkdir(parents=True, exist_ok=True)
        ignore = settings.cache / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Created by `python -m bench`: nothing here is tracked.\n*\n")
        if not _sdk_ready(python):
            uv = shutil.which("uv")
            if uv is None:
                raise RuntimeError("uv is not on PATH")
            settings.note(f"building the Kubeflow SDK environment in {venv}")
            # This interpreter's Python: uv must not try to download one (no network
            # beyond the package registries on these machines).
            subprocess.run(
                [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                check=True,
                capture_output=True,
                timeout=300,
            )
            subprocess.run(
                [uv, "pip", "install", "--quiet", "--python", str(python), SDK_REQUIREMENT],
                check=True,
                capture_output=True,
                timeout=600,
            )
            if not _sdk_ready(python):
                raise RuntimeError("kubeflow.trainer does not import after installing")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None)
        reason = f"{exc}" + (f": {detail.decode(errors='replace')[-300:]}" if detail else "")
        settings.note(f"Kubeflow SDK environment not available: {reason}")
        _SDK_STATE["reason"] = reason
        return None
    _SDK_STATE["python"] = python
    return python


def _sdk_ready(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-I", "-c", "import kubeflow.trainer"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return probe.returncode == 0


def sdk_unavailable_reason() -> str | None:
    reason: str | None = _SDK_STATE.get("reason")
    return reason


def sdk_version(settings: Settings) -> str | None:
    python = sdk_python(settings)
    if python is None:
        return None
    out = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            "from importlib.metadata import version as v;print(v('kubeflow'), v('kubernetes'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    parts = out.stdout.split()
    return f"kubeflow {parts[0]} (kubernetes {parts[1]})" if len(parts) == 2 else None


# ----------------------------------------------------------------------------- machine


def machine_facts(settings: Settings) -> JSON:
    """What the report header states about where the figures were taken."""

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan, math.nan, math.nan)
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cores": os.cpu_count(),
        "cpu": cpu_model or platform.processor(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_at_start": [round(x, 2) for x in load],
        "packages": {
            d: version(d)
            for d in (
                "kf-trainer-suite",
                "kubernetes",
                "kubernetes_asyncio",
                "apache-airflow",
                "prefect",
                "kfp",
                "pydantic",
            )
        },
        "sdk": sdk_version(settings),
        "quick": settings.quick,
    }


def process_probe(pid: int) -> Any:
    """A psutil handle on a driver (imported lazily: psutil is a dev dependency)."""
    import psutil  # type: ignore[import-untyped]  # no stubs in the dev group

    return psutil.Process(pid)


def cpu_seconds(proc: Any) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class Follower:
    """A reading of a process (its CPU seconds, its RSS), taken from outside every
    50 ms and folded with ``fold`` (the latest, the peak): what was read survives the
    process, which may end right after its result."""

    def __init__(
        self,
        proc: Any,
        read: Callable[[Any], float],
        fold: Callable[[float, float], float] = lambda _old, new: new,
    ) -> None:
        import threading

        self._proc = proc
        self._read = read
        self._fold = fold
        self.value = read(proc)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.value = self._fold(self.value, self._read(self._proc))
            except Exception:  # the process ended: keep what was read
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.value


def latencies(returned: dict[str, float], completed: dict[str, float]) -> list[float]:
    """Seconds from each job's Complete condition (server) to its wait returning
    (driver), for the jobs both sides saw."""
    return [returned[n] - completed[n] for n in returned if n in completed]


def summary(values: Sequence[float]) -> JSON:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else math.nan,
    }
