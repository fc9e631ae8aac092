"""Progress and metrics reported from inside the training function, end to end over
HTTP: the generated program runs for real (the test server's ``exec`` scenario), its
``report()`` calls reach the TrainJob status server over HTTPS with the job's token,
the status server writes ``status.trainerStatus``, and the client's wait sees each
report while the job runs. Without a status server (or with one that is down or
refuses the token) the same reports travel in node-0's log.

The training functions below wait, after each report, until the *waiting side* has seen
it (it opens a gate file from its ``on_progress`` callback): a report that arrived only
at the end would leave the job stuck, so each test proves live, in-order delivery
without timing anything.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState, Progress
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.resources import PODS
from kf_trainer_core.report import MARKER
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_core.testing.status_server import StatusServer, status_path

#: Send every report at once: the tests follow each step.
FAST = {"KF_TRAINER_REPORT_INTERVAL": "0"}


def paced(steps: int = 3, gate: str = "") -> dict[str, int]:
    """Report each step, then wait until ``gate/<step>`` exists."""
    import os
    import time

    from kf_trainer_core.report import report, track

    for i in track(range(steps)):
        report(metrics={"loss": round(1.0 / (i + 1), 4), "step": i})
        deadline = time.monotonic() + 60
        while gate and not os.path.exists(os.path.join(gate, str(i))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {i} never opened")
            time.sleep(0.02)
    return {"steps": steps}


def chatty(n: int = 300) -> dict[str, int]:
    """Report far more often than the interval allows."""
    from kf_trainer_core.report import report

    for i in range(n):
        report(progress=100 * (i + 1) / n, metrics={"i": i})
    return {"n": n}


def every_rank(steps: int = 5) -> str:
    """Each rank reports its own rank; only rank 0's may arrive."""
    import os

    from kf_trainer_core.report import report

    rank = os.environ.get("RANK") or os.environ.get("JOB_COMPLETION_INDEX") or "0"
    for i in range(steps):
        report(progress=20 * (i + 1), metrics={"rank": rank})
    return rank


def exec_spec(func: Any, env: dict[str, str] | None = None, **kw: Any) -> TrainJobSpec:
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(func, env={**FAST, **(env or {})}, **kw),
        options=[Annotations({SCENARIO_ANNOTATION: "exec"})],
    )


