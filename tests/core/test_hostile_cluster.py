"""What the cluster sends back is untrusted: every reader of a TrainJob, its pods, its
events, its JobSet, its Kueue Workload and its logs returns, with bounded and escaped
text, whatever values those objects hold.

The objects are real ones: the test bed's simulated Trainer, JobSet and Kueue
controllers run a failing job, an OOM-killed one and a queued one, and a captured
torchrun failure log stands in for a node's output. A property test then puts hostile
values at random places in them — of the type the API server's schema allows there
(it refuses a list where a string goes, and Go writes no lone surrogate), but any
value of it: malformed or zoneless timestamps, other scripts' digits, huge and
negative numbers, escape sequences, markdown, megabyte strings, lines with JSON's
surrogate escapes, empty, swollen or cut lists, missing fields — and runs every pure
reader over them. What it found is pinned by a regression test each, beside the
readers' other tests (tests/core/test_untrusted.py, test_quantity.py).
"""

from __future__ import annotations

import copy
import functools
import json
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchrun_texts import fixture

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster import cost, job_summary, kueue, root_cause, stuck
from kf_trainer_core.cluster import distributed as dist
from kf_trainer_core.cluster import events as cluster_events
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.cluster.multikueue import dispatched, worker_name
from kf_trainer_core.cluster.outputs import outputs
from kf_trainer_core.cluster.results import declined_in_log, expects_result
from kf_trainer_core.cluster.status import (
    Failure,
    TrainJob,
    failure_of,
    job_state,
    progress,
    result_from_pods,
    to_trainjob,
    trainer_pod,
)
from kf_trainer_core.spec.function import progress_from_log
from kf_trainer_core.testing.controller import TrainerController, find_upstream, install_runtimes
from kf_trainer_core.testing.kueue import KueueSimulator
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.store import EVENTS, JOBSETS, PODS, TRAINJOBS, PodLogs, Store

NS = "default"
ESC = "\x1b"

pytestmark = pytest.mark.skipif(
    find_upstream() is None, reason="the shared upstream folder (default runtimes) is missing"
)


# ------------------------------------------------------------- the cluster's objects


