"""``kf-trainer jobs prune`` against the Kubernetes-API test server: the dry run's plan,
what it deleted, ``-o json``, the never-deleted unfinished job, and exit 2 for bad
rules (nothing is requested). The selection rules themselves:
``tests/core/test_prune_rules.py`` and ``tests/client/test_prune.py``."""

from __future__ import annotations

import pytest
from cli_support import run_main, run_script, scenario, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.testing.population import finished_trainjob
from kf_trainer_core.testing.server import KubeTestServer


def _old_finished(kube: KubeTestServer, name: str) -> None:
    obj = finished_trainjob(name, program_bytes=100, suite=True)
    obj["status"]["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    kube.store.create(TRAINJOBS, obj, namespace="default")


def test_dry_run_then_prune(
    client: TrainerClient,
    kube: KubeTestServer,
    where: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _old_finished(kube, "old-a")
    _old_finished(kube, "old-b")
    live = client.submit(spec(scenario(preset="never-finish")), name="live").job.name

    plan = run_main(capsys, "jobs", "prune", "--older-than", "7d", "--dry-run", *where)
    assert plan.code == 0, plan.err
    assert "would delete" in plan.out
    assert "old-a" in plan.out
    assert "old-b" in plan.out
    assert {j.name for j in client.list_jobs()} == {"old-a", "old-b", live}

    done = run_script("jobs", "prune", "--older-than", "7d", "-o", "json", *where)
    assert done.code == 0, done.err
    data = done.json()
    assert sorted(data["deleted"]) == ["old-a", "old-b"]
    assert data["unfinished"] == 1
    assert {j.name for j in client.list_jobs()} == {live}

    nothing = run_main(capsys, "jobs", "prune", "--older-than", "0", *where)
    assert nothing.code == 0
    assert "deleted 0" in nothing.out


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--older-than", "a week"], "--older-than"),
        (["--keep-last", "-1"], "keep-last"),
        (["--ignore-retention"], "no rule"),
        (["--status", "Running"], "Running"),
    ],
)
def test_bad_rules_exit_2(
    args: list[str], word: str, where: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_main(capsys, "jobs", "prune", *args, *where)
    assert result.code == 2
    assert word in result.err
