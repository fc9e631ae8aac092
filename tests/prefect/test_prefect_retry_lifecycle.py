"""A retried Prefect task takes up its job through the core's task lifecycle
(:meth:`~kf_trainer_core.tasks.lifecycle.TaskJob.attach`, the ``task retry`` column of
docs/safety.md, whose cells ``tests/conformance/test_state_matrix.py`` asserts on both
servers): one submit per task run; a job an interrupted try suspended
(``on_cancel="suspend"``) is resumed; a failed job under a fixed name is replaced."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prefect import flow
from prefect_support import read_logs, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.errors import TrainJobFailedError, TrainJobTimeoutError
from kf_trainer_core.tasks.lifecycle import TaskJob
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob

pytestmark = pytest.mark.usefixtures("prefect_server")

#: Long enough for a first try to be stopped while it runs; a resumed job runs again.
SLOW = json.dumps({"preset": "success", "duration": 3.0})


def test_each_task_run_attaches_through_the_lifecycle_once(
    creds: KubeflowTrainerCredentials,
    k8s: TrainerClient,
    kube: KubeTestServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    attach = TaskJob.attach

    async def counted(self: TaskJob, client: Any) -> Any:
        calls.append(self.identity)
        return await attach(self, client)

    monkeypatch.setattr(TaskJob, "attach", counted)

    @flow
    def twice() -> tuple[JobOutputs, JobOutputs]:
        first = run_trainjob(spec("success"), creds, identity="lifecycle/once")
        return first, run_trainjob(spec("success"), creds, identity="lifecycle/once")

    first, again = twice()
    assert calls == ["lifecycle/once", "lifecycle/once"]
    assert first.name == again.name
    assert kube.requests.count(verb="create", resource="trainjobs", status=201) == 1


def test_a_retry_resumes_the_job_a_stopped_try_suspended(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    """The first try times out and suspends its job (``on_cancel="suspend"``); the retry
    — the same task, identity and spec — resumes it rather than waiting on a job that
    would never run again."""

    @flow
    def retried() -> JobOutputs:
        with pytest.raises(TrainJobTimeoutError):
            run_trainjob(
                spec(SLOW), creds, identity="retry/suspended", timeout=1.0, on_cancel="suspend"
            )
        # Bounded: a retry that waited on the suspended job would wait for ever.
        return run_trainjob(spec(SLOW), creds, identity="retry/suspended", timeout=60.0)

    state = retried(return_state=True)
    out = state.result()
    assert out.status.value == "Complete"
    (job,) = k8s.list_jobs()
    assert job.name == out.name
    assert kube.requests.count(verb="create", resource="trainjobs", status=201) == 1
    logs = read_logs(state.state_details.flow_run_id)
    assert f"Resumed TrainJob default/{out.name}" in logs


def test_a_retry_replaces_the_failed_job_of_its_fixed_name(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    """A fixed name takes no attempt suffix: the retry deletes the task's failed job
    (the same request: its spec) through ``delete_job`` and submits it again."""
    failing = spec("fail")

    @flow
    def retried() -> str | None:
        with pytest.raises(TrainJobFailedError):
            run_trainjob(failing, creds, name="prefect-fixed")
        first = k8s.get_job("prefect-fixed").uid
        with pytest.raises(TrainJobFailedError):
            run_trainjob(failing, creds, name="prefect-fixed")
        return first

    first_uid = retried()
    assert k8s.get_job("prefect-fixed").uid != first_uid
    assert kube.requests.count(verb="create", resource="trainjobs", status=201) == 2
    assert kube.requests.count(job="prefect-fixed", verb="delete", resource="trainjobs") >= 1
