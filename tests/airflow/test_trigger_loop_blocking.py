"""The trigger never blocks the triggerer's event loop: from a cold start (its module
imported on the loop, as Airflow's triggerer does), through reading the connection,
loading the kubeconfig, starting the shared watch and waiting, to the last event, no
callback keeps the process busy for 50 ms or more (:mod:`loop_scenarios`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from loop_support import THRESHOLD, blocking, once_more_if_slow, run_scenario

pytestmark = [pytest.mark.usefixtures("kf_conn"), pytest.mark.alone, pytest.mark.timeout(600)]

#: What Airflow's triggerer has imported before it runs any trigger (the runner is a
#: fork of it).
TRIGGERER_IMPORTS = ["airflow.jobs.triggerer_job_runner", "airflow.triggers.base"]


#: The suite's rule (``loop_support.THRESHOLD``). The Kubernetes client's TLS context
#: (the system CA bundle: 40-90 ms on 2 busy cores), the last cost that stayed on the
#: loop, is now built in a worker thread (``kf_trainer_core.k8s.api_client``).
TRIGGER_THRESHOLD = THRESHOLD


def train(x: int = 1) -> dict[str, int]:
    return {"x": x}


def test_trigger_never_blocks_the_loop(kf_conn: Path, tmp_path: Path) -> None:
    def run(attempt: int) -> dict[str, Any]:
        names = []
        with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as client:
            for i in range(12):
                scenario = json.dumps({"preset": "success", "duration": 1.0 + (i % 4)})
                spec = TrainJobSpec(
                    trainer=CustomTrainer(train),
                    options=[Annotations({SCENARIO_ANNOTATION: scenario})],
                )
                names.append(client.submit(spec, identity=f"loop/{attempt}/{i}").job.name)
        # Half the job waits follow the step's log too (streamed into the task log while
        # the task is deferred): the follow must not block the loop either.
        triggers: list[dict[str, Any]] = [
            {"job_name": n, **({"log_step": "node-0"} if i % 2 else {})}
            for i, n in enumerate(names[:-2])
        ]
        # Step waits take the other path (the job's pods, re-read on a timer).
        triggers += [
            {"job_name": n, "step": "node-0", "step_status": ["Succeeded"], "recheck_interval": 1.0}
            for n in names[-2:]
        ]
        workdir = tmp_path / str(attempt)
        workdir.mkdir()
        scenario_result = run_scenario(
            "trigger",
            {
                "conn_id": "kf_test",
                "triggers": triggers,
                "preimport": TRIGGERER_IMPORTS,
                "threshold": TRIGGER_THRESHOLD,
            },
            workdir,
        )
        scenario_result["expected"] = len(triggers)
        return scenario_result

    result = once_more_if_slow(run)
    assert [r["status"] for r in result["results"]] == ["success"] * result["expected"], result[
        "results"
    ]
    followed = [r.get("log_followed") for r in result["results"][:10]]
    assert followed == [None, True] * 5, followed
    print(result["report"].splitlines()[0])
    slow = blocking(result)
    assert not slow, f"callbacks over {TRIGGER_THRESHOLD * 1000:.0f} ms:\n{result['report']}"
