"""The real control plane of ``../shared/control-plane`` as the benchmarks' second
server: kube-apiserver 1.36 + etcd (and, for completion latency, the real JobSet and
Trainer controllers with kwok's fake GPU nodes), started by its ``start.sh`` in a
directory of the run's own and always stopped by ``stop.sh`` at the end.

Set-up writes (jobs created, statuses written) are made by this orchestrator process,
never by the process under test: the status goes through the ``/status`` subresource,
as the Trainer controller writes it. ``KF_CONTROL_PLANE`` names another package folder;
``KF_BENCH_CP_PORT_BASE`` another port base (default 17200; the instance takes ten
ports from it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import JSON, REPO

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
NAMESPACE = "default"


def package_dir() -> Path:
    """Where the control-plane package is (it may be absent: the rows are skipped)."""
    given = os.environ.get("KF_CONTROL_PLANE")
    return Path(given) if given else REPO.parent / "shared" / "control-plane"


def unavailable_reason() -> str | None:
    """Why the real-server rows cannot run here, or ``None`` when they can."""
    pkg = package_dir()
    if not (pkg / "start.sh").is_file():
        return (
            f"no real control plane: {pkg}/start.sh is absent (set KF_CONTROL_PLANE to the "
            "folder of ../shared/control-plane to run the real-server rows)"
        )
    return None


class RealControlPlane:
    """One control plane started for the run (apiserver only, or with controllers)."""

    def __init__(
        self, workdir: Path, *, controllers: bool, name: str = "control-plane", port_offset: int = 0
    ) -> None:
        # Each instance of a run has a folder and ports of its own (``port_offset``: a
        # multiple of ten from the base), so that two never collide.
        self.dir = workdir / name
        self.port_base = int(os.environ.get("KF_BENCH_CP_PORT_BASE", "17200")) + port_offset
        self.controllers = controllers
        self.kubeconfig = self.dir / "kubeconfig"
        self.started_in: float | None = None
        self._api: Any = None

    def start(self, *, controllers: bool | None = None) -> None:
        """Start it (or, on a running one, add the controllers): cold ~13-18 s."""
        if controllers is not None:
            self.controllers = controllers
        argv = [str(package_dir() / "start.sh"), "--dir", str(self.dir)]
        argv += ["--port-base", str(self.port_base)]
        if self.controllers:
            argv.append("--controllers")
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"start.sh failed: {(proc.stdout + proc.stderr)[-2000:]}")
        self.started_in = time.monotonic() - t0

    def stop(self) -> None:
        subprocess.run(
            [str(package_dir() / "stop.sh"), "--dir", str(self.dir)],
            capture_output=True,
            timeout=120,
            check=False,
        )

    def __enter__(self) -> RealControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def apiserver_rss_mb(self) -> float | None:
        """The kube-apiserver's RSS (its pid file), for the report."""
        try:
            pid = int((self.dir / "run" / "kube-apiserver.pid").read_text().strip())
            import psutil  # type: ignore[import-untyped]

            return float(psutil.Process(pid).memory_info().rss) / 2**20
        except (OSError, ValueError, ImportError):
            return None
        except Exception:  # psutil.NoSuchProcess and friends
            return None

    # ------------------------------------------------------------------ set-up writes

    def api(self) -> Any:
        """A ``kubernetes`` CustomObjectsApi for set-up writes (one pool, many threads)."""
        if self._api is None:
            from kubernetes import client, config

            configuration = client.Configuration()
            config.load_kube_config(str(self.kubeconfig), client_configuration=configuration)
            configuration.connection_pool_maxsize = 32  # the writer's threads
            self._api = client.CustomObjectsApi(client.ApiClient(configuration))
        return self._api

    def create_jobs(
        self,
        names: Sequence[str],
        manifest: JSON,
        *,
        threads: int = 8,
    ) -> None:
        """Create TrainJobs named ``names`` from ``manifest`` (its name replaced)."""
        api = self.api()

        def one(name: str) -> None:
            body = {**manifest, "metadata": {**manifest["metadata"], "name": name}}
            body["metadata"].pop("namespace", None)
            api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, names))

    def complete(self, name: str) -> float:
        """Write ``Complete=True`` through the status subresource; return ``time.time()``
        when the server answered (the write is committed by then)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "AllJobsCompleted",
                        "message": "jobset completed successfully",
                        "lastTransitionTime": now,
                    }
                ]
            }
        }
        self.api().patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, name, body
        )
        return time.time()

    def complete_paced(
        self, names: Sequence[str], rate: float, *, threads: int = 8
    ) -> dict[str, float]:
        """Complete ``names`` at ``rate`` a second (job ``i`` no earlier than
        ``i / rate`` seconds after the start); return each completion's time."""
        done: dict[str, float] = {}
        lock = threading.Lock()
        start = time.monotonic() + 0.05
        cursor = iter(enumerate(names))

        def worker() -> None:
            while True:
                with lock:
                    item = next(cursor, None)
                if item is None:
                    return
                i, name = item
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                stamp = self.complete(name)
                with lock:
                    done[name] = stamp

        pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return done


@contextlib.contextmanager
def control_plane(workdir: Path, *, controllers: bool) -> Iterator[RealControlPlane]:
    """A control plane for the block, always stopped after it."""
    cp = RealControlPlane(workdir, controllers=controllers)
    with cp:
        yield cp
