"""TrainJobs in containers of a real engine: rendezvous, initializers, logs, results,
failures, cancel/suspend/delete, and nothing left behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from container_jobs import (
    chatty,
    fail,
    gloo_all_reduce,
    read_dataset,
    reports_progress,
    sleeper,
    trivial,
)

from container_support import job_containers
from kf_trainer_core.backends.local import workspace_of
from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.api import LocalApi
from kf_trainer_core.backends.local.procs import JobLock
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import ContainerConfig
from kf_trainer_core.errors import SubmitError, TrainJobFailedError
from kf_trainer_core.spec import (
    CustomTrainer,
    CustomTrainerContainer,
    DatasetInitializer,
    Initializer,
    TrainerCommand,
    TrainJobSpec,
)

#: A runtime whose launcher is plain ``python``: function jobs that need no torch.
PYTHON_RUNTIME = "jax-distributed"

# Two nodes meet over loopback at the Trainer's PET_MASTER_ADDR:PET_MASTER_PORT with a
# plain socket: node 0 listens, node 1 connects and says who it is.
SOCKET_RENDEZVOUS = r"""
import os, socket, time
rank = int(os.environ["PET_NODE_RANK"])
addr = (os.environ["PET_MASTER_ADDR"], int(os.environ["PET_MASTER_PORT"]))
if rank == 0:
    srv = socket.create_server(addr)
    conn, _ = srv.accept()
    print("node 0 got:", conn.recv(100).decode(), flush=True)
else:
    for _ in range(300):
        try:
            sock = socket.create_connection(addr)
            break
        except OSError:
            time.sleep(0.1)
    sock.sendall(("hello from node %d of %s" % (rank, os.environ["PET_NNODES"])).encode())
    print("node 1 sent", flush=True)
