"""Which node of a failed distributed job failed first.

When one node of a job fails, its peers fail after it: their workers lose a connection
(gloo's ``Connection closed by peer``, NCCL's ``remote process exited``), time out in a
collective, or are stopped by torchrun. Every failed node's pod shows a failure; only
one of them is the cause. Each failed node's output — its log tail when it was read,
else its termination message (on a cluster, the kubelet's fallback to the log's end,
which holds torchrun's summary) — is read by :mod:`kf_trainer_core.cluster.distributed`,
and the node whose failure is its own, earliest, is the root cause.

The cause need not have ended first: its worker raised, but its torchrun agent notices
only at its next check, while a peer that lost the connection may end at once. The
first failed pod fails the job, and its other pods are deleted (the nodes' Job by its
controller, other Jobs by the JobSet's), so the node that holds the cause can still be
running — being stopped — when the job is read: a running node's log is evidence too
(:func:`suspect_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kf_trainer_core.cluster import distributed
from kf_trainer_core.cluster.status import newest_by_step, step_order, terminated
from kf_trainer_core.fields import names

#: Failed nodes whose logs a failure's explanation reads, at most (one request each).
LOG_READS = 4


def _nodes(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """Each training node's newest pod, in node order: ``(step, pod)``."""
    nodes = [(s, p) for s, p in newest_by_step(pods).items() if s.startswith(f"{names.NODE}-")]
    return sorted(nodes, key=lambda item: step_order(item[0]))


def _failed(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase == "Failed" or terminated(pod).get("exitCode") not in (None, 0)


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not terminated(pod)


def failed_nodes(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """The training nodes whose newest pod failed, in node order: ``(step, pod)``."""
    return [(step, pod) for step, pod in _nodes(pods) if _failed(pod)]


def suspect_nodes(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """The training nodes whose output may hold the root cause: the failed ones (see
    :func:`failed_nodes`), then those whose newest pod still runs (see the module), each
    group in node order: ``(step, pod)``."""
    nodes = _nodes(pods)
    return [n for n in nodes if _failed(n[1])] + [n for n in nodes if _running(n[1])]


def root_cause_node(
    pods: Iterable[Mapping[str, Any]], logs: Mapping[str, Iterable[str]] | None = None
) -> str | None:
    """The training node whose failure came first (see the module), read from its log
    tail in ``logs`` (by step) or else its termination message; ``None`` when no node's
    output shows a failure."""
    logs = logs or {}
    texts = {
        step: logs.get(step) or str(terminated(pod).get("message") or "").splitlines()
        for step, pod in suspect_nodes(pods)
    }
    found = distributed.first_failure(texts)
    return found[0] if found is not None else None


def needs_more_logs(lines: Iterable[str], step: str) -> bool:
    """Whether one node's log leaves the root cause open: it shows no failure, or one
    that may be another node's seen from here."""
    cause = distributed.diagnose(lines, node=step)
    return cause is None or cause.consequence
