"""``examples/kfp_retraining.py`` end to end with ``kfp.local.SubprocessRunner(
use_venv=False)`` (every task a subprocess of this interpreter): the TrainJob on the
local backend, then on the Kubernetes-API test server — only the ``backend_config``
component argument (and the profile's scenario annotation) changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import DAY, DRIFTED_DAY, EXEC_PROFILE, assert_no_secret, local_jobs, registry

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import IDENTITY_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer


def ran(shared: Path, task: str) -> int:
    """How many runs executed ``task`` (the tasks of the branch not taken never run)."""
    return len(list((shared / "pipeline-root").glob(f"*/{task}")))


def files_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


@pytest.fixture
def pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    # run_locally() extends PYTHONPATH for the components: undo it after the test.
    import os

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


@pytest.mark.usefixtures("pythonpath")
def test_local_backend_promotes_then_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kfp_retraining import run_locally

    shared = tmp_path / "shared"
    with local_jobs(shared / "trainjobs") as client:
        assert run_locally(DAY, str(shared)) == "promote"
        promoted = registry(shared)
        assert promoted is not None
        assert promoted["day"] == DAY
        assert run_locally(DAY, str(shared)) == "keep"
        assert registry(shared) == promoted
        assert (ran(shared, "promote-model"), ran(shared, "keep-promoted")) == (1, 1)
        jobs = client.list_jobs()
        assert len(jobs) == 2
        assert all(j.status.value == "Complete" for j in jobs)
        # What `python examples/kfp_retraining.py` prints last, after KFP's logging.
        from kf_trainer_core.base.hints import program
        from kfp_retraining import local_summary
        from retraining_jobs import profile

        summary = local_summary("keep", profile("local"), str(shared))
        newest = max(jobs, key=lambda j: (str(j.creation_timestamp), j.name))
        assert summary.splitlines()[1:] == [
            "Summary: kept the promoted model",
            f"  model:   {shared / 'registry' / 'model.json'} (accuracy={promoted['accuracy']}, "
            f"day={DAY}, loss={promoted['loss']})",
            f"  TrainJob {newest.name}",
            f"  see it:  {program()} --backend local --state-dir {shared / 'trainjobs'} "
            f"jobs get {newest.name}",
        ]
    out = capsys.readouterr().out
    assert "keeping the promoted model: the candidate's accuracy" in out
    # What the user needs, not the executor's own INFO lines and input JSON.
    assert "[kf-trainer] TrainJob local/" in out
    assert "Got executor_input" not in out
    assert "parameterValues" not in out


def test_schedule_without_a_host_says_what_is_needed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfp_retraining import main

    monkeypatch.delenv("KF_PIPELINES_ENDPOINT", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["--schedule"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--schedule needs the KFP API endpoint: --host URL" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("pythonpath")
def test_test_server_through_backend_config(
    kube: KubeTestServer, token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfp_retraining import run_locally
    from retraining_jobs import profile

    # Idle watches end their reads at each bookmark: component processes exit sooner.
    kube.bookmark_interval = 0.5
    # Credentials reach a component from its environment (a Secret on a cluster), never
    # as a parameter, which KFP stores and shows.
    monkeypatch.setenv("KF_TRAINER_TOKEN", token)
    backend = {"host": kube.url, "namespace": "default", "watch_timeout": 30, "poll_interval": 0.1}
    shared = tmp_path / "shared"
    job = profile(EXEC_PROFILE)
    assert run_locally(DAY, str(shared), job, backend) == "promote"
    assert run_locally(DRIFTED_DAY, str(shared), job, backend) == "promote"
    assert registry(shared)["day"] == DRIFTED_DAY  # type: ignore[index]
    assert ran(shared, "keep-promoted") == 0
    items, _ = kube.store.list(TRAINJOBS, "default")
    assert len(items) == 2
    assert all(i["metadata"]["annotations"][IDENTITY_ANNOTATION].startswith("kfp/") for i in items)
    assert_no_secret(token, files_text(shared / "pipeline-root"), items)
