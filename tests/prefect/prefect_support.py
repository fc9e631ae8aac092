"""Helpers shared by these tests (a module of its own: test files cannot import
conftest reliably when several test folders have one)."""

from __future__ import annotations

from typing import Any

from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION


def spec(
    scenario: str | None = None, *options: Any, nodes: int = 1, **trainer: Any
) -> TrainJobSpec:
    """A small CustomTrainer job acting out ``scenario`` on the test server."""
    from train_functions import train_linear

    opts = list(options)
    if scenario:
        opts.append(Annotations({SCENARIO_ANNOTATION: scenario}))
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=nodes, **trainer), options=opts
    )


def flush_logs() -> None:
    """Ship the run loggers' buffered records to the server."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)


def read_logs(flow_run_id: Any) -> list[str]:
    """Every log message of a flow run and its tasks, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    flush_logs()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200
        )
    return [log.message for log in logs]


async def aread_logs(flow_run_id: Any) -> list[str]:
    """:func:`read_logs` from a coroutine (a test running in an event loop)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    await APILogHandler.aflush()
    async with get_client() as client:
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200
        )
    return [log.message for log in logs]


def read_artifacts(flow_run_id: Any) -> list[Any]:
    """Every artifact of a flow run (latest versions and history)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return list(
            client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )
        )
