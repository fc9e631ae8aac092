"""In-process object store behind the Kubernetes-API test server.

The store plays the part of etcd plus the generic apiserver registry: one global,
monotonically increasing ``resourceVersion``, optimistic concurrency, the ``status``
subresource split, ``metadata.generation``, owner-reference cascades, finalizers and a
bounded event history that watches replay from (and that :meth:`Store.compact` forgets,
so older versions answer ``410 Gone``). It has no HTTP in it: the simulated Trainer
controller uses it directly and :mod:`kf_trainer_core.testing.server` serves it.

Layout: :mod:`.base` (state, commits, subscribers), :mod:`.reads` (gets, lists, pages,
watch snapshots), :mod:`.core` (writes and deletion) and :mod:`.logs` (container logs).
The registry's vocabulary and its rules for writes, pages and watches are
:mod:`kf_trainer_core.emulation`'s, shared with the local backend (whose store keeps
the same objects in SQLite). The contract is in
the docstrings of :class:`Store`'s methods; how tests use the store through the server
is in ``docs/testing.md``.
"""

from __future__ import annotations

from kf_trainer_core.emulation.paging import decode_continue, encode_continue
from kf_trainer_core.emulation.registry import (
    JOBS,
    RESOURCES,
    Admission,
    ChangeCallback,
    StoreError,
    WatchEvent,
    format_timestamp,
    has_status_subresource,
    resource_for,
    sort_key,
)

# The server speaks about the same resources as the client: one definition for both.
from kf_trainer_core.k8s.patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    json_copy,
)
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Resource,
)
from kf_trainer_core.k8s.selectors import FieldSelector, LabelSelector
from kf_trainer_core.testing.store.core import Store
from kf_trainer_core.testing.store.logs import PodLogs

__all__ = [
    "CLUSTER_TRAINING_RUNTIMES",
    "CONFIGMAPS",
    "EVENTS",
    "JOBS",
    "JOBSETS",
    "NAMESPACES",
    "PODS",
    "RESOURCES",
    "SECRETS",
    "SERVICEACCOUNTS",
    "TRAINING_RUNTIMES",
    "TRAINJOBS",
    "Admission",
    "ChangeCallback",
    "FieldSelector",
    "LabelSelector",
    "PodLogs",
    "Resource",
    "Store",
    "StoreError",
    "WatchEvent",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "decode_continue",
    "encode_continue",
    "format_timestamp",
    "has_status_subresource",
    "json_copy",
    "resource_for",
    "sort_key",
]
