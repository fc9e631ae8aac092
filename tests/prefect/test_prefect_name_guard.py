"""Prefect's tasks refuse an empty or invalid job name before any request (issue 14,
item 1): ``cancel_trainjob("")`` used to delete every TrainJob of the namespace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kf_trainer_core.errors import InvalidNameError
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_prefect import KubeflowTrainerCredentials
from kf_trainer_prefect.tasks import (
    acancel_trainjob,
    aget_trainjob_outputs,
    astream_trainjob_logs,
    await_trainjob,
    cancel_trainjob,
    get_trainjob_outputs,
    stream_trainjob_logs,
    wait_trainjob,
)

SYNC: list[Callable[..., Any]] = [
    cancel_trainjob.fn,
    wait_trainjob.fn,
    stream_trainjob_logs.fn,
    get_trainjob_outputs.fn,
]
ASYNC: list[Callable[..., Any]] = [
    acancel_trainjob.fn,
    await_trainjob.fn,
    astream_trainjob_logs.fn,
    aget_trainjob_outputs.fn,
]


def _direct_requests(server: KubeTestServer) -> int:
    """Requests other than lists and watches (other tests' lingering informers may
    still list and watch; nothing else runs in the background)."""
    return sum(1 for r in server.requests.records if r.verb not in ("list", "watch"))


@pytest.mark.parametrize("bad", ["", "Bad_Name"])
def test_sync_tasks_refuse_bad_names(
    creds: KubeflowTrainerCredentials, kube: KubeTestServer, bad: str
) -> None:
    before = _direct_requests(kube)
    for task_fn in SYNC:
        with pytest.raises(InvalidNameError, match=r"job=.*Fix: "):
            task_fn(bad, creds)
    assert _direct_requests(kube) == before


async def test_async_tasks_refuse_bad_names(
    creds: KubeflowTrainerCredentials, kube: KubeTestServer
) -> None:
    before = _direct_requests(kube)
    for task_fn in ASYNC:
        with pytest.raises(InvalidNameError, match=r"job=''"):
            await task_fn("", creds)
    assert _direct_requests(kube) == before


def test_stopping_a_flow_runs_jobs_needs_its_id(
    creds: KubeflowTrainerCredentials, kube: KubeTestServer
) -> None:
    from kf_trainer_prefect.flows import stop_flow_run_trainjobs

    before = _direct_requests(kube)
    for bad in ("", "  "):
        with pytest.raises(ValueError, match="names no flow run"):
            stop_flow_run_trainjobs(bad, creds)
    assert _direct_requests(kube) == before


def test_an_empty_label_set_selects_nothing_rather_than_everything() -> None:
    from kf_trainer_core.manifest.selectors import labels_selector

    with pytest.raises(ValueError, match="selects every TrainJob"):
        labels_selector({})
