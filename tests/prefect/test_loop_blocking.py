"""A Prefect flow running 100 ``await_trainjob`` tasks at once in its event loop: none
of the suite's code blocks that loop for 50 ms or more, from the first task's start
(credentials, client, shared watch) to the last job's end (:mod:`loop_scenarios`).

Prefect's own engine shares the loop; its slow callbacks (task-run bookkeeping) are
reported, and only those whose sampled stacks pass through the suite's code fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from kf_trainer_core.testing.server import KubeTestServer
from loop_support import THRESHOLD, blocking, pending_jobs, run_with_completions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = 100


def test_hundred_async_tasks_never_block_the_loop(
    prefect_server: str, kube: KubeTestServer, kubeconfig_path: Path, tmp_path: Path
) -> None:
    names = pending_jobs(kube.store, TASKS, "ploop")
    result = run_with_completions(
        "prefect",
        {
            "kubeconfig": str(kubeconfig_path),
            "jobs": names,
            "preimport": ["prefect", "kf_trainer_prefect"],
            # Prefect's task runs start slowly on a busy machine: the jobs end a while
            # after the flow starts, whether or not every wait has begun.
            "settle": 0.0,
            "finish_after": 30.0,
        },
        tmp_path,
        kube.store,
        names,
        env={"PREFECT_API_URL": prefect_server},
    )
    assert result["results"] == ["Complete"] * TASKS
    print(result["report"].splitlines()[0])
    ours = blocking(result, only="/kf_trainer_")
    assert not ours, f"the suite's callbacks over {THRESHOLD * 1000:.0f} ms:\n{result['report']}"
