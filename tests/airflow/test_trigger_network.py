"""The Airflow trigger outlives a network that goes silent (issue 33, finding 5), on the
real control plane through a TCP fault proxy: the watch's path is black-holed while the
job completes; once the network is back the trigger fires ``success`` within
``AFTER_HEAL`` seconds. Before, its watch's read was allowed the server's timeout plus
30 s, as a total (an hour with ``watch_timeout=3600``). The clients and the command
meet the same hole in ``tests/conformance/test_silent_network.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagtest import CONN_ENV, connection_json

from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.programs.informer import open_watch_count
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.netfaults import FaultProxy, proxied_kubeconfig

pytestmark = pytest.mark.control_plane

#: The idle and request timeouts of the trigger's connection (seconds).
IDLE = 3
#: How soon after the heal the trigger must have fired (a generous bound: see
#: tests/conformance/test_silent_network.py).
AFTER_HEAL = 20.0


def train() -> int:
    return 1


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    control_plane.require_controllers()
    with FaultProxy(("127.0.0.1", control_plane.port_base)) as p:
        yield p


async def test_the_trigger_fires_after_a_black_hole_hid_the_completion(
    proxy: FaultProxy,
    control_plane_kubeconfig: Path,
    control_plane_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxied = proxied_kubeconfig(control_plane_kubeconfig, tmp_path / "proxied", proxy)
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            kubeconfig_path=str(proxied),
            watch_timeout=IDLE,
            request_timeout=IDLE,
            poll_interval=0.2,
        ),
    )
    with TrainerClient(KubernetesConfig(kubeconfig=str(control_plane_kubeconfig))) as direct:
        spec = TrainJobSpec(
            trainer=CustomTrainer(train), options=[kwok.node_annotations({kwok.DURATION: "10s"})]
        )
        name = direct.submit(spec).job.name
        direct.wait(name, "Running", timeout=120)
        trigger = TrainJobTrigger(
            job_name=name, namespace=control_plane_namespace, kubeflow_trainer_conn_id="kf_test"
        )
        fired: dict[str, Any] = {}

        async def first() -> None:
            async for event in trigger.run():
                fired.update(event.payload, at=time.monotonic())
                return

        watching = open_watch_count()
        task = asyncio.create_task(first())
        try:
            # The trigger's informer runs: it lists, then watches.
            end = time.monotonic() + 60
            while open_watch_count() <= watching:
                assert time.monotonic() < end, "the trigger never watched"
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            assert not fired
            assert direct.get_job(name).status is JobState.RUNNING, "the job ended too soon"
            proxy.blackhole()
            await asyncio.to_thread(direct.wait, name, timeout=120)  # completes in the hole
            assert not fired, "the trigger heard through the hole"
            proxy.heal()
            healed = time.monotonic()
            await asyncio.wait_for(task, AFTER_HEAL + 30)
            print(f"the trigger fired {fired['at'] - healed:.1f} s after the heal")
            assert fired["at"] - healed <= AFTER_HEAL
            assert fired["status"] == "success"
        finally:
            task.cancel()
