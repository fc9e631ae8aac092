"""The sync client on the local backend: the same API and the same programs as against a
cluster, with jobs run as local processes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_helpers import HERE, process_alive, wait_for
from local_jobs import (
    chatty,
    fail_on_rank,
    gloo_all_reduce,
    kill_self,
    read_inputs,
    report_env,
    resumable,
    sleeper,
    spawn_tree,
    trivial,
)

from kf_trainer_core.backends.local import install_runtime, workspace_of
from kf_trainer_core.backends.local.api import LocalApi
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import (
    SubmitError,
    TrainJobCreationFailedError,
    TrainJobFailedError,
    TrainJobNotFoundError,
)
from kf_trainer_core.k8s.calls import ListObjects
from kf_trainer_core.k8s.resources import EVENTS, PODS
from kf_trainer_core.manifest.runtimes import DEFAULT_RUNTIMES
from kf_trainer_core.spec import (
    ActiveDeadlineSeconds,
    BuiltinTrainer,
    CustomTrainer,
    CustomTrainerContainer,
    DatasetInitializer,
    HuggingFaceDatasetInitializer,
    Initializer,
    ModelInitializer,
    Suspend,
    TorchTuneConfig,
    TrainerCommand,
    TrainJobSpec,
)
from raw_calls import raw

# ---------------------------------------------------------------------------- runtimes


def test_default_runtimes_round_trip(client: TrainerClient) -> None:
    served = {r.name: r for r in client.list_runtimes()}
    assert set(DEFAULT_RUNTIMES) <= set(served)
    for name, expected in DEFAULT_RUNTIMES.items():
        got = served[name]
        assert got.observed
        assert got.labels == {"trainer.kubeflow.org/framework": expected.framework}
        assert dataclasses.replace(got, observed=False, labels={}) == expected
    assert client.get_runtime("deepspeed-distributed").launcher == "mpirun"
    with pytest.raises(TrainJobNotFoundError, match="torch-distributed"):
        client.get_runtime("no-such-runtime")


# ---------------------------------------------------------------------------- basics


def test_trivial_job_end_to_end(client: TrainerClient) -> None:
    durations = []
    for i in range(5):
        start = time.perf_counter()
        name = client.train(trainer=CustomTrainer(trivial, func_args={"x": 21 + i}))
        job, result = client.wait(name, timeout=30)
        durations.append(time.perf_counter() - start)
        assert job.status is JobState.COMPLETE
        assert result == {"doubled": 2 * (21 + i)}
    # Measured, not just checked: the median is printed for the report (pytest -s).
    print(f"\ntrivial job submit->Complete->outputs: median {statistics.median(durations):.3f}s")
    assert statistics.median(durations) < 5

    job = client.get_job(name)
    assert [(s.name, s.status, s.exit_code) for s in job.steps] == [("node-0", "Succeeded", 0)]
    assert job.steps[0].device_count == "1"
    complete = next(c for c in job.conditions if c["type"] == "Complete")
    assert (complete["reason"], complete["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    out = client.get_job_outputs(name)
    assert out.result == {"doubled": 50}
    assert out.duration_seconds is not None
    assert any("##kf-trainer-result##" in line for line in client.get_job_logs(name, raw=True))
    reasons = {(e.involved_object_kind, e.reason) for e in client.get_job_events(name)}
    assert {
        ("Pod", "Scheduled"),
        ("Pod", "Started"),
        ("Job", "SuccessfulCreate"),
        ("Job", "Completed"),
        ("JobSet", "AllJobsCompleted"),
    } <= reasons


def test_pod_objects_are_shaped_like_a_clusters(client: TrainerClient, config: LocalConfig) -> None:
    name = client.train(trainer=CustomTrainer(trivial, num_nodes=2))
    client.wait(name, timeout=30)
    api = LocalApi(Path(str(config.state_dir)))
    try:
        pods = api.perform(
            ListObjects(PODS, "local", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        )["items"]
    finally:
        api.close()
    assert len(pods) == 2
    for pod in pods:
        meta = pod["metadata"]
        index = meta["labels"]["batch.kubernetes.io/job-completion-index"]
        assert meta["name"].startswith(f"{name}-node-0-{index}-")
        assert len(meta["name"].rsplit("-", 1)[1]) == 5
        assert meta["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        # As on a cluster: the Trainer's step label is the Job's, not the pod's.
        assert "trainer.kubeflow.org/trainjob-ancestor-step" not in meta["labels"]
        assert meta["labels"]["jobset.sigs.k8s.io/group-name"] == "default"
        # The JobSet's and Job's labels, as the test bed's pods (and a cluster's) have
        # them: the one pod model of emulation/jobs.py.
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Job", f"{name}-node-0")
        assert meta["labels"]["batch.kubernetes.io/controller-uid"] == owner["uid"]
        assert meta["labels"]["jobset.sigs.k8s.io/jobset-uid"]
        key = hashlib.sha1(f"local/{name}-node-0".encode()).hexdigest()
        assert meta["labels"]["jobset.sigs.k8s.io/job-key"] == key
        assert meta["annotations"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["containers"][0]["env"][-1] == {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"
                }
            },
        }
        status = pod["status"]
        assert status["phase"] == "Succeeded"
        term = status["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (0, "Completed")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["PET_NNODES"] == "2"
        assert env["PET_NODE_RANK"] == index
    # Only node 0 reports the function's return value.
    messages = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p["status"][
            "containerStatuses"
        ][0]["state"]["terminated"].get("message")
        for p in pods
    }
    assert json.loads(messages["0"]) == {"doubled": 2}
    assert messages["1"] is None


def test_two_nodes_two_processes_each(client: TrainerClient, config: LocalConfig) -> None:
    name = client.train(
        trainer=CustomTrainer(
            report_env, func_args={"out": "/workspace/ranks"}, num_nodes=2, num_proc_per_node=2
        )
    )
    job, result = client.wait(name, timeout=60)
    assert job.status is JobState.COMPLETE
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    assert all(s.device_count == "2" for s in job.steps)
    workspace = Path(workspace_of(config, job.namespace, job.name, str(job.uid)))
    assert result["KF_TRAINER_WORKSPACE"] == str(workspace)
    ranks = {
        int(p.stem.split("-")[1]): json.loads(p.read_text())
        for p in (workspace / "ranks").glob("rank-*.json")
    }
    assert sorted(ranks) == [0, 1, 2, 3]
    ports = {env["MASTER_PORT"] for env in ranks.values()}
    assert len(ports) == 1
    for rank, env in ranks.items():
        assert env["WORLD_SIZE"] == "4"
        assert env["LOCAL_RANK"] == str(rank % 2)
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["PET_NODE_RANK"] == str(rank // 2)
        assert env["JOB_COMPLETION_INDEX"] == str(rank // 2)
        assert env["PET_NNODES"] == "2"
        assert env["PET_NPROC_PER_NODE"] == "2"
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["PET_MASTER_PORT"] in ports
    assert result["RANK"] == "0"
    node1 = list(client.get_job_logs(name, step="node-1"))
    assert "rank 2 of 4" in node1
    # The node's second local rank is prefixed as torchrun --tee does.
    assert "[default1]:rank 3 of 4" in node1


def test_mpi_runtime_launcher_is_node_zero(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        runtime="deepspeed-distributed",
        trainer=CustomTrainer(report_env, func_args={"out": "/workspace/r"}, num_nodes=2),
    )
    name = client.submit(spec, identity="mpi").job.name
    job, result = client.wait(name, timeout=30)
    assert [(s.name, s.replicated_job) for s in job.steps] == [
        ("node-0", "launcher"),
        ("node-1", "node"),
    ]
    assert (result["RANK"], result["WORLD_SIZE"]) == ("0", "2")
    assert list(client.get_job_logs(name, step="node-1")) == ["rank 1 of 2"]


def test_failure_names_step_exit_code_and_log(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(fail_on_rank, func_args={"rank": 1}, num_nodes=2))
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=60)
    failure = info.value.failure
    assert failure.reason == "FailedJobs"
    assert f"first failed job: {name}-node-0" in failure.message
    assert failure.step == "node-1"
    assert failure.exit_code == 1
    assert failure.container_reason == "Error"
    assert "ValueError: boom on rank 1" in failure.message
    assert any("ValueError: boom on rank 1" in line for line in failure.log_tail)
    text = str(info.value)
    assert "exit code 1" in text
    assert "boom on rank 1" in text
    # The healthy node was stopped and removed, as a JobSet removes its active Jobs.
    job = client.get_job(name)
    assert [s.name for s in job.steps] == ["node-1"]


def test_signals_map_to_exit_codes(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(kill_self))
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    failure = info.value.failure
    assert failure.exit_code == 137
    assert failure.container_reason in ("Error", "OOMKilled")
    assert "SIGKILL" in failure.message or failure.container_reason == "OOMKilled"


def test_active_deadline(client: TrainerClient) -> None:
    name = client.submit(
        TrainJobSpec(trainer=CustomTrainer(sleeper), options=[ActiveDeadlineSeconds(seconds=1)])
    ).job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    assert info.value.failure.reason == "DeadlineExceeded"


# ---------------------------------------------------------------------------- cancel


def test_delete_kills_the_whole_process_tree(client: TrainerClient, config: LocalConfig) -> None:
    name = client.train(trainer=CustomTrainer(spawn_tree, func_args={"out": "/workspace/tree"}))
    job = client.wait_for_job_status(name, status="Running", timeout=30)
    pids_file = Path(workspace_of(config, job.namespace, name, str(job.uid))) / "tree" / "pids.txt"
    wait_for(pids_file.exists, what="the process tree")
    pids = [int(p) for p in pids_file.read_text().split()]
    assert all(process_alive(p) for p in pids)
    assert client.delete_job(name) is True
    # Delete returns once the processes are gone and the objects removed.
    assert not [p for p in pids if process_alive(p)]
    with pytest.raises(TrainJobNotFoundError):
        client.get_job(name)
    assert client.list_jobs() == []
    assert not pids_file.exists()  # the workspace went with the job
    assert client.delete_job(name) is False


def test_supervisor_killed_then_recovered(client: TrainerClient, config: LocalConfig) -> None:
    """A supervisor that dies (OOM killer, reboot) leaves a job that the next client
    finds, fails clearly and cleans up after."""
    from kf_trainer_core.backends.local.procs import JobLock

    name = client.train(trainer=CustomTrainer(sleeper))
    job = client.wait_for_job_status(name, status="Running", timeout=30)
    lock = JobLock(LocalApi(Path(str(config.state_dir))).paths, str(job.uid))
    pid = lock.holder_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: lock.acquire(blocking=False), what="the lock to free")
    lock.release()
    api = LocalApi(Path(str(config.state_dir)))
    try:
        api.reconcile()
    finally:
        api.close()
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    assert "supervisor" in info.value.failure.message


# -------------------------------------------------------------------- suspend/resume


def test_created_suspended_then_resumed(client: TrainerClient) -> None:
    name = client.submit(TrainJobSpec(trainer=CustomTrainer(trivial), options=[Suspend()])).job.name
    job = client.wait_for_job_status(name, status="Suspended", timeout=30)
    assert job.status is JobState.SUSPENDED
    assert job.steps == []
    client.resume_job(name)
    job, result = client.wait(name, timeout=30)
    assert result == {"doubled": 2}
    assert any(
        c["type"] == "Suspended" and c["status"] == "False" and c["reason"] == "Resumed"
        for c in job.conditions
    )


def test_suspend_running_job_kills_pods_and_resume_restarts(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(resumable, func_args={"marker": "/workspace/m"}))
    client.wait_for_job_status(name, status="Running", timeout=30)
    wait_for(lambda: any("first run" in x for x in client.get_job_logs(name)), what="first run")
    assert client.suspend_job(name).status is JobState.SUSPENDED  # as on a cluster
    job = client.wait_for_job_status(name, status="Suspended", timeout=30)
    assert job.steps == []  # the pods went
    suspended = next(c for c in job.conditions if c["type"] == "Suspended")
    assert (suspended["reason"], suspended["message"]) == ("Suspended", "TrainJob is suspended")
    client.resume_job(name)
    job, result = client.wait(name, timeout=30)
    assert result == "second run"


# ------------------------------------------------------------------------ refusals


def _nothing_stored(client: TrainerClient) -> None:
    """A refused submit stores nothing: no job, and on a fresh state directory not even
    the directory (reading one that was never written to is an error)."""
    import contextlib

    from kf_trainer_core.errors import StateDirNotFoundError

    with contextlib.suppress(StateDirNotFoundError):
        assert client.list_jobs() == []


def test_builtin_trainer_needs_a_cluster(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        runtime="torchtune-llama3.2-1b", trainer=BuiltinTrainer(config=TorchTuneConfig())
    )
    with pytest.raises(SubmitError, match="needs a Kubeflow Trainer cluster"):
        client.submit(spec, identity="builtin")
    _nothing_stored(client)


def test_missing_resources_warn(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(trivial, resources_per_node={"gpu": 64}))
    _, result = client.wait(name, timeout=30)
    assert result == {"doubled": 2}
    warnings = [e for e in client.get_job_events(name) if e.type == "Warning"]
    assert any(
        e.reason == "InsufficientResources" and "nvidia.com/gpu" in e.message for e in warnings
    )
    first = next(iter(client.get_job_logs(name)))
    assert first.startswith("kf-trainer: warning:")
    assert "nvidia.com/gpu" in first


def test_missing_resources_fail(state_dir: Path) -> None:
    config = LocalConfig(state_dir=str(state_dir), on_missing_resources="fail")
    with TrainerClient(config) as client:
        with pytest.raises(SubmitError, match=r"nvidia.com/gpu 64 per node"):
            client.train(trainer=CustomTrainer(trivial, resources_per_node={"gpu": 64}))
        _nothing_stored(client)


def test_container_trainer_runs_its_command_here(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainerContainer(image="ghcr.io/example/trainer:1"),
        options=[
            TrainerCommand(
                command=["python", "-c", "import os; print('hi', os.environ['PET_NNODES'])"]
            )
        ],
    )
    name = client.submit(spec, identity="container").job.name
    job, _ = client.wait(name, timeout=30)
    assert job.status is JobState.COMPLETE
    lines = list(client.get_job_logs(name))
    assert lines[0].startswith("kf-trainer: warning:")
    assert "ghcr.io/example/trainer:1" in lines[0]
    assert "hi 1" in lines
    assert any(
        e.reason == "ImageNotUsed" and e.type == "Warning" for e in client.get_job_events(name)
    )


def test_a_command_that_cannot_start_is_a_start_error(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainerContainer(image="ghcr.io/example/trainer:1"),
        options=[TrainerCommand(command=["/no/such/binary"])],
    )
    name = client.submit(spec, identity="nostart").job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    failure = info.value.failure
    assert (failure.exit_code, failure.container_reason) == (128, "StartError")
    assert 'exec: "/no/such/binary": No such file or directory' in failure.message


def test_missing_runtime_is_a_creation_failure(client: TrainerClient) -> None:
    built = client.build(TrainJobSpec(trainer=CustomTrainer(trivial)), name="orphan")
    manifest = built.manifest
    manifest["spec"]["runtimeRef"]["name"] = "not-installed"
    from kf_trainer_core.k8s.calls import Create
    from kf_trainer_core.k8s.resources import TRAINJOBS

    raw(client, Create(TRAINJOBS, "local", manifest))
    with pytest.raises(TrainJobCreationFailedError, match="not-installed") as info:
        client.wait("orphan", timeout=10)
    # In the Trainer's words: its cache's NotFound names the kind, as on a cluster.
    assert 'ClusterTrainingRuntime.trainer.kubeflow.org "not-installed" not found' in str(
        info.value
    )


# ---------------------------------------------------------------------- initializers


CACHE_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "torch-with-inputs",
        "labels": {"trainer.kubeflow.org/framework": "torch"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": name,
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}
                            },
                            "spec": {"template": {"spec": {"containers": [{"name": container}]}}},
                        },
                    }
                    for name, step, container in (
                        ("dataset-initializer", "dataset-initializer", "dataset-initializer"),
                        ("model-initializer", "model-initializer", "model-initializer"),
                        ("node", "trainer", "node"),
                    )
                ]
            }
        },
    },
}


def test_initializers_fill_the_workspace(
    client: TrainerClient, config: LocalConfig, tmp_path: Path
) -> None:
    install_runtime(config, CACHE_RUNTIME)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("1,2,3")
    (data / "skip.bin").write_text("ignored")
    model = tmp_path / "model"
    (model / "nested").mkdir(parents=True)
    (model / "weights.txt").write_text("w=0.5")
    spec = TrainJobSpec(
        runtime="torch-with-inputs",
        initializer=Initializer(
            dataset=DatasetInitializer(storage_uri=data.as_uri(), env={"IGNORE_PATTERNS": "*.bin"}),
            model=ModelInitializer(storage_uri=f"file://{model}"),
        ),
        trainer=CustomTrainer(
            read_inputs,
            func_args={"dataset": "/workspace/dataset", "model": "/workspace/model"},
        ),
    )
    name = client.submit(spec, identity="inputs").job.name
    job, result = client.wait(name, timeout=60)
    assert [(s.name, s.status) for s in job.steps] == [
        ("dataset-initializer", "Succeeded"),
        ("model-initializer", "Succeeded"),
        ("node-0", "Succeeded"),
    ]
    assert result["data"] == "1,2,3"
    assert result["weights"] == "w=0.5"
    workspace = Path(result["workspace"])
    assert not (workspace / "dataset" / "skip.bin").exists()
    assert (workspace / "model" / "nested").is_dir() is False  # empty dirs are not copied
    log = list(client.get_job_logs(name, step="dataset-initializer"))
    assert any("copied 1 file(s)" in line for line in log)
    # Each Job says it completed when it does, as the Job controller does: the
    # initializers' before the node's pod is made, not all of them at the end.
    api = LocalApi(Path(str(config.state_dir)))
    try:
        events = api.perform(ListObjects(EVENTS, job.namespace))["items"]
    finally:
        api.close()
    events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    said = [(e["involvedObject"]["name"], e["reason"]) for e in events]
    node_created = said.index((f"{name}-node-0", "SuccessfulCreate"))
    for step in ("dataset-initializer", "model-initializer"):
        assert said.index((f"{name}-{step}-0", "Completed")) < node_created
    assert said.count((f"{name}-node-0", "Completed")) == 1


def test_initializer_without_its_package_fails_clearly(client: TrainerClient) -> None:
    pytest.importorskip("kf_trainer_core")
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("huggingface_hub is installed")
    spec = TrainJobSpec(
        runtime="torch-distributed-with-cache",
        initializer=Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://org/data")),
        trainer=CustomTrainer(trivial),
    )
    name = client.submit(spec, identity="hf").job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=60)
    failure = info.value.failure
    assert failure.step == "dataset-initializer"
    assert "huggingface_hub" in failure.message
    assert "pip install huggingface_hub" in failure.message


# ------------------------------------------------------------------------ logs


def test_follow_logs_while_running(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(chatty, func_args={"lines": 8, "delay": 0.2}))
    client.wait_for_job_status(name, status="Running", timeout=30)
    seen: list[tuple[float, str]] = []
    for line in client.get_job_logs(name, follow=True):
        seen.append((time.monotonic(), line))
    texts = [t for _, t in seen]
    assert texts[:8] == [f"line {i}" for i in range(8)]
    # Lines arrived as they were written, not all at the end.
    assert seen[7][0] - seen[0][0] > 0.6
    assert list(client.get_job_logs(name, tail=2)) == texts[-2:]


# ------------------------------------------------------------ identity & processes


def test_submit_is_idempotent_per_identity(client: TrainerClient) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial, func_args={"x": 3}))
    first = client.submit(spec, identity=("dag", "task", "run-1"))
    again = client.submit(spec, identity=("dag", "task", "run-1"))
    assert first.created
    assert not again.created
    assert first.job.name == again.job.name
    assert [j.name for j in client.list_jobs()] == [first.job.name]
    client.wait(first.job.name, timeout=30)


def _run_jobs_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "local_jobs.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_submit_in_one_process_wait_in_another(client: TrainerClient, state_dir: Path) -> None:
    proc = _run_jobs_cli("submit", str(state_dir), "cross/submit", "trivial")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    name = out.strip()
    # The submitter has exited; its job runs on, and this process waits for it.
    _, result = client.wait(name, timeout=30)
    assert result == {"doubled": 10}

    other = client.train(trainer=CustomTrainer(chatty, func_args={"lines": 3}), identity="x")
    waiter = _run_jobs_cli("wait", str(state_dir), other)
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert json.loads(out) == 3


def test_concurrent_submitters(client: TrainerClient, state_dir: Path) -> None:
    # Four processes at once: three race for one identity, one has its own.
    procs = [_run_jobs_cli("submit", str(state_dir), "shared", "trivial") for _ in range(3)]
    procs.append(_run_jobs_cli("submit", str(state_dir), "own", "trivial"))
    names = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        names.append(out.strip())
    assert len(set(names[:3])) == 1  # one identity, one job, whoever won the create
    jobs = client.list_jobs()
    assert sorted(j.name for j in jobs) == sorted(set(names))
    for name in set(names):
        _, result = client.wait(name, timeout=60)
        assert result == {"doubled": 10}
    # One global version: no two objects share one.
    versions = [j.resource_version for j in client.list_jobs()]
    assert len(set(versions)) == len(versions)


def test_gloo_all_reduce_across_two_nodes(state_dir: Path) -> None:
    """Through torchrun (torch policy, torch importable). Runs where this environment
    has torch, or where KF_TRAINER_TEST_TORCH_PYTHON names an interpreter that has."""
    python = os.environ.get("KF_TRAINER_TEST_TORCH_PYTHON")
    if python is None:
        pytest.importorskip("torch")
    with TrainerClient(LocalConfig(state_dir=str(state_dir), python=python)) as client:
        name = client.train(trainer=CustomTrainer(gloo_all_reduce, num_nodes=2))
        _, result = client.wait(name, timeout=300)
        assert result == 3.0
        pod_env = client.get_job(name).steps[0]
        assert pod_env.status == "Succeeded"


def test_job_objects_are_typed(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(trivial))
    job = client.wait_for_job_status(name, timeout=30)
    assert isinstance(job, TrainJob)
    assert job.runtime == "torch-distributed"
    assert job.spec_hash
    assert job.identity


# ------------------------------------------------------------------------ venvs


def _tiny_wheel(folder: Path) -> Path:
    """A one-module wheel, built by hand: installing it needs no index."""
    import base64
    import hashlib
    import zipfile

    name, version = "kftiny", "0.1"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def uses_tiny() -> dict[str, object]:
    import sys

    import kftiny

    return {"value": kftiny.VALUE, "python": sys.executable}


def test_use_venv_installs_packages_once(state_dir: Path, tmp_path: Path) -> None:
    import shutil

    if shutil.which("uv") is None:
        pytest.skip("uv is not on PATH (the pip fallback is slow)")
    wheel = str(_tiny_wheel(tmp_path))
    with TrainerClient(LocalConfig(state_dir=str(state_dir), use_venv=True)) as client:
        trainer = CustomTrainer(uses_tiny, packages_to_install=[f"kftiny @ {Path(wheel).as_uri()}"])
        first = client.train(trainer=trainer)
        _, result = client.wait(first, timeout=120)
        assert result["value"] == 42
        assert str(state_dir / "venvs") in str(result["python"])
        second = client.train(trainer=trainer)
        _, again = client.wait(second, timeout=60)
        assert again == result
        assert any("using the cached virtualenv" in line for line in client.get_job_logs(second))


def test_packages_without_venv_are_reported(client: TrainerClient, tmp_path: Path) -> None:
    name = client.train(trainer=CustomTrainer(trivial, packages_to_install=["kftiny-absent"]))
    client.wait(name, timeout=30)
    assert any(
        "packages_to_install are not installed here" in line and "kftiny-absent" in line
        for line in client.get_job_logs(name)
    )


def test_lists_are_paginated_like_a_clusters(client: TrainerClient) -> None:
    from kf_trainer_core.k8s.calls import ListObjects
    from kf_trainer_core.k8s.resources import TRAINJOBS

    names = sorted(
        client.submit(
            TrainJobSpec(trainer=CustomTrainer(trivial), options=[Suspend()]), name=f"page-{i}"
        ).job.name
        for i in range(3)
    )
    assert sorted(j.name for j in client.list_jobs(page_size=1)) == names
    first = raw(client, ListObjects(TRAINJOBS, "local", limit=2))
    assert [o["metadata"]["name"] for o in first["items"]] == names[:2]
    assert first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    rest = raw(client, ListObjects(TRAINJOBS, "local", limit=2, continue_token=token))
    assert [o["metadata"]["name"] for o in rest["items"]] == names[2:]
    assert "continue" not in rest["metadata"]
    for name in names:
        client.delete_job(name)
