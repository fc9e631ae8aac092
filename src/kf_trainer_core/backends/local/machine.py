"""What this machine has, against what a job asks for (``resourcesPerNode``).

Locally every node runs on the same machine, so a job of N nodes asks N times its
per-node resources of it. The NVIDIA GPUs are found without importing a framework
(:func:`gpu_devices`): ``CUDA_VISIBLE_DEVICES`` when set (the GPUs the submitter may
use), else the NVIDIA driver's ``/proc`` entries, else ``nvidia-smi -L`` — so a test
fakes a machine's GPUs with either the variable or an ``nvidia-smi`` on ``PATH``. Which
GPUs each node gets is :mod:`~kf_trainer_core.backends.local.gpus`' business.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from kf_trainer_core.base.errors import RESOURCES_BUSY_REASON
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.quantity import parse_quantity


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``4``, ``500m``, ``16Gi``, ``1e3``) as a number;
    ``ValueError`` for anything else, a quantity past a float's range included (its
    callers count GPUs with ``int()``, which raises OverflowError on an infinity)."""
    number = float(parse_quantity(value))
    if not math.isfinite(number):
        raise ValueError(f"{shown(value)} is out of range")
    return number


@functools.lru_cache(maxsize=1)
def gpu_devices() -> tuple[str, ...]:
    """The NVIDIA GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` and a container
    engine's device requests name them: the variable's own entries when it is set
    (indexes or UUIDs; CUDA stops at the first ``-1``), else indexes ``0..N-1``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids: list[str] = []
        for entry in visible.split(","):
            entry = entry.strip()
            if entry == "-1":
                break
            if entry and entry not in ids:
                ids.append(entry)
        return tuple(ids)
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        count = _smi_count()
    return tuple(str(i) for i in range(count))


def _smi_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def gpu_count() -> int:
    """NVIDIA GPUs this process may use."""
    return len(gpu_devices())


def memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def available() -> dict[str, float]:
    """What this machine offers, keyed like resource requests."""
    return {
        "cpu": float(os.cpu_count() or 1),
        "memory": float(memory_bytes()),
        "nvidia.com/gpu": float(gpu_count()),
    }


_IGNORED = frozenset({"ephemeral-storage", "storage", "pods"})


def wanted(resources: Mapping[str, Any]) -> dict[str, Any]:
    """What a container's ``resources`` ask for: its limits, else its requests."""
    out: dict[str, Any] = dict(resources.get("requests") or {})
    out.update(resources.get("limits") or {})
    return out


def missing_resources(
    resources: Mapping[str, Any] | None, nodes: int, held_gpus: int = 0
) -> list[str]:
    """What a job asks for (``resourcesPerNode``) that this machine lacks — its GPUs
    counted without the ``held_gpus`` other running jobs were given — each as a
    sentence for an event, a log line or an error."""
    if not resources:
        return []
    have = available()
    total_gpus = have["nvidia.com/gpu"]
    have["nvidia.com/gpu"] = max(0.0, total_gpus - held_gpus)
    problems = []
    for key, value in sorted(wanted(resources).items()):
        if key in _IGNORED:
            continue
        try:
            per_node = quantity(value)
        except ValueError:
            continue
        total = per_node * nodes
        offered = have.get(key, 0.0)
        if total <= offered:
            continue
        asked = f"{value} per node x {nodes} node(s)"
        if key == "memory":
            has = f"{offered / 2**30:.1f}Gi"
        elif key == "nvidia.com/gpu" and held_gpus:
            has = f"{total_gpus:g}, {offered:g} of them free (other jobs hold {held_gpus})"
        else:
            has = f"{offered:g}"
        problems.append(f"the job asks for {key} {asked}; this machine has {has}")
    return problems


def admit_resources(
    resources: Any, nodes: int, on_missing_resources: str, config: str, held_gpus: int = 0
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """Admission of what ``nodes`` times ``resources`` ask of this machine (less the
    ``held_gpus`` of other running jobs): the 422 causes (one when it lacks some and
    ``on_missing_resources`` is ``"fail"``) and the Warning ``(reason, message)`` of
    :func:`resource_warnings`; ``config`` (``LocalConfig``, ``ContainerConfig``) names
    where the fix goes."""
    missing = missing_resources(resources, nodes, held_gpus)
    causes = []
    if missing and on_missing_resources == "fail":
        # Lacking only what other jobs hold now, the job may fit later: capacity.
        busy = held_gpus > 0 and not missing_resources(resources, nodes)
        causes.append(
            (
                "spec.trainer.resourcesPerNode",
                RESOURCES_BUSY_REASON if busy else "FieldValueForbidden",
                "Forbidden: "
                + "; ".join(missing)
                + ". Fix: ask for less, run on a cluster, or use "
                f"{config}(on_missing_resources='warn') to run it anyway.",
            )
        )
    return causes, resource_warnings(missing, config)


def resource_warnings(missing: list[str], config: str) -> list[tuple[str, str]]:
    """One Warning ``(reason, message)`` for everything this machine lacks: a single
    line saying what happens (the job runs anyway, on what the machine has) and how to
    refuse such jobs instead. It is the first line of every node's log, so it is what a
    user reading ``jobs logs`` or a task log meets first."""
    if not missing:
        return []
    backend = "container" if config == "ContainerConfig" else "local"
    return [
        (
            "InsufficientResources",
            "; ".join(missing)
            + f". The {backend} backend runs the job anyway, on what this machine has; "
            'to refuse such jobs instead, set "on_missing_resources": '
            f'"fail" in the backend configuration ({config}(on_missing_resources="fail") '
            "in Python).",
        )
    ]
