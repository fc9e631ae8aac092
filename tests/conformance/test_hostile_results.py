"""A Complete job whose function returned a value too deep to carry (issue 33, finding 3),
on both servers: its node-0 termination message is 600 bytes of valid JSON nested 300
levels deep. The job is reported Complete everywhere — the wait, ``get_job_outputs``,
``kf-trainer jobs get`` (table and ``-o json``) — with its result withheld and said why,
instead of a serialisation error (the CLI exited 2; the Airflow trigger fired ``error``)."""

from __future__ import annotations

import json

import pytest
from conformance_support import Cluster, pod_annotations
from test_real_controllers import cli

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.spec import Annotations
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

DEEP = "[" * 300 + "]" * 300


def deep_result_job(client: TrainerClient, cluster: Cluster) -> str:
    if cluster.real:
        option = pod_annotations({"kwok.x-k8s.io/termination-message": DEEP})
    else:
        option = Annotations({SCENARIO_ANNOTATION: json.dumps({"termination_message": DEEP})})
    return client.submit(cluster.spec("succeed", option)).job.name


def test_a_complete_job_with_a_result_too_deep_is_complete_everywhere(
    client: TrainerClient, controllers: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = deep_result_job(client, controllers)
    job, value = client.wait(name, timeout=120)
    assert job.status.value == "Complete"
    assert str(value).startswith("[kf-trainer: result withheld: ")
    out = client.wait_outputs(name, timeout=120)
    assert str(out.result).startswith("[kf-trainer: result withheld: it is nested more than 32")
    assert out.result_missing is not None
    assert out.result_missing.cause == "unusable"
    assert client.get_job_outputs(name).result == out.result
    code, text = cli(capsys, controllers, "jobs", "get", name)
    assert code == 0, text
    assert "is withheld: it is nested more than 32 levels deep" in text
    code, text = cli(capsys, controllers, "jobs", "get", name, "-o", "json")
    assert code == 0, text
    assert json.loads(text)["outputs"]["result_missing"]["cause"] == "unusable"
