"""Checkpoints over real HTTP against the Kubernetes-API test server (issue 19, part
3): the TrainJob carries the identity's volume and env, the pods get them, and the next
attempt after a killed pod resumes from the last checkpoint on the claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.checkpoints import DIR_ENV, URI_ENV, identity_key
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass, InfrastructureFailure, SpecError
from kf_trainer_core.k8s.resources import PODS
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import (
    PATCH_MANAGER,
    VOLUME_NAME,
    Checkpoints,
    CheckpointsUnreachableError,
)
from kf_trainer_core.testing.scenarios import PodContext, PodResult, Scenario
from kf_trainer_core.testing.server import KubeTestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "local"))
from checkpoint_jobs import counting

MOUNT = "/mnt/ckpt"


def _spec(**args: Any) -> TrainJobSpec:
    return TrainJobSpec(
        trainer=CustomTrainer(counting, func_args={"steps": 8, **args}),
        options=[Checkpoints(pvc="team-ckpts", mount_path=MOUNT)],
    )


def kubelet(server: KubeTestServer, claims: Path, kill_after: str | None) -> Any:
    """A custom executor that runs the pod's real program as a kubelet would, with each
    PersistentVolumeClaim the pod mounts at its ``mountPath`` (a directory per claim
    under ``claims``: paths under the mount are mapped there). ``kill_after``: SIGKILL
    the container when its log shows that line, once (a node lost mid-training)."""
    killed: list[str] = []

    def run(ctx: PodContext) -> PodResult:
        pod = server.store.get(PODS, ctx.namespace, ctx.pod)
        claim_of = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"].get("volumes") or []
            if "persistentVolumeClaim" in v
        }
        container = next(c for c in pod["spec"]["containers"] if c["name"] == ctx.container)
        env = {**os.environ, **ctx.env}
        for mount in container.get("volumeMounts") or []:
            claim = claim_of.get(mount["name"])
            if claim is None:
                continue
            for key, value in env.items():
                if value == mount["mountPath"] or value.startswith(mount["mountPath"] + "/"):
                    env[key] = str(claims / claim) + value[len(mount["mountPath"]) :]
        proc = subprocess.Popen(
            [*ctx.command, *ctx.args],
            env=env,
            cwd=ctx.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            ctx.log(line.rstrip("\n"))
            if kill_after is not None and not killed and line.strip() == kill_after:
                killed.append(ctx.pod)
                proc.kill()
        code = proc.wait()
        return PodResult(exit_code=128 - code if code < 0 else code)  # SIGKILL: 137

    return run


def test_the_trainjob_and_its_pods_carry_the_identity_location(
    client: TrainerClient, server: KubeTestServer, tmp_path: Path
) -> None:
    identity = ("dag", "train", "run-1")
    spec = _spec(steps=1).with_options(
        Checkpoints(pvc="team-ckpts", uri="s3://b/ckpts", mount_path=MOUNT)
    )
    server.controller.default_scenario = Scenario(executor=kubelet(server, tmp_path, None))
    first = client.submit(spec, identity=identity).obj
    key = identity_key("dag/train/run-1")
    where = f"{MOUNT}/default/{key}"
    env = {e["name"]: e["value"] for e in first["spec"]["trainer"]["env"]}
    assert env == {DIR_ENV: where, URI_ENV: f"s3://b/ckpts/default/{key}/"}
    (_patch,) = [p for p in first["spec"]["runtimePatches"] if p["manager"] == PATCH_MANAGER]
    client.wait(first["metadata"]["name"], timeout=30)
    # The pods: the claim mounted, the variable set (by the simulated Trainer).
    pods, _ = server.store.list(PODS, "default")
    (pod,) = [p for p in pods if p["metadata"]["name"].startswith(first["metadata"]["name"])]
    assert {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": "team-ckpts"}} in pod[
        "spec"
    ]["volumes"]
    node = pod["spec"]["containers"][0]
    assert {"name": VOLUME_NAME, "mountPath": MOUNT} in node["volumeMounts"]
    assert {"name": DIR_ENV, "value": where} in node["env"]
    # Every attempt has the same location (the identity's, not the attempt's).
    later = client.build(spec, identity=identity)
    assert later.manifest["spec"]["trainer"]["env"] == first["spec"]["trainer"]["env"]
    other = client.build(spec, identity=("dag", "train", "run-2")).manifest
    assert other["spec"]["trainer"]["env"] != first["spec"]["trainer"]["env"]


def test_a_killed_pod_is_retried_from_the_last_checkpoint(
    client: TrainerClient, server: KubeTestServer, tmp_path: Path
) -> None:
    identity = ("dag", "train", "run-1")
    server.controller.default_scenario = Scenario(
        executor=kubelet(server, tmp_path, kill_after="step 3 saved")
    )
    with pytest.raises(InfrastructureFailure) as failed:
        client.run(_spec(stall_after=3), identity=identity, timeout=60)
    assert failed.value.failure.failure_class is FailureClass.INFRASTRUCTURE
    # The retried task: the next attempt, the same claim and directory.
    outputs = client.run(_spec(stall_after=3), identity=identity, timeout=60)
    assert outputs.status is JobState.COMPLETE
    on_claim = tmp_path / "team-ckpts" / "default" / identity_key("dag/train/run-1")
    assert outputs.result == {"resumed_from": 4, "total": sum(range(8)), "dir": str(on_claim)}
    logs = client.get_job_logs(outputs.name)
    assert any(line.endswith("starting at step 4") for line in logs)
    assert sorted(p.name for p in on_claim.iterdir())[-1] == "step-0000000007.json"


def test_a_cluster_needs_a_claim_or_a_uri(client: TrainerClient, server: KubeTestServer) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(counting), options=[Checkpoints()])
    with pytest.raises(SpecError) as err:
        client.submit(spec, identity=("x",))
    assert err.value.fields == ["options[0].pvc"]
    assert "Checkpoints(pvc=" in str(err.value)
    assert client.list_jobs() == []  # nothing was submitted


def test_cleaning_on_a_cluster_runs_a_job_that_mounts_the_claim(
    client: TrainerClient, server: KubeTestServer, tmp_path: Path
) -> None:
    server.controller.default_scenario = Scenario(executor=kubelet(server, tmp_path, None))
    ids = [("dag", "train", "run-8"), ("dag", "train", "run-9")]
    for identity in ids:
        client.run(_spec(steps=2), identity=identity, timeout=30)
    dirs = [tmp_path / "team-ckpts" / "default" / identity_key("/".join(i)) for i in ids]
    assert all((d / "step-0000000001.json").exists() for d in dirs)

    loc = client.clean_checkpoints(ids[0], timeout=30)
    assert (loc.pvc, loc.path) == (
        "team-ckpts",
        f"{MOUNT}/default/{identity_key('dag/train/run-8')}",
    )
    assert not dirs[0].exists()
    assert (dirs[1] / "step-0000000001.json").exists()  # another identity's stay
    # The cleaning job was the suite's own: gone; the identities' jobs are kept.
    assert len(client.list_jobs()) == 2
    # Again: the location is already gone, which is no error.
    assert client.clean_checkpoints(ids[0], timeout=30) == loc


async def test_the_async_client_cleans_the_same_way(
    aclient: AsyncTrainerClient, server: KubeTestServer, tmp_path: Path
) -> None:
    server.controller.default_scenario = Scenario(executor=kubelet(server, tmp_path, None))
    identity = ("dag", "train", "async")
    await aclient.run(_spec(steps=1), identity=identity, timeout=30)
    where = tmp_path / "team-ckpts" / "default" / identity_key("dag/train/async")
    assert where.is_dir()
    loc = await aclient.clean_checkpoints(identity, timeout=30)
    assert loc == await aclient.checkpoint_location(identity)
    assert not where.exists()


def test_a_bucket_is_named_not_cleaned(client: TrainerClient, server: KubeTestServer) -> None:
    server.controller.default_scenario = Scenario(name="success")
    identity = ("dag", "train", "run-7")
    spec = _spec(steps=1).with_options(Checkpoints(uri="s3://bucket/ckpts"))
    client.run(spec, identity=identity, timeout=30)
    with pytest.raises(CheckpointsUnreachableError, match="remove s3://bucket/ckpts/default/"):
        client.clean_checkpoints(identity)
