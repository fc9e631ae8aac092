"""A started test server runs a job without paying first-use costs on the way.

Whatever the server's controller first imports while it runs a job lands inside what
the caller is timing: the benchmarks measure the server process's CPU over a window of
completions, and a lazy import of the synchronous ``kubernetes`` package in the
simulated kubelet (~900 modules, most of a second with no bytecode cache) once made that
figure ten times the old engine's — the old engine had imported the package itself,
outside the window. No timing is asserted: the modules a job's run imports are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kf_trainer_core.testing.controller import find_upstream

pytestmark = pytest.mark.skipif(
    find_upstream() is None, reason="the shared upstream folder (default runtimes) is missing"
)

# A fresh interpreter: the test process has imported everything already.
_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from kf_trainer_core.k8s.resources import TRAINJOBS
    from kf_trainer_core.testing.server import KubeTestServer

    server = KubeTestServer(default_scenario="success").start(controller=True)
    try:
        before = set(sys.modules)
        server.store.create(TRAINJOBS, {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "first", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        })
        deadline = time.monotonic() + 60
        def done():
            job = server.store.get(TRAINJOBS, "default", "first")
            conditions = (job.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)
        while not done():
            assert time.monotonic() < deadline, "the job did not complete"
            time.sleep(0.01)
        print(json.dumps(sorted(set(sys.modules) - before)))
    finally:
        server.stop()
    """
)


def test_a_jobs_run_on_a_started_server_imports_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    roots = sorted({name.split(".")[0] for name in imported})
    assert imported == [], f"a job's run imported {len(imported)} modules, from {roots}"
