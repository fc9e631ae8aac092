"""A Kubernetes-API test server: real HTTP, apiserver semantics, no cluster.

:class:`KubeTestServer` serves :class:`~kf_trainer_core.testing.store.Store` over
aiohttp on loopback, in a background thread with its own event loop, so the real
``kubernetes`` and ``kubernetes_asyncio`` clients can be pointed at it with a
kubeconfig. It implements what the suite's client relies on: discovery, CRUD with
optimistic concurrency and the status subresource, merge/JSON/strategic patches,
label and field selectors, pagination, watches (resume, bookmarks, timeouts, 410),
pod logs (follow, tail, since), CRD defaulting/pruning/validation of TrainJobs with the
upstream CRDs, Status error bodies as the apiserver shapes them, request accounting
(:class:`RequestLog`) and fault injection (:mod:`kf_trainer_core.testing.faults`).

Layout: :mod:`.lifecycle` (the server: start/stop/restart, state), :mod:`.dispatch`
(one request from arrival to answer), :mod:`.request` (query parameters, bodies,
content types), :mod:`.routing` (paths and discovery), :mod:`.handlers` (CRUD, status
subresource, patches, admission), :mod:`.watch` (streams, bookmarks, 410,
``sendInitialEvents``), :mod:`.logs` (pod logs) and :mod:`.accounting` (the request
log).

Example::

    with KubeTestServer() as server:
        kubernetes.config.load_kube_config(config_file=str(server.kubeconfig()))
        ...
"""

from __future__ import annotations

from kf_trainer_core.testing.server.accounting import RequestLog, RequestRecord
from kf_trainer_core.testing.server.lifecycle import KubeTestServer
from kf_trainer_core.testing.server.routing import EVENTS_V1, core_event_to_v1

__all__ = ["EVENTS_V1", "KubeTestServer", "RequestLog", "RequestRecord", "core_event_to_v1"]
