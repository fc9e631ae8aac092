"""Which of this machine's GPUs each node of a local job gets.

On a cluster each node is a pod on a machine of its own, given the GPUs it asks for
(``nvidia.com/gpu``) and no others. Locally every node runs on this one machine, so the
GPUs are shared out here, as the device plugin would:

* a job that asks for ``G`` GPUs per node gets ``G`` distinct GPUs per node, none held
  by another running job's node (admission refused or warned about a job asking for
  more than are free, :func:`kf_trainer_core.backends.local.machine.admit_resources`);
  where too few are free (``on_missing_resources="warn"``) nodes share, and a line of
  each node's log says so;
* a job that asks for none (the process backend) gets the GPUs no other job holds,
  split evenly between its nodes (nodes share one when there are fewer than nodes),
  and holds none of them; in containers it gets none, as on a cluster;
* ``numProcPerNode: auto`` (or ``gpu``) is the number of GPUs the node got.

A node's GPUs reach its processes as ``CUDA_VISIBLE_DEVICES`` and its container as the
engine's device request; the pod carries them in :data:`GPUS_ANNOTATION`, which ``jobs
get`` shows and the next job's sharing-out reads. The assignment happens while the pods
are stored, in one write transaction of the state database, so that two jobs starting
at once never take the same GPUs.

Standard library only, like the supervisor that imports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kf_trainer_core.backends.local import machine
from kf_trainer_core.backends.local._common import JOBSET_NAME_LABEL
from kf_trainer_core.base.marks import GPUS_ANNOTATION
from kf_trainer_core.k8s.trainjob import is_finished

JSON = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
VISIBLE = "CUDA_VISIBLE_DEVICES"
_UNFINISHED = frozenset({"Pending", "Running", "", None})


def requested(resources: Mapping[str, Any] | None) -> int | None:
    """The GPUs a container asks for (limits, else requests), ``None`` for none."""
    if not resources:
        return None
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(GPU_RESOURCE)
        if value is not None:
            try:
                count = int(machine.quantity(value))
            except ValueError:
                return None
            return count if count > 0 else None
    return None


def pod_gpus(pod: Mapping[str, Any]) -> list[str]:
    """The GPUs a pod was given (its :data:`GPUS_ANNOTATION`)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPUS_ANNOTATION)
    if not raw:
        return []
    return [g for g in str(raw).split(",") if g]


def _container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0] or {}


def held(pods: Iterable[Mapping[str, Any]], namespace: str, job: str) -> set[str]:
    """The GPUs other jobs' unfinished pods hold: those they asked for and were given
    (a job that asked for none holds nothing)."""
    out: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        mine = (
            meta.get("namespace") == namespace
            and (meta.get("labels") or {}).get(JOBSET_NAME_LABEL) == job
        )
        if mine or (pod.get("status") or {}).get("phase") not in _UNFINISHED:
            continue
        if requested(_container(pod).get("resources")) is not None:
            out.update(pod_gpus(pod))
    return out


def pods_with_gpus(conn: Any) -> list[JSON]:
    """The stored pods that were given GPUs (found in SQL by the annotation's name:
    the pods of jobs without GPUs are not parsed)."""
    rows = conn.execute(
        "SELECT data FROM objects WHERE resource = 'pods' AND instr(data, ?) > 0",
        (json.dumps(GPUS_ANNOTATION),),
    )
    return [json.loads(data) for (data,) in rows]


def held_count(conn: Any) -> int:
    """How many of this machine's GPUs the jobs of the state database at ``conn`` hold:
    those their unfinished pods were given, and the ask of every admitted job that is
    neither finished, suspended nor being deleted and whose nodes hold none yet (it is
    in its initializers, or its supervisor is starting). A job holds its GPUs from its
    admission on, as a pod bound by a scheduler does: two jobs admitted back to back
    are not both given the same free GPUs."""
    devices = set(machine.gpu_devices())
    pods = pods_with_gpus(conn)
    holding = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in _UNFINISHED:
            holding.add((meta.get("namespace"), (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)))
    reserved = 0
    rows = conn.execute(
        "SELECT r.uid, r.plan, o.data FROM runs r JOIN objects o ON o.resource = 'trainjobs' "
        "AND o.namespace = r.namespace AND o.name = r.name "
        """WHERE instr(r.plan, '"admitted"') > 0 AND instr(r.plan, '"gpus":0}') = 0"""
    )
    for uid, plan, data in rows:
        job = json.loads(data)
        meta = job.get("metadata") or {}
        if (
            meta.get("uid") != uid
            or (meta.get("namespace"), meta.get("name")) in holding
            or meta.get("deletionTimestamp")
            or (job.get("spec") or {}).get("suspend")
            or is_finished(job)
        ):
            continue
        asked = (json.loads(plan).get("admitted") or {}).get("gpus")
        reserved += asked if isinstance(asked, int) and asked > 0 else 0
    return min(len(devices), len(held(pods, "", "") & devices) + reserved)


def assign(
    devices: Sequence[str],
    taken: set[str],
    nodes: int,
    per_node: int | None,
    *,
    unrequested: bool = True,
) -> tuple[list[list[str]], str | None]:
    """Each node's GPUs, and a warning when nodes share one. ``per_node``: what each
    asks for (``None``: nothing); ``unrequested``: such a job still gets the free GPUs
    split between its nodes (processes), else none (containers)."""
    if nodes <= 0 or not devices:
        return [[] for _ in range(max(nodes, 0))], None
    free = [d for d in devices if d not in taken]
    if per_node is None:
        if not unrequested:
            return [[] for _ in range(nodes)], None
        pool = free or list(devices)
        share = len(pool) // nodes
        if share:
            return [pool[i * share : (i + 1) * share] for i in range(nodes)], None
        return [[pool[i % len(pool)]] for i in range(nodes)], _sharing(nodes, pool, None)
    wanted = nodes * per_node
    if len(free) >= wanted:
        return [free[i * per_node : (i + 1) * per_node] for i in range(nodes)], None
    # Admitted anyway (on_missing_resources="warn"): the free GPUs first, then the
    # others in turn; each node still gets distinct GPUs where it asks for few enough.
    order = free + [d for d in devices if d not in free]
    per = min(per_node, len(order))
    out = [[order[(i * per + k) % len(order)] for k in range(per)] for i in range(nodes)]
    return out, _sharing(nodes, order, per_node)


def _sharing(nodes: int, pool: Sequence[str], per_node: int | None) -> str:
    asked = f"{per_node} GPU(s) per node x " if per_node else ""
    return (
        f"the job's {asked}{nodes} node(s) share this machine's "
        f"{len(pool)} GPU(s) ({','.join(pool)}): nodes run on the same GPUs"
    )


def node_env(gpus: Sequence[str]) -> dict[str, str]:
    """What a node's processes see of its GPUs."""
    return {VISIBLE: ",".join(gpus)}


def annotate(pod_obj: JSON, gpus: Sequence[str]) -> None:
    """Record a node's GPUs on its pod (see :data:`GPUS_ANNOTATION`)."""
    meta = pod_obj.setdefault("metadata", {})
    meta.setdefault("annotations", {})[GPUS_ANNOTATION] = ",".join(gpus)
