"""Small things a newcomer met (issue 26, item 9): the DEVICE column, one device word
for the same step whoever submitted it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_main

from kf_trainer_core.cli._output import device_text
from kf_trainer_core.cluster.status import steps_from_pods


def test_device_text() -> None:
    assert device_text(None, None) == "-"
    assert device_text("gpu", "4") == "gpu x4"
    assert device_text("cpu", "Unknown") == "cpu"
    assert device_text("Unknown", "2") == "x2"


def test_runtimes_list_has_no_bare_placeholders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_main(capsys, "runtimes", "list", "--backend", "local", "--state-dir", str(tmp_path))
    assert got.code == 0, got.err
    assert "- x-" not in got.out


def test_a_step_without_accelerator_limits_runs_on_cpu() -> None:
    pod = {
        "metadata": {
            "name": "j-node-0-0-abc",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "j",
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": "0",
                "jobset.sigs.k8s.io/job-index": "0",
            },
        },
        "spec": {
            "containers": [{"name": "node", "env": [{"name": "PET_NPROC_PER_NODE", "value": "1"}]}]
        },
        "status": {"phase": "Running"},
    }
    [step] = steps_from_pods([pod])
    assert (step.device, step.device_count) == ("cpu", "1")
