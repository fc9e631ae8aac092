"""The client under faults: dropped watches, expired resource versions, 429/5xx with
Retry-After, latency, server restarts, rotating exec-plugin credentials — and the API
cost of a job."""

from __future__ import annotations

import asyncio
import json
import random
import stat
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

# Short delays keep the test quick; enough attempts (~10 s of retrying) to outlast
# several back-to-back server restarts on a loaded machine, as the default policy's
# longer delays do in production. A request that exhausts them fails its wait.
FAULT_TOLERANT = RetryPolicy(attempts=40, base=0.02, cap=0.3, max_retry_after=0.3)


def spec(scenario: dict[str, Any] | str) -> TrainJobSpec:
    value = scenario if isinstance(scenario, str) else json.dumps(scenario)
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear), options=[Annotations({SCENARIO_ANNOTATION: value})]
    )


async def test_random_faults_every_terminal_state_seen_once(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    rng = random.Random(20261122)
    plans = []
    for _ in range(40):
        outcome = rng.choice(["succeed", "succeed", "fail", "oom"])
        plans.append(
            {
                "preset": "success"
                if outcome == "succeed"
                else ("fail" if outcome == "fail" else "oom"),
                "duration": round(rng.uniform(0.2, 1.5), 2),
            }
        )
    async with AsyncTrainerClient(k8s_config, retry=FAULT_TOLERANT) as client:
        names = [
            (await client.submit(spec(p), identity=("chaos", i))).job.name
            for i, p in enumerate(plans)
        ]
        terminal: Counter[tuple[str, JobState]] = Counter()

        trail: dict[str, list[tuple[str, str | None]]] = {}

        def callback(job: TrainJob) -> None:
            trail.setdefault(job.name, []).append((job.status.value, job.resource_version))
            if job.status.terminal:
                terminal[(job.name, job.status)] += 1

        async def wait_one(name: str) -> JobState:
            try:
                job = await client.wait_for_job_status(name, timeout=60, callbacks=[callback])
                return job.status
            except TrainJobFailedError as err:
                return JobState.FAILED if err.failure.step else JobState.CREATED

        async def chaos() -> list[str]:
            done: list[str] = []
            loop = asyncio.get_running_loop()
            for _ in range(30):
                await asyncio.sleep(rng.uniform(0.01, 0.08))
                fault = rng.choice(
                    ["drop", "expire", "429", "500", "latency", "restart", "drop-random"]
                )
                done.append(fault)
                if fault == "drop":
                    kube.faults.drop_watches()
                elif fault == "expire":
                    kube.faults.expire_resource_versions()
                    kube.faults.drop_watches()
                elif fault == "429":
                    kube.faults.fail_next(3, code=429, retry_after=0.05)
                elif fault == "500":
                    kube.faults.fail_next(2, code=500, retry_after=None)
                elif fault == "latency":
                    kube.faults.latency(0.02)
                elif fault == "drop-random":
                    kube.faults.drop_watch_probability(0.2, seed=rng.randrange(1000))
                else:
                    await loop.run_in_executor(None, lambda: kube.restart(downtime=0.05))
            kube.faults.clear()
            return done

        results = await asyncio.gather(*(wait_one(n) for n in names), chaos())
    states, faults = results[:-1], results[-1]
    assert len(set(faults)) >= 5  # the chaos really varied
    for plan, name, state in zip(plans, names, states, strict=True):
        expected = JobState.COMPLETE if plan["preset"] == "success" else JobState.FAILED
        assert state is expected, (name, plan)
        assert terminal[(name, expected)] == 1, (name, trail[name])


def test_sync_wait_survives_drops_and_expiry(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    with TrainerClient(k8s_config, retry=FAULT_TOLERANT) as client:
        name = client.submit(spec({"preset": "success", "duration": 1.0})).job.name
        seen: list[JobState] = []

        def chaos_callback(job: TrainJob) -> None:
            seen.append(job.status)
            # Break the watch at every update; the job must still be seen finishing.
            kube.faults.expire_resource_versions()
            kube.faults.drop_watches()

        job = client.wait_for_job_status(name, timeout=30, callbacks=[chaos_callback])
    assert job.status is JobState.COMPLETE
    assert seen.count(JobState.COMPLETE) == 1


def test_retry_after_is_honoured(kube: KubeTestServer, k8s_config: KubernetesConfig) -> None:
    kube.faults.fail_next(
        2, code=429, retry_after=0.25, verb="list", resource="clustertrainingruntimes"
    )
    with TrainerClient(k8s_config, retry=RetryPolicy(attempts=4, base=0.001, cap=0.01)) as client:
        start = time.monotonic()
        runtimes = client.list_runtimes()
        elapsed = time.monotonic() - start
    assert runtimes
    # Two refusals, each asking for 0.25 s: the client waited rather than hammering.
    assert elapsed >= 0.45


def _exec_plugin(tmp_path: Path) -> dict[str, Any]:
    """An exec credential plugin whose tokens change every second and expire at once,
    as short-lived cloud tokens do."""
    script = tmp_path / "token-plugin"
    script.write_text(
        f"#!{sys.executable}\n"
        "import datetime, json, time\n"
        "now = datetime.datetime.now(datetime.timezone.utc)\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': 'tok-%d' % int(time.time()),\n"
        "  'expirationTimestamp': (now + datetime.timedelta(seconds=1)).strftime('%Y-%m-%dT%H:%M:%SZ')}}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": str(script),
            "interactiveMode": "Never",
        }
    }


def _fresh_tokens_only(token: str) -> bool:
    try:
        issued = int(token.removeprefix("tok-"))
    except ValueError:
        return False
    return abs(time.time() - issued) <= 2


def test_exec_plugin_tokens_renewed_in_long_waits(kube: KubeTestServer, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "exec-kubeconfig", user=_exec_plugin(tmp_path))
    kube.require_token(_fresh_tokens_only)
    try:
        with TrainerClient(
            KubernetesConfig(kubeconfig=str(path), watch_timeout=30), retry=FAULT_TOLERANT
        ) as client:
            name = client.submit(spec({"preset": "success", "duration": 4.0})).job.name
            job, _ = client.wait(name, timeout=30)
        assert job.status is JobState.COMPLETE
        # A token read once would be refused by now.
        assert not _fresh_tokens_only(f"tok-{int(time.time()) - 5}")
    finally:
        kube.require_token(None)


async def test_exec_plugin_tokens_renewed_async(kube: KubeTestServer, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "exec-kubeconfig", user=_exec_plugin(tmp_path))
    kube.require_token(_fresh_tokens_only)
    try:
        async with AsyncTrainerClient(
            KubernetesConfig(kubeconfig=str(path), watch_timeout=30), retry=FAULT_TOLERANT
        ) as client:
            name = (await client.submit(spec({"preset": "success", "duration": 4.0}))).job.name
            job, _ = await client.wait(name, timeout=30)
        assert job.status is JobState.COMPLETE
    finally:
        kube.require_token(None)


@pytest.mark.parametrize("duration", [0.2, 1.0, 3.0])
def test_requests_per_job_do_not_grow_with_duration(
    kube: KubeTestServer, k8s_config: KubernetesConfig, duration: float
) -> None:
    with TrainerClient(k8s_config) as client:
        client.get_runtime("torch-distributed")  # warm the runtime cache: a per-client cost
        kube.requests.clear()
        name = client.submit(
            spec({"preset": "success", "duration": duration}), identity=("d", "t", duration)
        ).job.name
        client.wait(name, timeout=30)
    per_job = kube.requests.count(job=name)
    # Identity lookup, create, one list of the pods at the end; the watch is shared.
    assert per_job <= 6, [(r.method, r.path) for r in kube.requests.filter(job=name)]