"""


def wait_for(predicate: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def uid_of(client: TrainerClient, name: str) -> str:
    return str(client.get_job(name).uid)


def test_two_nodes_rendezvous_over_loopback(client: TrainerClient, engine: Any) -> None:
    name = client.train(
        trainer=CustomTrainerContainer("ignored:by-config", num_nodes=2),
        options=[TrainerCommand(["python3", "-c", SOCKET_RENDEZVOUS])],
    )
    job, _ = client.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    assert "node 0 got: hello from node 1 of 2" in list(client.get_job_logs(name, "node-0"))
    assert "node 1 sent" in list(client.get_job_logs(name, "node-1"))
    # Each pod was a container of the engine; auto_remove took them away once done.
    assert not job_containers(engine, uid_of(client, name))


def test_gloo_all_reduce_through_torchrun(
    client: TrainerClient, image_has_torch: bool, engine: Any
) -> None:
    if not image_has_torch:
        pytest.skip("the test image has no torch (see .ci/container-setup.sh)")
    name = client.train(trainer=CustomTrainer(gloo_all_reduce, num_nodes=2))
    job, result = client.wait(name, timeout=300)
    assert job.status is JobState.COMPLETE
    assert result == {"sum": 3.0, "world": 2.0}  # ranks 0 and 1 each added rank + 1
    for step, rank in (("node-0", 0), ("node-1", 1)):
        assert any(f"rank {rank} of 2: sum 3.0" in line for line in client.get_job_logs(name, step))


def test_logs_per_step_and_result(client: TrainerClient, tmp_path: Path) -> None:
    name = client.train(
        runtime=PYTHON_RUNTIME, trainer=CustomTrainer(chatty, func_args={"lines": 3}, num_nodes=2)
    )
    job, result = client.wait(name, timeout=120)
    assert result == 3
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    for node in (0, 1):
        lines = list(client.get_job_logs(name, f"node-{node}"))
        assert [line for line in lines if line.startswith("line ")] == [
            f"line {i} of node {node}" for i in range(3)
        ]
    outputs = client.get_job_outputs(name)
    assert outputs.result == 3


def test_progress_reported_in_a_container_reaches_the_jobs_status(
    client: TrainerClient,
) -> None:
    # The supervisor reads the container's log as it reads a process's: the last report
    # lands in status.trainerStatus (get_job reads no log), as on the local backend.
    name = client.train(
        runtime=PYTHON_RUNTIME,
        trainer=CustomTrainer(
            reports_progress, func_args={"steps": 3}, env={"KF_TRAINER_REPORT_INTERVAL": "0"}
        ),
    )
    _, result = client.wait(name, timeout=120)
    assert result == {"steps": 3}
    progress = client.get_job(name).progress
    assert progress is not None
    assert progress.percentage == 100
    assert progress.metrics["step"] == 2


def test_dataset_initializer_fills_the_shared_workspace(
    client: TrainerClient, config: ContainerConfig, tmp_path: Path
) -> None:
    from kf_trainer_core.backends.local import install_runtime
    from kf_trainer_core.backends.local.runtimes import default_runtimes

    runtime = default_runtimes()["torch-distributed-with-cache"]
    runtime["metadata"]["name"] = "python-with-cache"
    runtime["spec"]["mlPolicy"] = {"numNodes": 1, "jax": {}}
    runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] = "jax"
    install_runtime(config, runtime)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("1,2,3")
    (data / "skip.bin").write_text("ignored")
    spec = TrainJobSpec(
        runtime="python-with-cache",
        initializer=Initializer(
            dataset=DatasetInitializer(storage_uri=data.as_uri(), env={"IGNORE_PATTERNS": "*.bin"})
        ),
        trainer=CustomTrainer(read_dataset, func_args={"path": "/workspace/dataset"}),
    )
    name = client.submit(spec).job.name
    job, result = client.wait(name, timeout=120)
    assert [(s.name, s.status) for s in job.steps] == [
        ("dataset-initializer", "Succeeded"),
        ("node-0", "Succeeded"),
    ]
    assert result == {"data": "1,2,3", "workspace": "/workspace"}
    host_copy = Path(workspace_of(config, client.namespace, name, uid_of(client, name)))
    assert (host_copy / "dataset" / "train.txt").read_text() == "1,2,3"
    assert not (host_copy / "dataset" / "skip.bin").exists()
    log = list(client.get_job_logs(name, step="dataset-initializer"))
    assert any("copied 1 file(s)" in line for line in log)


def test_a_failing_job_is_explained(client: TrainerClient, engine: Any) -> None:
    name = client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(fail, func_args={"lr": 10.0}))
    with pytest.raises(TrainJobFailedError) as err:
        client.wait(name, timeout=120)
    failure = err.value.failure
    assert failure.step == "node-0"
    assert failure.exit_code == 1
    assert "learning rate 10.0 diverged" in failure.describe()
    assert not job_containers(engine, uid_of(client, name))


def test_an_absent_image_with_pull_policy_never_fails_the_pod(state_dir: Path) -> None:
    config = ContainerConfig(
        state_dir=str(state_dir), image="kf-trainer-absent:none", pull_policy="Never"
    )
    with TrainerClient(config) as client:
        name = client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(trivial))
        with pytest.raises(TrainJobFailedError) as err:
            client.wait(name, timeout=60)
    text = err.value.failure.describe()
    assert "ErrImageNeverPull" in text
    assert "kf-trainer-absent:none" in text


def test_delete_stops_and_removes_everything(
    client: TrainerClient, config: ContainerConfig, engine: Any
) -> None:
    name = client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(sleeper, num_nodes=2))
    uid = uid_of(client, name)
    wait_for(
        lambda: len([c for c in job_containers(engine, uid) if c.status == "running"]) == 2,
        what="two running containers",
    )
    wait_for(lambda: "sleeping" in list(client.get_job_logs(name, "node-1")), what="a log line")
    workspace = Path(workspace_of(config, client.namespace, name, uid))
    assert workspace.is_dir()
    client.delete_job(name)
    assert not job_containers(engine, uid)
    assert not workspace.exists()
    assert name not in [j.name for j in client.list_jobs()]


def test_suspend_stops_the_containers_and_resume_runs_again(
    client: TrainerClient, engine: Any
) -> None:
    name = client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(sleeper))
    uid = uid_of(client, name)
    wait_for(
        lambda: any(c.status == "running" for c in job_containers(engine, uid)),
        what="a running container",
    )
    client.suspend_job(name)
    client.wait(name, "Suspended", timeout=60)
    wait_for(lambda: not job_containers(engine, uid), what="the containers to go")
    client.resume_job(name)
    wait_for(
        lambda: any(c.status == "running" for c in job_containers(engine, uid)),
        what="a running container after the resume",
    )
    client.delete_job(name)
    assert not job_containers(engine, uid)


def test_a_killed_supervisor_leaves_no_container_running(
    client: TrainerClient, config: ContainerConfig, engine: Any
) -> None:
    name = client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(sleeper))
    uid = uid_of(client, name)
    wait_for(
        lambda: any(c.status == "running" for c in job_containers(engine, uid)),
        what="a running container",
    )
    lock = JobLock(Paths(str(config.state_dir)), uid)
    pid = lock.holder_pid()
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: lock.acquire(blocking=False), what="the lock to free")
    lock.release()
    # The next client's reconcile restarts a supervisor, which finds the pod orphaned:
    # it stops the container and fails the job, saying why.
    api = LocalApi(Path(str(config.state_dir)))
    try:
        api.reconcile()
    finally:
        api.close()
    with pytest.raises(TrainJobFailedError) as err:
        client.wait(name, timeout=60)
    assert "supervisor" in err.value.failure.describe()
    wait_for(lambda: not job_containers(engine, uid), what="the orphaned container to go")


def test_no_engine_is_refused_at_submit(tmp_path: Path) -> None:
    config = ContainerConfig(
        state_dir=str(tmp_path / "state"), image="x", host="unix:///nonexistent/docker.sock"
    )
    with TrainerClient(config) as client, pytest.raises(SubmitError) as err:
        client.train(runtime=PYTHON_RUNTIME, trainer=CustomTrainer(trivial))
    text = str(err.value)
    assert "unix:///nonexistent/docker.sock" in text
    assert "Fix:" in text


def test_the_container_sees_the_trainers_environment_not_the_hosts(
    state_dir: Path, image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KF_TEST_HOST_ONLY", "leaked")  # the supervisor inherits it
    config = ContainerConfig(
        state_dir=str(state_dir), image=image, pull_policy="Never", env={"TEAM": "ml"}
    )
    with TrainerClient(config) as client:
        name = client.train(
            trainer=CustomTrainerContainer("ignored:by-config", num_nodes=2, env={"LR": "0.1"}),
            options=[TrainerCommand(["sh", "-c", "env | sort"])],
        )
        client.wait(name, timeout=120)
        env = dict(
            line.split("=", 1) for line in client.get_job_logs(name, "node-1") if "=" in line
        )
    assert env["PET_NNODES"] == "2"
    assert env["PET_NODE_RANK"] == "1"
    assert env["PET_MASTER_ADDR"] == "127.0.0.1"
    assert int(env["PET_MASTER_PORT"]) > 0
    assert env["JOB_COMPLETION_INDEX"] == "1"
    assert (env["LR"], env["TEAM"]) == ("0.1", "ml")
    assert env["KF_TRAINER_WORKSPACE"] == "/workspace"
    assert "KF_TEST_HOST_ONLY" not in env


def test_resources_per_node_become_engine_limits(client: TrainerClient, engine: Any) -> None:
    name = client.train(
        runtime=PYTHON_RUNTIME,
        trainer=CustomTrainer(sleeper, resources_per_node={"cpu": 1, "memory": "256Mi"}),
    )
    uid = uid_of(client, name)
    wait_for(
        lambda: any(c.status == "running" for c in job_containers(engine, uid)),
        what="a running container",
    )
    (summary,) = job_containers(engine, uid)
    host = engine.containers.get(summary.id).attrs["HostConfig"]
    assert host["NanoCpus"] == 1_000_000_000
    assert host["Memory"] == 256 * 2**20
    assert host["NetworkMode"] == "host"
    client.delete_job(name)


def test_missing_gpus_refused_with_on_missing_resources_fail(state_dir: Path, image: str) -> None:
    from kf_trainer_core.backends.local.machine import gpu_count

    if gpu_count() > 0:
        pytest.skip("this machine has GPUs")
    config = ContainerConfig(state_dir=str(state_dir), image=image, on_missing_resources="fail")
    with TrainerClient(config) as client, pytest.raises(SubmitError) as err:
        client.train(trainer=CustomTrainer(trivial, resources_per_node={"gpu": 1}))
    assert "nvidia.com/gpu" in str(err.value)
    assert "on_missing_resources='warn'" in str(err.value)


def test_an_mpi_runtime_gets_a_hostfile(client: TrainerClient) -> None:
    name = client.train(
        runtime="deepspeed-distributed",
        trainer=CustomTrainerContainer("ignored:by-config", num_nodes=2),
        options=[TrainerCommand(["cat", "/etc/mpi/hostfile"])],
    )
    job, _ = client.wait(name, timeout=120)
    # The launcher runs as node 0 (runLauncherAsNode), the node pod is node 1.
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    for step in ("node-0", "node-1"):
        assert "127.0.0.1 slots=2" in list(client.get_job_logs(name, step))


def test_created_suspended_runs_nothing_until_resumed(client: TrainerClient, engine: Any) -> None:
    from kf_trainer_core.spec import Suspend

    name = client.train(
        trainer=CustomTrainerContainer("ignored:by-config"),
        options=[TrainerCommand(["echo", "resumed"]), Suspend()],
    )
    job = client.wait_for_job_status(name, status="Suspended", timeout=60)
    assert job.steps == []
    assert not job_containers(engine, uid_of(client, name))
    client.resume_job(name)
    job, _ = client.wait(name, timeout=60)
    assert job.status is JobState.COMPLETE
    assert "resumed" in list(client.get_job_logs(name, "node-0"))
