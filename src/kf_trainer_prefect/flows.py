"""Flow-level pieces: the hook that stops a flow run's TrainJobs when the flow run is
cancelled (or crashes), and a ready-made flow that runs one TrainJob — serve it for
scheduled retraining.

A task stops its own job when it is interrupted in its own thread (timeouts, Ctrl-C,
a cancelled flow whose task waits in the main thread). When a runner or worker cancels
a flow run it kills the flow's process, and tasks waiting in worker threads
(``.submit()``, ``.map()``) get no chance: the hook is what finds their jobs — by the
``prefect.io/flow-run-id`` label every task puts on them — and stops them.

>>> cleanup = trainjob_cleanup_hook(credentials="prod")
>>> @flow(on_cancellation=[cleanup], on_crashed=[cleanup])
... def sweep(): ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prefect import flow, task

from kf_trainer_core.tasks import PRUNE_OPTIONS, JobOutputs, shown
from kf_trainer_core.tasks.interruptions import CancelAction, check_action, past
from kf_trainer_prefect._engine import FLOW_RUN_LABEL
from kf_trainer_prefect.credentials import CredentialsLike, load_credentials

__all__ = [
    "prune_trainjobs",
    "prune_trainjobs_flow",
    "stop_flow_run_trainjobs",
    "trainjob_cleanup_hook",
    "trainjob_flow",
]

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.client.schemas.objects import FlowRun, State

Hook = Callable[["Flow[..., Any]", "FlowRun", "State[Any]"], None]


def stop_flow_run_trainjobs(
    flow_run_id: str,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    action: CancelAction = "delete",
) -> list[str]:
    """Delete (or suspend) the unfinished TrainJobs that tasks of ``flow_run_id``
    submitted; return their names."""
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.errors import StateDirNotFoundError
    from kf_trainer_core.tasks import labels_selector

    chosen = check_action(action)
    if not isinstance(flow_run_id, str) or not flow_run_id.strip():
        raise ValueError(
            f"flow_run_id={shown(flow_run_id)} names no flow run. Fix: pass the flow run's id "
            "(flow_run.id in a state hook)."
        )
    if chosen == "keep":
        return []
    creds = load_credentials(credentials)
    selector = labels_selector({FLOW_RUN_LABEL: flow_run_id})
    with TrainerClient(creds.backend_config(), namespace=namespace) as client:
        try:
            return client.stop_unfinished(label_selector=selector, action=chosen)
        except StateDirNotFoundError:
            return []  # a local state directory no job was ever submitted with: none to stop


def trainjob_cleanup_hook(
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    action: CancelAction = "delete",
) -> Hook:
    """A flow hook (``on_cancellation``, ``on_crashed``) that stops the flow run's
    unfinished TrainJobs.

    Use it for ``on_crashed`` only when crashed flow runs are not re-run: a re-run
    reattaches to jobs that were left running. Hooks run where the flow ran, or in the
    runner's process when a runner cancelled it; give ``credentials`` as a saved block's
    name or a block, not as a live client.
    """
    check_action(action)

    def stop_trainjobs(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
        from prefect.logging.loggers import flow_run_logger

        logger = flow_run_logger(flow_run=flow_run, flow=flow)
        stopped = stop_flow_run_trainjobs(
            str(flow_run.id), credentials, namespace=namespace, action=action
        )
        for name in stopped:
            logger.warning(
                "%s TrainJob %s: the flow run is %s", past(action), name, state.name or "over"
            )

    return stop_trainjobs


def _hook_from_parameters(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    params = dict(flow_run.parameters or {})
    hook = trainjob_cleanup_hook(
        params.get("credentials"),
        namespace=params.get("namespace"),
        action=params.get("on_cancel") or "delete",
    )
    hook(flow, flow_run, state)


@flow(
    name="kubeflow-trainjob",
    on_cancellation=[_hook_from_parameters],
    description="Run one Kubeflow Trainer TrainJob to its end.",
)
def trainjob_flow(
    spec: dict[str, Any],
    credentials: str | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    startup_timeout: float | None = None,
    on_cancel: CancelAction = "delete",
) -> JobOutputs:
    """Run the TrainJob ``spec`` (a ``TrainJobSpec`` in its JSON form) with the
    credentials block saved as ``credentials``; cancelling the flow run stops the job.

    Serve it for scheduled retraining::

        trainjob_flow.serve(
            name="nightly-retrain",
            cron="0 3 * * *",
            parameters={"spec": spec.model_dump(mode="json"), "credentials": "prod"},
        )
    """
    from kf_trainer_prefect.tasks import run_trainjob

    return run_trainjob(
        spec,
        credentials,
        namespace=namespace,
        timeout=timeout,
        startup_timeout=startup_timeout,
        on_cancel=on_cancel,
    )


@task(name="prune-trainjobs")
def prune_trainjobs(
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    older_than: str | float | None = None,
    keep_last: int | None = None,
    statuses: tuple[str, ...] = ("Complete", "Failed"),
    label_selector: str | None = None,
    identity_prefix: str | None = None,
    include_foreign: bool = False,
    honour_retention: bool = True,
    limit: int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Delete finished TrainJobs (``TrainerClient.prune_jobs``; ``docs/retention.md``):
    never an unfinished one, never checkpoints; without ``older_than``/``keep_last`` the
    retention each job was submitted with decides. Returns the report as a dict."""
    from prefect import get_run_logger

    from kf_trainer_core.client import TrainerClient

    # The options are parameters of their own (Prefect shows them, and ``.map()`` maps
    # over them) and pass through to the client by name.
    options = {name: value for name, value in locals().items() if name in PRUNE_OPTIONS}
    creds = load_credentials(credentials)
    with TrainerClient(creds.backend_config(), namespace=namespace) as client:
        report = client.prune_jobs(**options)
    logger = get_run_logger()
    for line in report.lines():
        logger.info("%s", line)
    return report.to_dict()


@flow(name="prune-trainjobs", description="Delete finished Kubeflow Trainer TrainJobs.")
def prune_trainjobs_flow(
    credentials: str | None = None,
    namespace: str | None = None,
    older_than: str | None = None,
    keep_last: int | None = None,
    identity_prefix: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """A maintenance flow of one :func:`prune_trainjobs` task, with the credentials block
    saved as ``credentials``. Serve it on a schedule::

        prune_trainjobs_flow.serve(
            name="prune-trainjobs", cron="0 4 * * *",
            parameters={"credentials": "prod", "older_than": "14d"},
        )
    """
    result: dict[str, Any] = prune_trainjobs(
        credentials,
        namespace=namespace,
        older_than=older_than,
        keep_last=keep_last,
        identity_prefix=identity_prefix,
        dry_run=dry_run,
    )
    return result