def _run_jobs() -> dict[str, dict[str, Any]]:
    """A failed job, an OOM-killed one and one queued by Kueue, as the test bed's
    controllers leave them: the TrainJob, its pods, events, JobSet, node logs and
    Workloads."""
    store, logs = Store(), PodLogs()
    install_runtimes(store)
    trainer = TrainerController(store, logs)
    trainer.default_preset = "success"
    queues = KueueSimulator(store)
    queues.add_cluster_queue("cq", {"cpu": "100"})
    queues.add_local_queue(NS, "lq", "cq")
    trainer.start()
    queues.start()
    try:
        jobs = {
            "failed": ({"outcome": "fail", "exit_code": 1}, {}),
            "oom": ({"outcome": "oom"}, {}),
            "queued": ({"outcome": "never-finish"}, {QUEUE_NAME_LABEL: "lq"}),
        }
        for name, (scenario, labels) in jobs.items():
            meta = {
                "name": name,
                "namespace": NS,
                "labels": labels,
                "annotations": {SCENARIO_ANNOTATION: json.dumps(scenario)},
            }
            store.create(
                TRAINJOBS,
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "metadata": meta,
                    "spec": {
                        "runtimeRef": {"name": "torch-distributed"},
                        "trainer": {"numNodes": 2},
                    },
                },
            )

        def ended(name: str) -> bool:
            conditions = (store.get(TRAINJOBS, NS, name).get("status") or {}).get("conditions")
            return any(c["type"] == "Failed" for c in conditions or [])

        deadline = time.monotonic() + 30
        while not (ended("failed") and ended("oom")):
            assert time.monotonic() < deadline, "the test bed did not fail the jobs"
            time.sleep(0.02)
        queues.wait_idle()
        workloads, _ = store.list(WORKLOADS, NS)
        every_event, _ = store.list(EVENTS, NS)
        out = {}
        for name in jobs:
            pods, _ = store.list(PODS, NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
            node_logs = {
                p["metadata"]["name"]: [
                    line for _, line in logs.lines(NS, p["metadata"]["name"], "node")
                ]
                for p in pods
            }
            out[name] = {
                "trainjob": store.get(TRAINJOBS, NS, name),
                "pods": pods,
                "events": [e for e in every_event if e["involvedObject"]["name"].startswith(name)],
                "jobset": store.get(JOBSETS, NS, name),
                "workloads": workloads,
                "position": {"positionInLocalQueue": 0, "positionInClusterQueue": 0},
                # node-0's own words, then a torchrun failure summary as a node prints it.
                "logs": [
                    *(line for lines in node_logs.values() for line in lines),
                    *fixture("gloo_valueerror_rank1.log"),
                ],
            }
        return out
    finally:
        queues.stop()
        trainer.stop()


@functools.cache
def _jobs() -> dict[str, dict[str, Any]]:
    return _run_jobs()


# ------------------------------------------------------------------ hostile values

HOSTILE_TEXT = [
    "",
    " ",
    "²",  # passes str.isdigit; int() raises on it
    "٣",  # an Arabic-Indic three: int() reads it
    "1²",
    "-1",
    "99999999999999999999999",
    "NaN",
    "inf",
    "1e1000000",
    "1e999999",
    f"{ESC}[2J{ESC}]8;;http://evil.example/{ESC}\\link{ESC}]8;;{ESC}\\ \x9b31m\u202eevil",
    "nul\x00byte",
    "<script>x</script> [l](http://evil) ![i](http://evil/x.png) **b** |c| `d`",
    "x" * 100_000,
    "not a time",
    "2026-11-28T13:28:40",  # no zone
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "2026-11-28T13:28:47.123456789123Z",
    "node-0",
    "Failed",
    "True",
    "OOMKilled",
    "Root Cause (first observed failure):",
    "Traceback (most recent call last):",
    "##kf-trainer-result## " + "[" * 10_000,
    '##kf-trainer-progress## {"metrics": [{"name": "loss\\ud800", "value": "\\udc00"}]}',
]
HOSTILE_NUMBERS = [0, -1, 2**31, -(2**63), 2**64, 10**30]
_ABSENT = object()


def _hostile_like(value: Any, in_mapping: bool) -> st.SearchStrategy[Any]:
    """Values the API server's schema lets stand where ``value`` stands (inside an
    object, absent too, and null where Go writes one)."""
    same: st.SearchStrategy[Any]
    if isinstance(value, bool):
        same = st.booleans()
    elif isinstance(value, int):
        same = st.sampled_from(HOSTILE_NUMBERS) | st.integers()
    elif isinstance(value, float):
        same = st.floats()
    elif isinstance(value, str):
        same = st.sampled_from(HOSTILE_TEXT) | st.sampled_from(HOSTILE_TEXT) | st.text(max_size=30)
    elif isinstance(value, list):
        # Empty, swollen, or cut short (a log read mid-summary).
        same = st.sampled_from([[], value * 100]) | st.builds(
            lambda n: value[:n], st.integers(0, len(value))
        )
    elif isinstance(value, dict):
        same = st.just({})
    else:
        same = st.none()
    if not in_mapping:
        return same
    # Go writes a nil list, map or pointer as null, never a string (maps of strings:
    # labels, annotations, hold none either).
    return same | st.sampled_from([_ABSENT] if isinstance(value, str) else [_ABSENT, None])


def _inside(value: Any) -> list[Any]:
    """The keys or indexes of a JSON object or array (none for anything else)."""
    if isinstance(value, dict):
        return list(value)
    return list(range(len(value))) if isinstance(value, list) else []


def _mutated(case: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """``case`` with one to eight places changed, each found by walking down from one of
    the job's objects a key or an item at a time, and stopping at any level (most often
    at a leaf)."""
    case = copy.deepcopy(case)
    for _ in range(data.draw(st.integers(1, 8), label="changes")):
        parent: Any = case
        key: Any = data.draw(st.sampled_from(sorted(case)), label="object")
        while (inner := _inside(parent[key])) and (
            parent is case or data.draw(st.integers(0, 7), label="stop") > 0
        ):
            parent, key = parent[key], data.draw(st.sampled_from(inner), label="step")
        if parent is case:
            continue  # an object with nothing in it (no JobSet)
        new = data.draw(_hostile_like(parent[key], isinstance(parent, dict)), label="value")
        if new is _ABSENT:
            del parent[key]
        else:
            parent[key] = copy.deepcopy(new)
    return case


# -------------------------------------------------------------------- the readers

#: Characters any one piece of job or cluster text may keep (the cut marker included).
_LIMIT = untrusted.LINE_LIMIT


def _safe(text: str, limit: int = _LIMIT) -> None:
    assert len(text) <= limit
    for control in (ESC, "\x9b", "\u202e"):
        assert control not in text
    text.encode()  # no lone surrogate: every sink writes UTF-8


def _check_failure(failure: Failure) -> None:
    for text in [failure.message, failure.reason, failure.classified_by]:
        _safe(text)
    for text in [*failure.log_tail, *failure.events]:
        _safe(text)
    failure.describe().encode()
    failure.model_dump_json()


def _check_job(job: TrainJob) -> None:
    job.model_dump_json()  # what the CLI's -o json, XComs and triggers carry
    if job.progress is not None:
        for name, value in job.progress.metrics.items():
            _safe(name, untrusted.METRIC_TEXT_LIMIT)
            _safe(str(value), untrusted.METRIC_TEXT_LIMIT)
    for step in job.steps:
        _safe(step.container_reason or "")
        _safe(step.status or "")


def _read_everything(case: dict[str, Any]) -> None:
    """Every pure reader of what the cluster says, over one job's objects."""
    obj, pods, events, lines = case["trainjob"], case["pods"], case["events"], case["logs"]
    job_state(obj)
    progress(obj)
    dispatched(obj)
    workload = kueue.owned_workload(case["workloads"], (obj.get("metadata") or {}).get("uid"))
    queue = None
    if kueue.queue_name(obj) is not None:
        queue = kueue.queue_status("lq", workload, position=case["position"])
        queue.model_dump_json()
        for line in queue.summary():
            line.encode()
        worker_name(workload)
    job = to_trainjob(obj, pods, queue)
    _check_job(job)
    seen = [cluster_events.to_event(e) for e in events]
    for event in cluster_events.job_events(job.name, events, pods, cluster_events.steps_of(obj)):
        _safe(event.message)
        _safe(event.reason)
    refused = cluster_events.refused_pods(seen, pods, job.name)
    first = root_cause.root_cause_node(pods, {"node-0": lines})
    failure = failure_of(obj, pods, seen, lines, queue, first=first, shown=20)
    _check_failure(failure)
    job = stuck.with_waiting(
        job.model_copy(update={"failure": failure}),
        obj,
        pods,
        limits=stuck.backoff_limits(case["jobset"]),
        refused=refused,
    )
    stuck.restarting_steps(pods)
    if job.waiting is not None:
        _safe(job.waiting.reason)
        _safe(job.waiting.classified_by)
    cost.job_cost(job, now=datetime.now(timezone.utc))
    job_summary.job_summary(job).encode()
    job_summary.progress_description(job).encode()
    _, value = result_from_pods(pods)
    job_summary.outputs_summary(outputs(job, value)).encode()
    expects_result(obj, trainer_pod(pods))
    declined_in_log(lines)
    progress_from_log(lines)
    dist.diagnose(lines, node="node-0")
    dist.parse_summary(lines)
    dist.worker_errors(lines)


def test_the_readers_read_the_jobs_as_they_are() -> None:
    """The objects are what the property test needs them to be: a failure to explain,
    a Workload, a torchrun summary (else the readers would say little of them)."""
    jobs = _jobs()
    oom = jobs["oom"]
    assert failure_of(oom["trainjob"], oom["pods"]).container_reason == "OOMKilled"
    assert kueue.owned_workload(
        jobs["queued"]["workloads"], jobs["queued"]["trainjob"]["metadata"]["uid"]
    )
    assert dist.parse_summary(jobs["failed"]["logs"])
    for case in jobs.values():
        _read_everything(case)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_value_of_the_right_type_breaks_a_reader(data: st.DataObject) -> None:
    jobs = _jobs()
    case = jobs[data.draw(st.sampled_from(sorted(jobs)), label="job")]
    _read_everything(_mutated(case, data))
