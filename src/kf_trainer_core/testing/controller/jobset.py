"""Building a TrainJob's JobSet from its (Cluster)TrainingRuntime: pure functions, no I/O.

Trainer v2.3's runtime framework, as far as the suite needs it: runtime patches, the
trainer and initializer overrides, the torch and MPI ML policies (``PET_*`` environment,
hostfile, SSH volumes), the JobSet webhook's defaults and the owner reference.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.emulation.jobs import (
    COMPLETION_INDEX_PATH,
    apply_initializer,
    apply_trainer,
    upsert_env,
    upsert_named,
)
from kf_trainer_core.k8s.objects import owner_reference
from kf_trainer_core.k8s.trainjob import (
    ANCESTOR_LABEL,
    INITIALIZERS,
    JOB_DEFAULT_BACKOFF_LIMIT,
    JOBSET_API,
    TRAINER_API,
    trainer_container,
)
from kf_trainer_core.testing.controller.state import BuildError, Built, RJob, Sim
from kf_trainer_core.testing.controller.vocab import JSON, TORCH_MASTER_PORT
from kf_trainer_core.testing.store import (
    CONFIGMAPS,
    SECRETS,
    Resource,
    apply_strategic_merge_patch,
    json_copy,
)


@dataclass(frozen=True)
class _Policy:
    """What the TrainJob and the runtime's ML policy say about the trainer."""

    trainer: JSON
    has_trainer: bool
    initializer: JSON
    torch: Any  # the torch policy (None: not torch)
    mpi: Any  # the MPI policy (a dict: MPI)
    launcher_as_node: bool
    ml: JSON
    ml_nodes: int
    tj_nodes: Any
    nproc: str


