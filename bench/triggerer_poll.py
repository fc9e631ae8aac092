"""The baseline of :mod:`bench.triggerer`: a deferrable TrainJob wait written the way
``KubernetesJobOperator(deferrable=True)`` waits for a Job (cncf.kubernetes provider).

Its trigger GETs the object every ``poll_interval`` seconds (the provider's
``job_poll_interval`` defaults to 10 s), and, as the provider's ``AsyncKubernetesHook``
does, loads the kubeconfig and makes a fresh ``kubernetes_asyncio`` API client for every
request. The submit is ours (the same as the measured side), so only the wait differs.
Bench code: it is not part of the provider.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from kf_trainer_airflow.operators.trainjob import TrainJobOperator

#: The provider's default ``job_poll_interval``.
POLL_INTERVAL = 10.0


def _ended(obj: Mapping[str, Any]) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return str(cond["type"])
    return None


class PollingTrainJobTrigger(BaseTrigger):
    """GET the TrainJob every ``poll_interval`` seconds until it is Complete or Failed."""

    def __init__(
        self, job_name: str, namespace: str, kubeconfig_path: str, poll_interval: float
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.job_name = job_name
        self.namespace = namespace
        self.kubeconfig_path = kubeconfig_path
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "kubeconfig_path": self.kubeconfig_path,
                "poll_interval": self.poll_interval,
            },
        )

    async def _get(self) -> dict[str, Any]:
        # As AsyncKubernetesHook.get_conn(): config loaded and a client made per call.
        from kubernetes_asyncio import client, config

        cfg = client.Configuration()
        await config.load_kube_config(config_file=self.kubeconfig_path, client_configuration=cfg)
        async with client.ApiClient(cfg) as api:
            obj = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", self.namespace, "trainjobs", self.job_name
            )
        return dict(obj)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            state = _ended(await self._get())
            if state is not None:
                payload = {"status": state, "job_name": self.job_name, "seen": time.time()}
                yield TriggerEvent(payload)  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)


class PollingTrainJobOperator(TrainJobOperator):
    """Our submit, then the polling trigger above instead of ours."""

    def __init__(self, *, kubeconfig_path: str, poll_interval: float = POLL_INTERVAL, **kw: Any):
        super().__init__(**kw)
        self.kubeconfig_path = kubeconfig_path
        self.poll_interval = poll_interval

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        self.defer(
            trigger=PollingTrainJobTrigger(
                str(external_id), str(self._job_namespace), self.kubeconfig_path, self.poll_interval
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> Any:
        if event.get("status") != "Complete":
            raise RuntimeError(f"TrainJob {event.get('job_name')} ended {event.get('status')}")
        return {"job_name": event.get("job_name")}
