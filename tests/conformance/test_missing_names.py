"""A name the cluster does not have is said as such, with the one fix that applies, by
the client and the command alike (issue 35, items 2 and 5), on the test bed and the real
control plane:

- a misspelt runtime names the nearest installed one ("did you mean"), in ``check``
  (which now looks the runtime up where it can reach the backend) as in ``run``, with
  one ``Fix:`` and no kubectl command;
- ``runtimes get`` finds the namespaced TrainingRuntime that ``runtimes list`` shows,
  and ``--kind`` picks one kind in both;
- a namespace that does not exist is said to be missing, where a real API server
  lists an empty collection ("No TrainJobs in namespace team-x.", exit 0, before), and
  by ``check`` ("ok ... runtime found on the cluster" before, where ``run`` then said
  the namespace does not exist).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conformance_support import FAST, Cluster

from kf_trainer_core.cli import main
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.errors import (
    NamespaceNotFoundError,
    RuntimeNotFoundError,
    TrainJobNotFoundError,
)

MISSING_NAMESPACE = "no-such-team-35"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _spec_file(tmp_path: Path, runtime: str) -> str:
    path = tmp_path / f"{runtime}.yaml"
    spec = {
        "runtime": runtime,
        "trainer": {"type": "CustomTrainerContainer", "image": "busybox", "num_nodes": 1},
    }
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_misspelt_runtime_names_the_nearest_one(client: TrainerClient, cluster: Cluster) -> None:
    with pytest.raises(RuntimeNotFoundError) as caught:
        client.submit(cluster.spec(runtime="torch-distibuted"))
    text = str(caught.value)
    assert text.startswith("ClusterTrainingRuntime 'torch-distibuted' does not exist."), text
    assert "did you mean 'torch-distributed'?" in text
    assert text.count("Fix:") == 1
    assert "kubectl" not in text
    # What a missing runtime raised before it had a class of its own.
    assert isinstance(caught.value, TrainJobNotFoundError)


def test_check_and_run_say_did_you_mean_with_one_fix(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--kubeconfig", str(cluster.kubeconfig)]
    typo = _spec_file(tmp_path, "torch-distibuted")
    for command in (["check", typo], ["run", typo, "--name", "typo-1", "--detach"]):
        code, out, err = _cli(capsys, *where, *command)
        assert code == 3, (command, out, err)
        assert "did you mean 'torch-distributed'?" in err, err
        assert err.count("Fix:") == 1, err  # no "check the name and namespace" after it
    # Nothing was submitted.
    with TrainerClient(cluster.config(), retry=FAST) as client:
        assert [j.name for j in client.list_jobs()] == []
    code, out, err = _cli(capsys, *where, "check", "--offline", typo)
    assert code == 0, err
    assert out.startswith("ok: ")
    assert "runtime not looked up (--offline)" in out
    code, out, err = _cli(capsys, *where, "check", _spec_file(tmp_path, "torch-distributed"))
    assert code == 0, err
    assert "runtime found on the cluster" in out


def test_runtimes_get_finds_the_namespaced_runtime_list_shows(
    controllers: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = controllers.fast_fail_runtime()["name"]
    where = ["--kubeconfig", str(controllers.kubeconfig)]
    code, out, err = _cli(capsys, *where, "runtimes", "list", "--kind", "TrainingRuntime")
    assert code == 0, err
    rows = out.strip().splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [[name, "TrainingRuntime"]]
    code, out, err = _cli(capsys, *where, "runtimes", "list", "--kind", "ClusterTrainingRuntime")
    assert code == 0, err
    assert name not in out
    assert "torch-distributed" in out
    code, out, err = _cli(capsys, *where, "runtimes", "get", name)
    assert code == 0, err
    assert "TrainingRuntime" in out
    code, out, err = _cli(capsys, *where, "runtimes", "get", name, "--kind", "TrainingRuntime")
    assert code == 0, err
    # Asked for the other kind, the error says which kind the runtime has.
    with (
        TrainerClient(controllers.config(), retry=FAST) as client,
        pytest.raises(RuntimeNotFoundError) as caught,
    ):
        client.get_runtime(name, "ClusterTrainingRuntime")
    text = str(caught.value)
    assert f"a TrainingRuntime of that name exists in namespace {controllers.namespace!r}" in text
    assert "kind: TrainingRuntime" in text
    assert text.count("Fix:") == 1


def test_a_namespace_that_does_not_exist_is_said_to_be_missing(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = cluster.config(namespace=MISSING_NAMESPACE)
    with TrainerClient(config, retry=FAST) as client:
        with pytest.raises(NamespaceNotFoundError, match="does not exist") as caught:
            client.list_jobs()
        assert caught.value.namespace == MISSING_NAMESPACE
        with pytest.raises(NamespaceNotFoundError, match=f"TrainJob {MISSING_NAMESPACE}/x"):
            client.get_job("x")
        with pytest.raises(NamespaceNotFoundError, match="cannot be created: namespace"):
            client.submit(cluster.spec(), identity="missing-namespace/1")
        # What `kf-trainer check` asks: it said "ok ... runtime found on the cluster"
        # for a namespace that `run` then said does not exist.
        with pytest.raises(NamespaceNotFoundError, match="cannot be created: namespace"):
            client.build(cluster.spec())
        with pytest.raises(NamespaceNotFoundError, match="cannot be created: namespace"):
            client.build(cluster.spec(runtime="torch-distibuted"))  # the cause, not the runtime
    where = ["--kubeconfig", str(cluster.kubeconfig)]
    code, out, err = _cli(capsys, *where, "jobs", "list", "-n", MISSING_NAMESPACE)
    assert code == 3, (out, err)
    assert f"namespace '{MISSING_NAMESPACE}' does not exist" in err
    assert err.count("Fix:") == 1
    code, out, err = _cli(capsys, *where, "jobs", "get", "x", "-n", MISSING_NAMESPACE)
    assert code == 3, err
    assert "does not exist" in err
    assert err.count("Fix:") == 1, err
    spec = _spec_file(tmp_path, "torch-distributed")
    code, out, err = _cli(capsys, *where, "check", spec, "-n", MISSING_NAMESPACE)
    assert code == 3, (out, err)
    assert f"namespace '{MISSING_NAMESPACE}' does not exist" in err
    assert err.count("Fix:") == 1, err
    # A namespace that exists and holds no job is just that.
    with TrainerClient(cluster.config(), retry=FAST) as client:
        assert client.list_jobs() == []
    code, out, err = _cli(capsys, *where, "jobs", "list")
    assert code == 0, err
    assert f"No TrainJobs in namespace {cluster.namespace}." in err  # on stderr


def test_every_operation_on_a_job_in_a_missing_namespace_names_the_namespace(
    cluster: Cluster,
) -> None:
    # Each operation that names one job says the namespace is missing, as get_job does:
    # suspend, resume and a followed log used to say only "TrainJob ns/x not found".
    config = cluster.config(namespace=MISSING_NAMESPACE)
    with TrainerClient(config, retry=FAST) as client:
        calls = {
            "get_job": lambda: client.get_job("x"),
            "get_job_events": lambda: client.get_job_events("x"),
            "get_job_outputs": lambda: client.get_job_outputs("x"),
            "wait": lambda: client.wait("x", timeout=5),
            "suspend_job": lambda: client.suspend_job("x"),
            "resume_job": lambda: client.resume_job("x"),
            "get_job_logs(follow)": lambda: list(client.get_job_logs("x", follow=True)),
            "get_job_logs": lambda: list(client.get_job_logs("x")),
        }
        for what, call in calls.items():
            with pytest.raises(NamespaceNotFoundError, match="does not exist") as caught:
                call()
            assert caught.value.namespace == MISSING_NAMESPACE, what