def build_jobset(sim: Sim, kind: str, runtime: JSON, status_server: Any = None) -> Built:
    """The JobSet (and MPI's Secret and ConfigMap) for ``sim``'s TrainJob on ``runtime``;
    :class:`BuildError` when the runtime and the TrainJob do not fit together.
    ``status_server`` (optional) adds the TrainJob status endpoint to trainer pods."""
    spec = sim.spec
    rt_name = str((runtime.get("metadata") or {}).get("name"))
    rspec = runtime.get("spec") or {}
    template = json_copy(rspec.get("template") or {})
    js_meta = template.get("metadata") or {}
    js_spec: JSON = template.get("spec") or {}
    rjob_specs: list[JSON] = [r for r in js_spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    if not rjob_specs:
        raise BuildError(f'{kind} "{rt_name}" has no spec.template.spec.replicatedJobs')
    js_spec["replicatedJobs"] = rjob_specs
    labels: dict[str, str] = dict(js_meta.get("labels") or {})
    annotations: dict[str, str] = dict(js_meta.get("annotations") or {})

    for patch in spec.get("runtimePatches") or []:
        if isinstance(patch, dict):
            apply_runtime_patch(patch, rjob_specs, labels, annotations, kind, rt_name)

    policy = _policy(spec, rspec.get("mlPolicy") or {}, runtime)
    trainer_count = 1
    for rj in rjob_specs:
        count = _shape_replicated_job(rj, policy, sim, status_server)
        if count is not None:
            trainer_count = count
    if isinstance(policy.mpi, dict):
        trainer_count = sum(
            int(r["template"]["spec"]["parallelism"])
            for r in rjob_specs
            if r.get("name") == "node" or (r.get("name") == "launcher" and policy.launcher_as_node)
        )
    rjobs = _replicated_jobs(rjob_specs, sim, kind, rt_name)
    jobset = _jobset_object(sim, js_spec, labels, annotations)
    extra: list[tuple[Resource, JSON]] = []
    if isinstance(policy.mpi, dict):
        extra = mpi_objects(sim, rjob_specs, policy.launcher_as_node, policy.nproc)
    return Built(jobset, rjobs, extra, isinstance(policy.mpi, dict), trainer_count, policy.nproc)


def _policy(spec: JSON, ml: JSON, runtime: JSON) -> _Policy:
    trainer: JSON = spec.get("trainer") or {}
    torch = ml.get("torch") if "torch" in ml else None
    mpi = ml.get("mpi") if "mpi" in ml else None
    nproc = "auto"
    if torch is not None:
        nproc = str(trainer.get("numProcPerNode") or (torch or {}).get("numProcPerNode") or "auto")
        # The TrainJob's resources per node, else the runtime's trainer container's.
        resources = trainer.get("resourcesPerNode") or trainer_container(runtime).get("resources")
        nproc = torch_nproc(nproc, resources)
    elif isinstance(mpi, dict):
        nproc = str(trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)
    return _Policy(
        trainer=trainer,
        has_trainer=isinstance(spec.get("trainer"), dict),
        initializer=spec.get("initializer") or {},
        torch=torch,
        mpi=mpi,
        launcher_as_node=bool(isinstance(mpi, dict) and mpi.get("runLauncherAsNode")),
        ml=ml,
        ml_nodes=int(ml.get("numNodes") or 1),
        tj_nodes=trainer.get("numNodes"),
        nproc=nproc,
    )


def _shape_replicated_job(rj: JSON, p: _Policy, sim: Sim, status_server: Any) -> int | None:
    """Apply the policies to one replicated job in place; its pod count when it is the
    trainer's (None otherwise)."""
    name = str(rj.get("name"))
    jt: JSON = rj.setdefault("template", {})
    jmeta: JSON = jt.setdefault("metadata", {})
    jspec: JSON = jt.setdefault("spec", {})
    ptmpl: JSON = jspec.setdefault("template", {})
    pspec: JSON = ptmpl.setdefault("spec", {})
    containers: list[JSON] = pspec.setdefault("containers", [])
    ancestor = (jmeta.get("labels") or {}).get(ANCESTOR_LABEL)
    count = int(jspec.get("parallelism") or 1)
    rj.setdefault("replicas", 1)
    if ancestor == "trainer":
        rj["replicas"] = 1
        count = p.ml_nodes if p.ml else count
        if p.tj_nodes is not None and p.mpi is None:
            count = int(p.tj_nodes)
        if p.mpi is not None and name == "launcher":
            count = 1
    elif ancestor in INITIALIZERS:
        rj["replicas"] = 1
    if p.mpi is not None and name == "node" and p.tj_nodes is not None:
        count = max(int(p.tj_nodes) - 1, 1) if p.launcher_as_node else int(p.tj_nodes)
    jspec["parallelism"] = count
    jspec["completions"] = count
    jspec.setdefault("completionMode", "Indexed")

    if ancestor == "trainer":
        _apply_trainer_policy(containers, p, sim, count)
        if status_server is not None:
            status_server.enforce_pod_spec(pspec, containers, sim.namespace, sim.name)
    if ancestor in INITIALIZERS:
        _apply_initializer(containers, str(ancestor), p.initializer)
    if isinstance(p.mpi, dict) and name in ("node", "launcher"):
        _apply_mpi(sim.name, name, pspec, containers, p.mpi, p.nproc)
    return count if ancestor == "trainer" else None


def _apply_trainer_policy(containers: list[JSON], p: _Policy, sim: Sim, count: int) -> None:
    for c in containers:
        cname = c.get("name")
        if cname == "node" or (cname == "launcher" and p.launcher_as_node):
            apply_trainer(c, p.trainer)
    node = container(containers, "node")
    if node is None:
        return
    if p.torch is not None and p.has_trainer and p.trainer.get("command") != ["tune", "run"]:
        upsert_env(
            node,
            [
                {"name": "PET_NNODES", "value": str(count)},
                {"name": "PET_NPROC_PER_NODE", "value": p.nproc},
                {
                    "name": "PET_NODE_RANK",
                    "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}},
                },
                {"name": "PET_MASTER_ADDR", "value": f"{sim.name}-node-0-0.{sim.name}"},
                {"name": "PET_MASTER_PORT", "value": str(TORCH_MASTER_PORT)},
            ],
        )
    if p.torch is not None and p.has_trainer:
        upsert_named(
            node.setdefault("ports", []), "containerPort", [{"containerPort": TORCH_MASTER_PORT}]
        )


def _apply_initializer(containers: list[JSON], ancestor: str, initializer: JSON) -> None:
    cfg = initializer.get("dataset" if ancestor == "dataset-initializer" else "model")
    init_c = container(containers, ancestor)
    if isinstance(cfg, dict) and init_c is not None:
        apply_initializer(init_c, cfg)


def _replicated_jobs(rjob_specs: list[JSON], sim: Sim, kind: str, rt_name: str) -> list[RJob]:
    names = [str(r.get("name")) for r in rjob_specs]
    ready_deps = {
        str(d.get("name"))
        for r in rjob_specs
        for d in r.get("dependsOn") or []
        if isinstance(d, dict) and d.get("status") == "Ready"
    }
    rjobs: list[RJob] = []
    for rj in rjob_specs:
        name = str(rj.get("name"))
        jt = rj["template"]
        jspec = jt["spec"]
        ancestor = (jt["metadata"].get("labels") or {}).get(ANCESTOR_LABEL)
        if ancestor == "trainer":
            kind_ = "trainer"
        elif ancestor in INITIALIZERS:
            kind_ = "initializer"
        elif name in ready_deps:
            kind_ = "server"
        else:
            kind_ = "other"
        containers = jspec["template"]["spec"]["containers"]
        if not containers:
            raise BuildError(f'replicated job "{name}" of {kind} "{rt_name}" has no containers')
        limit = sim.scenario.backoff_limit
        if limit is None:
            limit = int(jspec.get("backoffLimit") or 0)
        implied = jspec.get("backoffLimit")
        if limit != (JOB_DEFAULT_BACKOFF_LIMIT if implied is None else int(implied)):
            # The test bed's Jobs give up sooner than a real cluster's default (or as the
            # scenario says): the JobSet says what its Jobs do, as a runtime that set
            # the limit would, so that readers of it agree with the Jobs.
            jspec["backoffLimit"] = limit
        rjobs.append(
            RJob(
                name=name,
                replicas=int(rj.get("replicas") or 1),
                parallelism=int(jspec["parallelism"]),
                completions=int(jspec["completions"]),
                ancestor=str(ancestor) if ancestor else None,
                kind=kind_,
                depends_on=[
                    (str(d.get("name")), str(d.get("status") or "Complete"))
                    for d in rj.get("dependsOn") or []
                    if isinstance(d, dict)
                ],
                template=jt,
                step=sim.scenario.step_for(name, str(ancestor) if ancestor else None, kind_),
                main=main_container(containers, name, ancestor),
                backoff_limit=limit,
                group=str(rj.get("groupName") or "default"),
            )
        )
    for rjob in rjobs:
        for dep, _status in rjob.depends_on:
            if dep not in names:
                raise BuildError(
                    f'replicated job "{rjob.name}" depends on unknown replicated job "{dep}"'
                )
    return rjobs


def _jobset_object(
    sim: Sim, js_spec: JSON, labels: dict[str, str], annotations: dict[str, str]
) -> JSON:
    # Defaults the JobSet webhook fills in.
    network: JSON = js_spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    js_spec.setdefault("successPolicy", {"operator": "All"})
    js_spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    js_spec["suspend"] = bool(sim.spec.get("suspend"))
    metadata: JSON = {
        "name": sim.name,
        "namespace": sim.namespace,
        "ownerReferences": [owner_reference(TRAINER_API, "TrainJob", sim.name, sim.uid)],
    }
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": metadata, "spec": js_spec}


def apply_runtime_patch(
    patch: JSON,
    rjob_specs: list[JSON],
    labels: dict[str, str],
    annotations: dict[str, str],
    kind: str,
    rt_name: str,
) -> None:
    """Merge one ``spec.runtimePatches`` entry into the runtime's replicated jobs;
    :class:`BuildError` naming what it targets that the runtime lacks."""
    manager = str(patch.get("manager") or "")
    tmpl = ((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}
    md = tmpl.get("metadata") or {}
    labels.update({str(k): str(v) for k, v in (md.get("labels") or {}).items()})
    annotations.update({str(k): str(v) for k, v in (md.get("annotations") or {}).items()})
    for rp in (tmpl.get("spec") or {}).get("replicatedJobs") or []:
        rname = str(rp.get("name"))
        target = next((r for r in rjob_specs if r.get("name") == rname), None)
        if target is None:
            have = ", ".join(str(r.get("name")) for r in rjob_specs)
            raise BuildError(
                f'runtime patch of manager "{manager}" targets replicated job "{rname}", '
                f'which {kind} "{rt_name}" does not have (it has: {have})'
            )
        jt = rp.get("template")
        if not isinstance(jt, dict):
            continue
        pod_patch = (((jt.get("spec") or {}).get("template") or {}).get("spec")) or {}
        pod_spec = (((target.get("template") or {}).get("spec") or {}).get("template") or {}).get(
            "spec"
        ) or {}
        for key, word in (("containers", "container"), ("initContainers", "init container")):
            have_names = [str(c.get("name")) for c in pod_spec.get(key) or []]
            for c in pod_patch.get(key) or []:
                if str(c.get("name")) not in have_names:
                    raise BuildError(
                        f'runtime patch of manager "{manager}" targets {word} '
                        f'"{c.get("name")}" in replicated job "{rname}", which has no such '
                        f"{word} (it has: {', '.join(have_names) or 'none'})"
                    )
        merged = apply_strategic_merge_patch(target.get("template") or {}, jt)
        target["template"] = merged if isinstance(merged, dict) else {}


def mpi_objects(
    sim: Sim, rjob_specs: list[JSON], launcher_as_node: bool, nproc: str
) -> list[tuple[Resource, JSON]]:
    """The MPI plugin's SSH-auth Secret and hostfile ConfigMap, owned by the TrainJob."""
    owner = [owner_reference(TRAINER_API, "TrainJob", sim.name, sim.uid)]
    lines: list[str] = []
    for rj in rjob_specs:
        rname = rj.get("name")
        if rname == "node" or (rname == "launcher" and launcher_as_node):
            count = int(rj["template"]["spec"]["parallelism"])
            lines += [f"{sim.name}-{rname}-0-{i}.{sim.name} slots={nproc}" for i in range(count)]
    key = base64.b64encode(os.urandom(48)).decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "metadata": {
            "name": f"{sim.name}-mpi-ssh-auth",
            "namespace": sim.namespace,
            "ownerReferences": owner,
        },
        # Not a usable key: nothing connects over SSH in the simulator.
        "data": {
            "ssh-privatekey": base64.b64encode(
                f"-----BEGIN EC PRIVATE KEY-----\n{key}\n-----END EC PRIVATE KEY-----\n".encode()
            ).decode(),
            "ssh-publickey": base64.b64encode(f"ecdsa-sha2-nistp521 {key}\n".encode()).decode(),
        },
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{sim.name}-mpi-hostfile",
            "namespace": sim.namespace,
            "ownerReferences": owner,
        },
        "data": {"hostfile": "".join(line + "\n" for line in lines)},
    }
    return [(SECRETS, secret), (CONFIGMAPS, config_map)]


