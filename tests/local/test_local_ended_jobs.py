"""A job whose pods all succeeded ends Complete, however its supervisor ends after them.

The supervisor writes a pod's end and the job's ``Complete`` in separate transactions,
and notices a pod's end only at its next look. Before: a shutdown (SIGTERM) that came
after the trainer had returned failed the job, its node recorded as killed (exit 137,
"a retry may succeed"); a supervisor killed between the two writes left a job whose
repair failed it ("killed while the pod ran") — and which a new supervisor (a new
process's reconcile, a resume) ran a second time."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from local_helpers import wait_for
from local_jobs import scripted, wait_for_file

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.api import LocalApi
from kf_trainer_core.backends.local.liveness import mark_supervising
from kf_trainer_core.backends.local.procs import JobLock
from kf_trainer_core.backends.local.recovery import check_supervisors
from kf_trainer_core.backends.local.store import PODS, TRAINJOBS, Store
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.k8s.trainjob import COMPLETE
from kf_trainer_core.spec import CustomTrainer


def _zombie(pid: int) -> bool:
    """A process that ended and that its parent has not reaped (it has not looked)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] == b"Z"


def _node_pod(store: Store, name: str) -> dict[str, Any]:
    pods = [p for p in store.select(PODS)[0] if p["metadata"]["name"].startswith(f"{name}-")]
    assert len(pods) == 1
    return pods[0]


def test_a_shutdown_after_the_trainer_returned_completes_the_job(
    client: TrainerClient, config: LocalConfig, tmp_path: Path
) -> None:
    barrier = tmp_path / "barrier"
    name = client.train(trainer=CustomTrainer(wait_for_file, func_args={"path": str(barrier)}))
    job = client.wait_for_job_status(name, "Running", timeout=60)
    wait_for(lambda: "waiting" in client.get_job_logs(name), 60, "the trainer to start")
    paths = Paths(str(config.state_dir))
    supervisor = JobLock(paths, str(job.uid)).holder_pid()
    assert supervisor is not None
    store = Store(paths.db)
    try:
        container = _node_pod(store, name)["status"]["containerStatuses"][0]
        rank = int(str(container["containerID"]).removeprefix("local://"))
        os.kill(supervisor, signal.SIGSTOP)  # it cannot look at its pod
        try:
            barrier.touch()
            wait_for(lambda: _zombie(rank), 30, "the trainer's end")
            os.kill(supervisor, signal.SIGTERM)  # a shutdown, after the trainer returned
        finally:
            os.kill(supervisor, signal.SIGCONT)
        done, result = client.wait(name, timeout=30)
        assert done.status is JobState.COMPLETE
        assert result == "released"
        pod = _node_pod(store, name)
    finally:
        store.close()
    assert pod["status"]["phase"] == "Succeeded"


def _ended_unwritten(client: TrainerClient, config: LocalConfig, counter: Path) -> TrainJob:
    """A job run to its end, then left as a supervisor killed between its last pod's end
    and the job's ``Complete`` leaves it: the pods stored ``Succeeded``, no ``Complete``,
    and the marker of a supervisor that did not end on its own terms."""
    trainer = CustomTrainer(scripted, func_args={"counter": str(counter), "plan": "ok"})
    job, _ = client.wait(client.train(trainer=trainer), timeout=60)
    paths = Paths(str(config.state_dir))
    # The supervisor writes Complete, then ends: until it has, it holds the job's lock
    # (a repair takes it for alive) and removes its marker on the way out (seen in CI).
    lock = JobLock(paths, str(job.uid))
    wait_for(lambda: lock.acquire(blocking=False), 30, "the supervisor's end")
    lock.release()
    store = Store(paths.db)
    try:
        with store.write() as tx:
            obj = tx.get(TRAINJOBS, job.namespace, job.name)
            assert obj is not None
            conditions = obj["status"]["conditions"]
            obj["status"]["conditions"] = [c for c in conditions if c["type"] != COMPLETE]
            tx.put(TRAINJOBS, obj)
    finally:
        store.close()
    mark_supervising(paths, str(job.uid))
    return job


def test_the_repair_of_a_job_whose_pods_all_succeeded_completes_it(
    client: TrainerClient, config: LocalConfig, tmp_path: Path
) -> None:
    job = _ended_unwritten(client, config, tmp_path / "runs")
    paths = Paths(str(config.state_dir))
    store = Store(paths.db)
    try:
        assert check_supervisors(paths, store, force=True) == [str(job.uid)]
    finally:
        store.close()
    done, result = client.wait(job.name, timeout=30)
    assert done.status is JobState.COMPLETE
    assert result == "run 0"
    assert len(os.listdir(tmp_path / "runs")) == 1


def test_a_new_supervisor_does_not_run_a_job_whose_pods_all_succeeded_again(
    client: TrainerClient, config: LocalConfig, tmp_path: Path
) -> None:
    job = _ended_unwritten(client, config, tmp_path / "runs")
    api = LocalApi(Path(str(config.state_dir)))
    try:
        api.reconcile()  # what a new process does first: it starts a supervisor
    finally:
        api.close()
    done, result = client.wait(job.name, timeout=60)
    assert done.status is JobState.COMPLETE
    lock = JobLock(Paths(str(config.state_dir)), str(job.uid))
    wait_for(lambda: lock.acquire(blocking=False), 30, "the supervisor's end")
    lock.release()
    assert len(os.listdir(tmp_path / "runs")) == 1, "the trainer ran again"
    assert result == "run 0"
