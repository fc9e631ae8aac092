"""``TrainerClient``: :class:`~kf_trainer_core.client.aio.AsyncTrainerClient` behind the
process's portal (:mod:`kf_trainer_core.base.portal`). Each method is one line that runs
the async method there, so that sync callers — threads, forked workers, a notebook cell
inside a running event loop — share one connection and one watch per namespace.
"""

from __future__ import annotations

import os
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

from typing_extensions import Unpack

from kf_trainer_core.base.portal import Portal, portal
from kf_trainer_core.client.aio import AsyncTrainerClient, Callback, CancelAction, Status
from kf_trainer_core.client.base import (
    Backend,
    ClientBase,
    Identity,
    begin_call,
    end_call,
    interrupted,
)
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import Event, Failure, Progress, TrainJob
from kf_trainer_core.fields.retention import PruneOptions
from kf_trainer_core.k8s.api import CallHook
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy
from kf_trainer_core.manifest.builder import BuiltTrainJob
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.programs.prune import PruneReport
from kf_trainer_core.programs.submit import Submitted
from kf_trainer_core.programs.wait import (
    LOG_PROGRESS_INTERVAL,
)
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
)

__all__ = ["TrainerClient"]

R = TypeVar("R")


async def _collected(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


def _same(method: Callable[..., Any]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """The sync method's docstring is its async twin's."""

    def copy(face: Callable[..., R]) -> Callable[..., R]:
        face.__doc__ = method.__doc__
        return face

    return copy


class TrainerClient(ClientBase):
    """Runs TrainJobs on a cluster (``KubernetesConfig``, the default) or on this
    machine (``LocalConfig``), with the Kubeflow SDK's methods: an
    :class:`AsyncTrainerClient` run through the process's portal, each method one line."""

    def __init__(
        self,
        backend: Backend = None,
        *,
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_POLICY,
        request_hook: CallHook | None = None,
    ) -> None:
        super().__init__(backend, namespace=namespace, retry=retry, request_hook=request_hook)
        self._start()

    def _start(self) -> None:
        """The async client and the portal of this process. A client made before a fork
        (a DAG file's module, an executor's parent) starts again in the child on its
        first call: the parent's portal thread does not exist there, and its
        connection belongs to the parent's loop."""
        self._pid = os.getpid()
        self._async_client = AsyncTrainerClient(
            self.config, namespace=self.namespace, retry=self.retry, request_hook=self.request_hook
        )
        # The portal's loop is no one else's: pages as large as the configuration says.
        self._async_client._page_cap = None
        self._this_portal = portal()

    @property
    def _async(self) -> AsyncTrainerClient:
        if self._pid != os.getpid():
            self._start()
        return self._async_client

    @property
    def _portal(self) -> Portal:
        if self._pid != os.getpid():
            self._start()
        return self._this_portal

    def _call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run a coroutine of the async client that submits (``submit``, ``train``,
        ``run``) on the portal: a Ctrl-C after it submitted a job says that the job
        keeps running and how to stop or follow it. The other methods call the portal
        directly — nothing of theirs to say — one frame fewer between a caller and the
        request."""
        token = begin_call()
        try:
            return self._portal.call(coro)
        except KeyboardInterrupt as exc:
            stopped = interrupted(self.config, exc)
            if stopped is exc:
                raise
            raise stopped from None  # the job keeps running: said, not a traceback
        finally:
            end_call(token)

    @_same(AsyncTrainerClient.list_runtimes)
    def list_runtimes(self) -> list[RuntimeInfo]:
        return self._portal.call(self._async.list_runtimes())

    @_same(AsyncTrainerClient.get_runtime)
    def get_runtime(self, name: str, kind: str = "ClusterTrainingRuntime") -> RuntimeInfo:
        return self._portal.call(self._async.get_runtime(name, kind))

    @_same(AsyncTrainerClient.build)
    def build(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
    ) -> BuiltTrainJob:
        return self._portal.call(self._async.build(spec, name=name, identity=identity))

    @_same(AsyncTrainerClient.submit)
    def submit(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
        fresh_after_failure: bool = True,
    ) -> Submitted:
        return self._call(
            self._async.submit(
                spec, name=name, identity=identity, fresh_after_failure=fresh_after_failure
            )
        )

    @_same(AsyncTrainerClient.train)
    def train(
        self,
        runtime: Any = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
        *,
        spec: TrainJobSpec | Mapping[str, Any] | None = None,
        identity: Identity | None = None,
    ) -> str:
        return self._call(
            self._async.train(runtime, initializer, trainer, options, spec=spec, identity=identity)
        )

    @_same(AsyncTrainerClient.list_jobs)
    def list_jobs(
        self,
        runtime: str | None = None,
        label_selector: str | None = None,
        *,
        page_size: int | None = None,
    ) -> list[TrainJob]:
        return self._portal.call(
            self._async.list_jobs(runtime, label_selector, page_size=page_size)
        )

    @_same(AsyncTrainerClient.get_job)
    def get_job(self, name: str, *, log_progress: bool = False) -> TrainJob:
        return self._portal.call(self._async.get_job(name, log_progress=log_progress))

    @_same(AsyncTrainerClient.get_job_events)
    def get_job_events(self, name: str) -> list[Event]:
        return self._portal.call(self._async.get_job_events(name))

    @_same(AsyncTrainerClient.get_job_outputs)
    def get_job_outputs(self, name: str) -> JobOutputs:
        return self._portal.call(self._async.get_job_outputs(name))

    @_same(AsyncTrainerClient.explain_failure)
    def explain_failure(self, name: str) -> Failure:
        return self._portal.call(self._async.explain_failure(name))

    @_same(AsyncTrainerClient.get_job_logs)
    def get_job_logs(
        self,
        name: str,
        step: str = "node-0",
        follow: bool = False,
        *,
        tail: int | None = None,
        raw: bool = False,
    ) -> Iterator[str]:
        lines = self._async.get_job_logs(name, step, follow, tail=tail, raw=raw)
        if follow:
            return self._portal.iterate(lines)
        # Read now, as a call: an unreadable log raises here, not at the first line.
        return iter(self._portal.call(_collected(lines)))

    @_same(AsyncTrainerClient.wait)
    def wait(
        self,
        name: str,
        status: Status = ("Complete",),
        *,
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> tuple[TrainJob, Any]:
        return self._portal.call(
            self._async.wait(
                name,
                status,
                timeout=timeout,
                polling_interval=polling_interval,
                callbacks=callbacks,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        )

    @_same(AsyncTrainerClient.wait_outputs)
    def wait_outputs(
        self,
        name: str,
        status: Status = ("Complete",),
        *,
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
        return self._portal.call(
            self._async.wait_outputs(
                name,
                status,
                timeout=timeout,
                polling_interval=polling_interval,
                callbacks=callbacks,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        )

    @_same(AsyncTrainerClient.wait_for_job_status)
    def wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] | str = ("Complete",),
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
    ) -> TrainJob:
        return self._portal.call(
            self._async.wait_for_job_status(name, status, timeout, polling_interval, callbacks)
        )

    @_same(AsyncTrainerClient.run)
    def run(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        identity: Identity | None = None,
        name: str | None = None,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_log: Callable[[str], None] | None = None,
        log_step: str = "node-0",
        log_tail: int = 1000,
        on_update: Callable[[TrainJob], None] | None = None,
        on_submitted: Callable[[Submitted], None] | None = None,
        fresh_after_failure: bool = True,
        reuse_notice: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
        return self._call(
            self._async.run(
                spec,
                identity=identity,
                name=name,
                timeout=timeout,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                on_log=on_log,
                log_step=log_step,
                log_tail=log_tail,
                on_update=on_update,
                on_submitted=on_submitted,
                fresh_after_failure=fresh_after_failure,
                reuse_notice=reuse_notice,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        )

    @_same(AsyncTrainerClient.get_runtime_packages)
    def get_runtime_packages(
        self, runtime: str = "torch-distributed", *, timeout: float = 600
    ) -> list[str]:
        return self._portal.call(self._async.get_runtime_packages(runtime, timeout=timeout))

    @_same(AsyncTrainerClient.cancel_job)
    def cancel_job(self, name: str, action: CancelAction = "delete") -> bool:
        return self._portal.call(self._async.cancel_job(name, action))

    @_same(AsyncTrainerClient.stop_unfinished)
    def stop_unfinished(
        self,
        name: str | None = None,
        *,
        identity: str | Sequence[str | int | None] | None = None,
        label_selector: str | None = None,
        action: CancelAction = "delete",
    ) -> list[str]:
        return self._portal.call(
            self._async.stop_unfinished(
                name, identity=identity, label_selector=label_selector, action=action
            )
        )

    @_same(AsyncTrainerClient.prune_jobs)
    def prune_jobs(
        self, *, page_size: int | None = None, **options: Unpack[PruneOptions]
    ) -> PruneReport:
        return self._portal.call(self._async.prune_jobs(page_size=page_size, **options))

    @_same(AsyncTrainerClient.delete_job)
    def delete_job(self, name: str, *, propagation: str = "Background") -> bool:
        return self._portal.call(self._async.delete_job(name, propagation=propagation))

    @_same(AsyncTrainerClient.suspend_job)
    def suspend_job(self, name: str) -> TrainJob:
        return self._portal.call(self._async.suspend_job(name))

    @_same(AsyncTrainerClient.resume_job)
    def resume_job(self, name: str) -> TrainJob:
        return self._portal.call(self._async.resume_job(name))

    @_same(AsyncTrainerClient.checkpoint_location)
    def checkpoint_location(
        self, identity: Identity, *, checkpoints: Checkpoints | None = None
    ) -> CheckpointLocation:
        return self._portal.call(self._async.checkpoint_location(identity, checkpoints=checkpoints))

    @_same(AsyncTrainerClient.clean_checkpoints)
    def clean_checkpoints(
        self,
        identity: Identity,
        *,
        checkpoints: Checkpoints | None = None,
        force: bool = False,
        timeout: float | None = 600,
    ) -> CheckpointLocation:
        return self._portal.call(
            self._async.clean_checkpoints(
                identity, checkpoints=checkpoints, force=force, timeout=timeout
            )
        )

    def close(self) -> None:
        """Release this client's connection (shared watches keep theirs)."""
        self._portal.call(self._async.close())

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
