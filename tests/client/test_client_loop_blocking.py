"""1,000 concurrent ``AsyncTrainerClient.wait`` calls never block their event loop:
from making the client in the loop (kubeconfig, credentials, the shared watch) to the
last job's end, no callback blocks it for 50 ms or more (:mod:`loop_scenarios`)."""

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

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(600)]

WAITS = 1000


def test_thousand_waits_never_block_the_loop(
    kube: KubeTestServer, kubeconfig_path: Path, tmp_path: Path
) -> None:
    def run(attempt: int) -> dict[str, Any]:
        names = pending_jobs(kube.store, WAITS, f"loop{attempt}")
        workdir = tmp_path / str(attempt)
        workdir.mkdir()
        return run_with_completions(
            "client",
            {
                "kubeconfig": str(kubeconfig_path),
                "jobs": names,
                "preimport": ["kf_trainer_core.client"],
            },
            workdir,
            kube.store,
            names,
        )

    result = once_more_if_slow(run)
    assert result["results"] == ["Complete"] * WAITS
    print(result["report"].splitlines()[0])
    assert not blocking(result), f"callbacks over {THRESHOLD * 1000:.0f} ms:\n{result['report']}"