class Gate:
    """Opens ``dir/<step>`` when the waiting side sees that step reported."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "gate"
        self.dir.mkdir()
        self.seen: list[Progress] = []

    def __call__(self, progress: Progress) -> None:
        self.seen.append(progress)
        step = progress.metrics.get("step")
        if step is not None:
            (self.dir / str(step)).touch()


@pytest.fixture
def status_server(kube: KubeTestServer) -> StatusServer:
    server: StatusServer = kube.enable_status_server()
    return server


def _post(server: StatusServer, path: str, token: str | None, body: Any) -> tuple[int, Any]:
    context = ssl.create_default_context(cadata=server.ca_pem.decode())
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        server.base_url + path,
        data=data,
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_status_endpoint_speaks_the_trainer_protocol(
    kube: KubeTestServer, status_server: StatusServer, client: TrainerClient
) -> None:
    running = [Annotations({SCENARIO_ANNOTATION: "never-finish"})]
    name = client.submit(TrainJobSpec(trainer=CustomTrainer(chatty), options=running)).job.name
    other = client.submit(TrainJobSpec(trainer=CustomTrainer(every_rank), options=running)).job.name
    path = status_path("default", name)
    token = status_server.token_for("default", name)
    status = {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": 90,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": "2026-11-23T10:00:00Z",
    }
    # Authorization: the job's own token only.
    assert _post(status_server, path, None, {"trainerStatus": status})[0] == 403
    assert _post(status_server, path, "nope", {"trainerStatus": status})[0] == 403
    other_token = status_server.token_for("default", other)
    assert _post(status_server, path, other_token, {"trainerStatus": status})[0] == 403
    # Payloads: undecodable 422, without trainerStatus a no-op 200, valid 200 + written.
    assert _post(status_server, path, token, b"{not json")[0] == 422
    assert _post(status_server, path, token, {})[0] == 200
    assert client.get_job(name).progress is None
    code, echoed = _post(status_server, path, token, {"trainerStatus": status})
    assert (code, echoed) == (200, {"trainerStatus": status})
    progress = client.get_job(name).progress
    assert progress == Progress(
        percentage=40,
        estimated_remaining_seconds=90,
        metrics={"loss": 0.5},
        last_updated="2026-11-23T10:00:00Z",
    )
    # A later report replaces the whole trainerStatus (the metrics list is atomic).
    later = {"progressPercentage": 50, "lastUpdatedTime": "2026-11-23T10:00:05Z"}
    assert _post(status_server, path, token, {"trainerStatus": later})[0] == 200
    assert client.get_job(name).progress == Progress(
        percentage=50, last_updated="2026-11-23T10:00:05Z"
    )
    # The CRD's rules apply (when the upstream CRD is at hand).
    if kube.validates:
        too_long = {**later, "metrics": [{"name": "loss", "value": "9" * 65}]}
        assert _post(status_server, path, token, {"trainerStatus": too_long})[0] == 422
        assert (
            _post(status_server, path, token, {"trainerStatus": {"progressPercentage": 1}})[0]
            == 422
        )
    # Unknown jobs and other paths.
    gone = status_path("default", "no-such-job")
    assert _post(status_server, gone, token, {"trainerStatus": later})[0] == 403
    assert _post(status_server, "/healthz", token, {})[0] == 404


def test_trainer_pods_get_the_status_server(
    kube: KubeTestServer, status_server: StatusServer, client: TrainerClient
) -> None:
    name = client.submit(TrainJobSpec(trainer=CustomTrainer(chatty))).job.name
    client.wait(name, timeout=30)
    pods, _ = kube.store.list(PODS, "default")
    trainer = [p for p in pods if "node" in p["metadata"]["name"]]
    assert trainer
    for pod in trainer:
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["KUBEFLOW_TRAINER_SERVER_URL"] == status_server.url_for("default", name)
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
        assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/kubeflow/trainer/ca.crt"
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "kubeflow-trainer-token")
        audience = volume["projected"]["sources"][0]["serviceAccountToken"]["audience"]
        assert (
            audience == f"trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/{name}/status"
        )


def test_reports_reach_the_status_server_live_and_in_order(
    status_server: StatusServer, client: TrainerClient, tmp_path: Path
) -> None:
    gate = Gate(tmp_path)
    spec = exec_spec(paced, func_args={"steps": 3, "gate": str(gate.dir)})
    out = client.run(spec, timeout=120, on_progress=gate)
    assert out.status is JobState.COMPLETE
    assert out.result == {"steps": 3}
    assert out.metrics == {"loss": 0.3333, "step": 2}
    assert out.progress is not None
    assert out.progress.percentage == 100
    posts = status_server.posts_for(out.name, code=None)
    assert posts
    assert all(p.code == 200 for p in posts)
    percents = [p.trainer_status["progressPercentage"] for p in posts if p.trainer_status]
    assert percents == sorted(percents)
    assert percents[-1] == 100
    steps = [s.metrics.get("step") for s in gate.seen if "step" in s.metrics]
    assert steps == sorted(steps)
    assert {0, 1, 2} <= set(steps)


def test_reports_are_coalesced_to_the_interval(
    status_server: StatusServer, client: TrainerClient
) -> None:
    # An hour between sends: the first report goes at once, the last when the function
    # returns; the 298 in between only update what is sent.
    out = client.run(exec_spec(chatty, env={"KF_TRAINER_REPORT_INTERVAL": "3600"}), timeout=120)
    posts = status_server.posts_for(out.name)
    assert 1 <= len(posts) <= 2
    assert posts[-1].trainer_status is not None
    assert posts[-1].trainer_status["progressPercentage"] == 100
    assert out.metrics == {"i": 299}


def test_only_rank_zero_reports(status_server: StatusServer, client: TrainerClient) -> None:
    out = client.run(exec_spec(every_rank, num_nodes=2), timeout=120)
    assert out.status is JobState.COMPLETE
    posts = status_server.posts_for(out.name)
    assert posts
    assert {m["value"] for p in posts for m in (p.trainer_status or {}).get("metrics", [])} == {"0"}


@pytest.mark.parametrize("trouble", ["refused", "down"])
def test_a_refusing_or_down_status_server_does_not_disturb_training(
    status_server: StatusServer, client: TrainerClient, tmp_path: Path, trouble: str
) -> None:
    if trouble == "refused":
        status_server.refuse_tokens = True
    else:
        status_server.stop()
    gate = Gate(tmp_path)
    spec = exec_spec(paced, func_args={"steps": 2, "gate": str(gate.dir)})
    # The reports still arrive, through node-0's log, while the job runs.
    out = client.run(spec, timeout=120, on_progress=gate, log_progress_interval=0.1)
    assert out.status is JobState.COMPLETE
    assert out.result == {"steps": 2}
    assert out.metrics == {"loss": 0.5, "step": 1}
    lines = list(client.get_job_logs(out.name))
    assert any("cannot report to the TrainJob status server" in line for line in lines)
    assert not any(
        "Bearer" in line or status_server.token_for("default", out.name) in line for line in lines
    )
    if trouble == "refused":
        assert {p.code for p in status_server.posts_for(out.name, code=None)} == {403}


def test_without_a_status_server_progress_comes_from_the_log(
    kube: KubeTestServer, k8s_config: KubernetesConfig, tmp_path: Path
) -> None:
    gate = Gate(tmp_path)
    spec = exec_spec(paced, func_args={"steps": 3, "gate": str(gate.dir)})
    with TrainerClient(k8s_config) as client:
        out = client.run(spec, timeout=120, on_progress=gate, log_progress_interval=0.1)
        assert out.metrics == {"loss": 0.3333, "step": 2}
        assert out.progress is not None
        assert out.progress.percentage == 100
        # The cluster's object has no trainerStatus: it was all read from the log.
        assert client.get_job(out.name).progress is None
        assert client.get_job(out.name, log_progress=True).progress == out.progress
        assert any(MARKER in line for line in client.get_job_logs(out.name, raw=True))


async def test_async_client_sees_the_same_progress(
    status_server: StatusServer, k8s_config: KubernetesConfig, tmp_path: Path
) -> None:
    gate = Gate(tmp_path)
    spec = exec_spec(paced, func_args={"steps": 2, "gate": str(gate.dir)})
    async with AsyncTrainerClient(k8s_config) as client:
        out = await client.run(spec, timeout=120, on_progress=gate)
    assert out.metrics == {"loss": 0.5, "step": 1}
    assert [s.metrics.get("step") for s in gate.seen][-1] == 1


def test_outputs_say_what_the_job_cost(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(chatty, num_nodes=2, resources_per_node={"gpu": 4}),
        # Longer than a second: the API's timestamps have whole seconds.
        options=[Annotations({SCENARIO_ANNOTATION: '{"preset": "success", "duration": 1.2}'})],
    )
    out = client.run(spec, timeout=60)
    assert out.running_seconds is not None
    assert out.pending_seconds is not None
    assert out.duration_seconds is not None
    assert out.running_seconds > 0
    assert out.pending_seconds + out.running_seconds == pytest.approx(out.duration_seconds, abs=1)
    # Two nodes of four GPUs, each for the time its container ran.
    ran = [s for s in out.steps if s.name.startswith("node-")]
    expected = sum(
        4 * (s.finished_at - s.started_at).total_seconds()
        for s in ran
        if s.started_at and s.finished_at
    )
    assert out.gpu_hours == pytest.approx(expected / 3600, abs=1e-6)
    assert out.gpu_hours is not None
    assert out.gpu_hours > 0
    assert out.cost()["gpu_hours"] == out.gpu_hours
