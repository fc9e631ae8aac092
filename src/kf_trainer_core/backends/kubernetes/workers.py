"""Reaching MultiKueue worker clusters (see :mod:`kf_trainer_core.cluster.multikueue`).

A client on a MultiKueue manager reads a dispatched job's TrainJob and Workload on the
manager and its pods, their logs, events and JobSet on the worker that runs it.
:class:`Workers` finds how to reach a worker — its entry of the backend's
``multikueue_workers`` (a kubeconfig context or file), else the kubeconfig Secret its
``MultiKueueCluster`` names on the manager — makes one connection to it per client,
proves it with one read of the namespace's pods, and keeps it until the client closes.
A worker it cannot reach is a :class:`WorkerUnreachable` whose message names the fix;
it is logged once per client and asked again after :data:`RETRY_SECONDS`.

:class:`RoutedTransport` is one job's view across both clusters: an
:class:`~kf_trainer_core.k8s.api.Api` over it serves every operation of
:mod:`kf_trainer_core.programs` unchanged.

The worker's kubeconfig (the Secret's document) lives only in the worker's
``KubernetesConfig.kubeconfig_content`` (a ``SecretStr``): it never reaches an error,
a log line or a repr.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kf_trainer_core.backends.kubernetes.transport import AsyncTransport
from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.multikueue import (
    MULTIKUEUE_CLUSTERS,
    kubeconfig_of,
    mapping_fix,
    rbac_fix,
    secret_location,
)
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.api import Api, TransportProtocol
from kf_trainer_core.k8s.calls import (
    Call,
    Get,
    ListObjects,
    OpenLogStream,
    OpenWatch,
    ReadLog,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import EVENTS, JOBSET_NAME_LABEL, JOBSETS, PODS, SECRETS

__all__ = ["RETRY_SECONDS", "RoutedTransport", "WorkerUnreachable", "Workers"]

log = logging.getLogger(__name__)

#: A worker found unreachable is tried again after this long (a mapping or a grant
#: added meanwhile, a worker back up), not at every read.
RETRY_SECONDS = 30.0

#: What a job runs as on the worker: read there. Everything else (the TrainJob and its
#: status, Kueue's objects, runtimes, namespaces) is the manager's.
_WORKER_PLURALS = frozenset(
    {(r.group, r.plural) for r in (PODS, EVENTS, JOBSETS)} | {("batch", "jobs")}
)


class WorkerUnreachable(Exception):
    """A worker the suite cannot reach; the message says why and how to fix it, and
    holds nothing of its credentials."""


class _Routed:
    """A stream opened on one of the two transports, read on the same one."""

    def __init__(self, transport: TransportProtocol, handle: Any) -> None:
        self.transport = transport
        self.handle = handle

    def close(self) -> None:
        self.handle.close()


class RoutedTransport:
    """One MultiKueue job seen across its two clusters: calls about what it runs as
    (pods and their logs, events, JobSets, Jobs) go to the ``worker``, the rest to the
    ``manager``. It owns neither connection: closing it closes nothing."""

    def __init__(self, manager: TransportProtocol, worker: TransportProtocol) -> None:
        self.manager = manager
        self.worker = worker

    def _pick(self, call: Call) -> TransportProtocol:
        if isinstance(call, (ReadLog, OpenLogStream)):
            return self.worker
        res = getattr(call, "resource", None)
        if res is not None and (res.group, res.plural) in _WORKER_PLURALS:
            return self.worker
        return self.manager

    async def connect(self) -> None:
        # After a 401 (Api renews once): either side's credentials may have expired.
        await self.manager.connect()
        await self.worker.connect()

    async def perform(self, call: Call) -> Any:
        return await self._pick(call).perform(call)

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> _Routed:
        transport = self._pick(call)
        return _Routed(transport, await transport.open_stream(call))

    async def read_line(self, stream: _Routed) -> bytes | None:
        return await stream.transport.read_line(stream.handle)

    async def close(self) -> None:
        """Nothing: the client and its :class:`Workers` own the connections."""


class Workers:
    """The worker clusters one client reaches, one connection each (see the module)."""

    def __init__(self, config: KubernetesConfig, namespace: str) -> None:
        self.config = config
        self.namespace = namespace
        self._transports: dict[str, AsyncTransport] = {}
        #: The configuration of each worker reached (what a wait's informers connect with).
        self.configs: dict[str, KubernetesConfig] = {}
        self._failed: dict[str, tuple[float, str]] = {}
        self._told: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def transport(self, manager: Api, cluster: str) -> AsyncTransport:
        """The connection to worker ``cluster`` (made on first use, then reused);
        :class:`WorkerUnreachable` with the fix when it cannot be made."""
        found = self._transports.get(cluster)
        if found is not None:
            return found
        lock = self._locks.setdefault(cluster, asyncio.Lock())
        async with lock:  # concurrent reads of one job make one connection
            found = self._transports.get(cluster)
            if found is not None:
                return found
            failed = self._failed.get(cluster)
            if failed is not None and time.monotonic() - failed[0] < RETRY_SECONDS:
                raise WorkerUnreachable(failed[1])
            try:
                made = await self._connect(manager, cluster)
            except WorkerUnreachable as exc:
                self._failed[cluster] = (time.monotonic(), str(exc))
                if cluster not in self._told:
                    self._told.add(cluster)
                    log.warning("MultiKueue worker %s: %s", cluster, exc)
                raise
            self._failed.pop(cluster, None)
            self._transports[cluster] = made
            return made

    async def _connect(self, manager: Api, cluster: str) -> AsyncTransport:
        cfg = await self._config(manager, cluster)
        mapped = cluster in self.config.multikueue_workers
        where = (
            "its entry in multikueue_workers"
            if mapped
            else "the kubeconfig of its MultiKueueCluster's Secret"
        )
        try:
            transport = await AsyncTransport.create(cfg)
        except SpecError as err:
            # The loader's errors name no secret (config.loading_errors scrubs them).
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: {where} cannot be used "
                f"({err.problems[0].problem if err.problems else err}). Fix: "
                + ("correct that entry." if mapped else mapping_fix(cluster) + ".")
            ) from None
        try:
            # One read of what the suite reads there: proves address, credentials and RBAC.
            await Api(transport)(
                ListObjects(PODS, self.namespace, label_selector=JOBSET_NAME_LABEL, limit=1)
            )
        except ApiError as err:
            await transport.close()
            raise WorkerUnreachable(self._refused(cluster, err, where, mapped)) from None
        self.configs[cluster] = cfg
        return transport

    def _refused(self, cluster: str, err: ApiError, where: str, mapped: bool) -> str:
        ns = self.namespace
        head = f"cannot read pods of namespace {ns!r} on worker cluster {shown(cluster)}"
        if err.forbidden:
            return (
                f"{head}: the credentials of {where} may not list them (403). Fix: grant "
                f"them get/list/watch on pods, pods/log, events and jobsets.jobset.x-k8s.io "
                f"and get/list/watch on trainjobs.trainer.kubeflow.org in namespace {ns!r} "
                "on the worker (`kf-trainer rbac` prints such a Role)."
            )
        if err.unauthorized:
            return f"{head}: the worker refused the credentials of {where} (401). Fix: " + (
                "give that entry valid credentials." if mapped else mapping_fix(cluster) + "."
            )
        # The error's own fix speaks of the client's cluster: this one is the worker.
        said = str(err.status.get("message") or err).split(" Fix:")[0].rstrip(". ")
        return (
            f"{head}: {said}. Fix: check that this machine reaches the worker's API "
            f"server, or {mapping_fix(cluster)} that does."
        )

    async def _config(self, manager: Api, cluster: str) -> KubernetesConfig:
        """The worker's configuration: its mapping, else its MultiKueueCluster's Secret."""
        if cluster in self.config.multikueue_workers:
            try:
                return self.config.worker_config(cluster)
            except SpecError as err:
                raise WorkerUnreachable(
                    f"cannot reach worker cluster {shown(cluster)}: its entry in "
                    f"multikueue_workers is wrong ({err}). Fix: correct that entry."
                ) from None
        kueue_ns = self.config.kueue_namespace
        try:
            mkc = await manager(Get(MULTIKUEUE_CLUSTERS, None, cluster))
        except ApiError as err:
            if err.not_found:
                raise WorkerUnreachable(
                    f"cannot reach worker cluster {shown(cluster)}: the manager has no "
                    f"MultiKueueCluster of that name. Fix: {mapping_fix(cluster)}."
                ) from None
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: its MultiKueueCluster cannot be "
                f"read ({_short(err)}). Fix: {rbac_fix(kueue_ns, cluster, None)}."
            ) from None
        location = secret_location(mkc)
        if location is None or location[0] != "Secret":
            kind = location[0] if location else "no location"
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: its MultiKueueCluster keeps its "
                f"kubeconfig in a {kind} of Kueue's own pod, not in a Secret this client "
                f"may read. Fix: {mapping_fix(cluster)}."
            )
        name = location[1]
        try:
            secret = await manager(Get(SECRETS, kueue_ns, name))
        except ApiError as err:
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: the kubeconfig Secret "
                f"{kueue_ns}/{name} of its MultiKueueCluster cannot be read "
                f"({_short(err)}). Fix: {rbac_fix(kueue_ns, cluster, name)}."
            ) from None
        content = kubeconfig_of(secret)
        del secret  # the document is kept only inside the worker's SecretStr
        if content is None:
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: Secret {kueue_ns}/{name} holds "
                f"no `kubeconfig` key. Fix: {mapping_fix(cluster)}."
            )
        try:
            return self.config.worker_config(cluster, content)
        except SpecError as err:
            # The model's message never quotes the document (config._kubeconfig_mapping).
            why = err.problems[0].problem if err.problems else "invalid"
            raise WorkerUnreachable(
                f"cannot reach worker cluster {shown(cluster)}: Secret {kueue_ns}/{name} does not "
                f"hold a usable kubeconfig ({why}). Fix: {mapping_fix(cluster)}."
            ) from None

    async def close(self) -> None:
        """Close every worker connection (with the client)."""
        transports, self._transports = self._transports, {}
        for transport in transports.values():
            await transport.close()


def _short(err: ApiError) -> str:
    code = err.status.get("code")
    reason = err.status.get("reason") or ""
    return f"{code} {reason}".strip() or type(err).__name__
