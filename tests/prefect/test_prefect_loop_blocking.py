"""A Prefect flow running 100 ``await_trainjob`` tasks at once in its event loop: none
of the suite's code blocks that loop for 50 ms or more, from the first task's start
(credentials, client, shared watch) to the last job's end (:mod:`loop_scenarios`).

Prefect's own engine shares the loop; its slow callbacks (task-run bookkeeping) are
reported, and only those whose sampled stacks pass through the suite's code fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.testing.server import KubeTestServer
from loop_support import (
    THRESHOLD,
    blocking,
    once_more_if_slow,
    pending_jobs,
    run_with_completions,
)

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(900)]

TASKS = 100
OURS = "/kf_trainer_"


def test_hundred_async_tasks_never_block_the_loop(
    prefect_server: str, kube: KubeTestServer, kubeconfig_path: Path, tmp_path: Path
) -> None:
    def run(attempt: int) -> dict[str, Any]:
        names = pending_jobs(kube.store, TASKS, f"ploop{attempt}")
        workdir = tmp_path / str(attempt)
        workdir.mkdir()
        result = run_with_completions(
            "prefect",
            {
                "kubeconfig": str(kubeconfig_path),
                "jobs": names,
                "preimport": ["prefect", "kf_trainer_prefect"],
                # Prefect's task runs start slowly on a busy machine: the jobs end a
                # while after the flow starts, whether or not every wait has begun.
                "settle": 0.0,
                "finish_after": 20.0,
            },
            workdir,
            kube.store,
            names,
            env={"PREFECT_API_URL": prefect_server},
        )
        # Only the suite's slow callbacks count (a retry is for those).
        result["slow"] = blocking(result, only=OURS)
        return result

    result = once_more_if_slow(run)
    assert result["results"] == ["Complete"] * TASKS
    print(result["report"].splitlines()[0])
    ours = blocking(result)
    assert not ours, f"the suite's callbacks over {THRESHOLD * 1000:.0f} ms:\n{result['report']}"
