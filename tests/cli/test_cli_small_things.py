"""Small things a newcomer met (issue 26, item 9): the DEVICE column, one device word
for the same step whoever submitted it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_main, run_script

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


TRAIN_MODULE = """
def train():
    from kf_trainer_core.report import report
    report(progress=50, metrics={"loss": 0.5})
    return 1
"""


def test_a_spec_file_names_a_module_beside_it_and_a_complete_job_is_100_percent_everywhere(
    tmp_path: Path,
) -> None:
    """A newcomer's spec beside their ``kf_small_train.py``: ``func: kf_small_train:train``
    is found when the command runs from another folder (a console script's path holds
    neither folder). The job reported 50% and then completed: every display says 100%."""
    (tmp_path / "kf_small_train.py").write_text(TRAIN_MODULE)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("trainer:\n  type: CustomTrainer\n  func: kf_small_train:train\n")
    where = ("--backend", "local", "--state-dir", str(tmp_path / "state"))
    ran = run_script(*where, "run", str(spec_file), "--name", "small-1")
    assert ran.code == 0, ran.err
    assert "Complete, 100% done, loss=0.5" in ran.err
    assert "50%" not in ran.err.split("Complete", 1)[1]
    got = run_script(*where, "jobs", "get", "small-1")
    assert "Progress:  100% done; loss=0.5" in got.out, got.out
    listed = run_script(*where, "jobs", "list")
    assert "100%" in listed.out

    # A file's path is a natural first guess for the reference: told what to write.
    spec_file.write_text("trainer:\n  type: CustomTrainer\n  func: kf_small_train.py:train\n")
    refused = run_script(*where, "check", str(spec_file))
    assert refused.code == 2
    assert "is a file's path, not a module name" in refused.err
    assert "`kf_small_train:train`" in refused.err