# ------------------------------------------------------------------ container helpers


def container(containers: Iterable[JSON], name: str) -> JSON | None:
    """The container called ``name``, if any."""
    return next((c for c in containers if c.get("name") == name), None)


def names(containers: Iterable[JSON]) -> list[str]:
    """The containers' names."""
    return [str(c.get("name")) for c in containers]


def main_container(containers: list[JSON], rjob: str, ancestor: str | None) -> str:
    """The container whose outcome is the pod's (``node``, the step's, ``launcher``)."""
    have = names(containers)
    for candidate in ("node", ancestor, "launcher", rjob):
        if candidate and candidate in have:
            return candidate
    return have[0]


def _apply_mpi(
    job_name: str, rjob: str, pspec: JSON, containers: list[JSON], mpi: JSON, nproc: str
) -> None:
    volumes: list[JSON] = pspec.setdefault("volumes", [])
    ssh_items = [
        {"key": "ssh-privatekey", "path": "id_rsa"},
        {"key": "ssh-publickey", "path": "id_rsa.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"},
    ]
    ssh_secret = {
        "secretName": f"{job_name}-mpi-ssh-auth",
        "defaultMode": 0o640,
        "items": ssh_items,
    }
    upsert_named(volumes, "name", [{"name": "mpi-ssh-auth", "secret": ssh_secret}])
    if rjob == "launcher":
        hostfile = {
            "name": f"{job_name}-mpi-hostfile",
            "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
        }
        upsert_named(volumes, "name", [{"name": "mpi-hostfile", "configMap": hostfile}])
    for c in containers:
        if c.get("name") != "node":
            continue
        mounts: list[JSON] = c.setdefault("volumeMounts", [])
        ssh_path = str(mpi.get("sshAuthMountPath") or "/root/.ssh")
        upsert_named(mounts, "name", [{"name": "mpi-ssh-auth", "mountPath": ssh_path}])
        if rjob == "launcher":
            upsert_named(mounts, "name", [{"name": "mpi-hostfile", "mountPath": "/etc/mpi"}])
            upsert_env(
                c,
                [
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": nproc},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                ],
            )


def torch_nproc(value: str, resources: Any) -> str:
    """PET_NPROC_PER_NODE as the torch plugin derives it from the resources per node
    (the TrainJob's, else the runtime's): ``auto`` without a GPU resource means the CPU
    count, ``cpu`` means the CPU count — at least 1, also when no resources are set (as
    the real control plane shows) — a number stays (limits first, then requests, as
    upstream does)."""
    if value not in ("auto", "cpu"):
        return value
    if not isinstance(resources, dict):
        resources = {}
    requests = resources.get("requests")
    for res in (resources.get("limits"), requests):
        if not isinstance(res, dict):
            continue
        if ("cpu" in res) if value == "cpu" else not any("gpu" in str(k).lower() for k in res):
            return str(max(1, _cpu_value(res.get("cpu", 0))))
    # No CPU count to use: "auto" stays (GPUs decide) when requests are set; else 1.
    return "auto" if value == "auto" and isinstance(requests, dict) else "1"


def _cpu_value(quantity: Any) -> int:
    text = str(quantity)
    try:
        if text.endswith("m"):
            return -(-int(text[:-1]) // 1000)  # Quantity.Value() rounds up
        return int(float(text) + 0.999999)
    except ValueError:
        return 1
