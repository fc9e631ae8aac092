"""Pod vocabulary of the simulated kubelet: container statuses with image digests and
container ids, image names, and the log lines a scripted container prints
(pure functions; the shared shapes are in :mod:`kf_trainer_core.k8s.objects`)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from kf_trainer_core.k8s.objects import container_status
from kf_trainer_core.spec.function import RESULT_MARKER
from kf_trainer_core.testing.controller.state import PodSim
from kf_trainer_core.testing.controller.vocab import JSON, TORCH_MASTER_PORT


def truncate_bytes(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never inside a character)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


def full_image(image: str) -> str:
    """The fully qualified reference the container runtime pulls."""
    name = image
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in name:
        name += ":latest"
    return name


def container_status_of(c: JSON, **state: Any) -> JSON:
    """Container ``c``'s ``containerStatuses`` entry in ``state`` (``waiting=``,
    ``running_since=`` or ``terminated=``, as :func:`container_status` takes them); once
    it ran it has the pulled image's digest and a containerd id."""
    image = str(c.get("image") or "")
    name = str(c.get("name"))
    ran: dict[str, Any] = {"image_id": "", "container_id": ""}
    if state.get("running_since") is not None or state.get("terminated") is not None:
        digest = hashlib.sha256(image.encode()).hexdigest()
        seed = f"{name}{state.get('running_since')}{random.random()}"
        ran = {
            "image_id": f"{full_image(image).rsplit(':', 1)[0]}@sha256:{digest}",
            "container_id": "containerd://" + hashlib.sha256(seed.encode()).hexdigest(),
        }
    return container_status(name, image, **ran, **state)


# ------------------------------------------------------------------ scripted log lines


def placeholders(pod: PodSim) -> dict[str, str]:
    """The values a scenario's log lines may name: ``{rank}``, ``{pod}``, ``{job}`` ..."""
    sim = pod.job.sim
    return {
        "rank": str(pod.index),
        "pod": pod.name,
        "job": sim.name,
        "namespace": sim.namespace,
        "step": pod.job.rjob.ancestor or pod.job.rjob.name,
        "nnodes": str(sim.nnodes),
    }


def fmt(line: str, values: dict[str, str]) -> str:
    """``line`` with the known ``{placeholders}`` filled in; others stay as written."""

    class _Keep(dict[str, str]):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    try:
        return line.format_map(_Keep(values))
    except (ValueError, IndexError, AttributeError):
        return line


def default_logs(pod: PodSim, outcome: str) -> list[str]:
    """What a scripted container prints when its scenario step names no log lines."""
    sim, rjob = pod.job.sim, pod.job.rjob
    env = {
        e.get("name"): e.get("value")
        for c in pod.containers
        if c.get("name") == pod.main
        for e in c.get("env") or []
        if isinstance(e, dict)
    }
    if outcome == "serve":
        return ["Server listening on 0.0.0.0 port 2222.", "Server listening on :: port 2222."]
    if rjob.kind == "initializer":
        what = "dataset" if rjob.ancestor == "dataset-initializer" else "model"
        uri = env.get("STORAGE_URI") or "hf://unknown"
        lines = [f"Starting {what} initialization", f"Downloading {what} from {uri}"]
        if outcome in ("fail", "oom"):
            return [*lines, f"ERROR: failed to download {what} from {uri}"]
        return [*lines, f"{what.capitalize()} has been downloaded to /workspace/{what}"]
    if rjob.kind != "trainer":
        return [f"{rjob.name}: started", f"{rjob.name}: done"]
    rank = pod.index
    if sim.is_mpi:
        head = f"[launcher] mpirun: {sim.nnodes} host(s), {sim.nproc} slot(s) per host"
    else:
        head = (
            f"[node-{rank}] torchrun: nnodes={sim.nnodes} nproc_per_node={sim.nproc} "
            f"node_rank={rank} master={sim.name}-node-0-0.{sim.name}:{TORCH_MASTER_PORT}"
        )
    epochs = [
        "Epoch 1/3: loss=0.6931 accuracy=0.5120",
        "Epoch 2/3: loss=0.3412 accuracy=0.8410",
        "Epoch 3/3: loss=0.1289 accuracy=0.9530",
    ]
    if outcome == "fail":
        return [
            head,
            epochs[0],
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 42, in <module>',
            "    train()",
            "RuntimeError: simulated training failure",
        ]
    if outcome == "oom":
        return [head, epochs[0], "Loading the next batch (batch_size=4096) ..."]
    if outcome == "hang":
        return [head, epochs[0]]
    if outcome == "never-finish":
        return [head, *(f"Epoch {i}: loss={0.7 / i:.4f}" for i in range(1, 4))]
    if not pod.is_rank0:
        return [
            head,
            f"[node-{rank}] joined the rendezvous",
            f"[node-{rank}] training finished",
        ]
    lines = [head, *epochs, "Training finished."]
    if outcome == "succeed" and sim.scenario.termination_message is not None:
        lines.append(RESULT_MARKER + sim.scenario.termination_message)
    return lines
