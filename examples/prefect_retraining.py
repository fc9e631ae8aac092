"""Daily retraining as a Prefect flow: prepare the day's data → train it as a Kubeflow
Trainer TrainJob → evaluate the candidate → promote it only when it beats the promoted
model (a plain Python ``if``).

On this machine (the local backend: the TrainJob runs as local processes; Prefect
starts a temporary server when none is configured)::

    uv run --frozen python examples/prefect_retraining.py              # today's data
    uv run --frozen python examples/prefect_retraining.py --day 12     # another day
    uv run --frozen python examples/prefect_retraining.py --serve      # daily, 03:00 UTC

On a cluster, the same flow with other parameters:

* **where**: a ``KubeflowTrainerCredentials`` block, saved once (or in the UI)::

      from kf_trainer_prefect import KubeflowTrainerCredentials
      KubeflowTrainerCredentials(in_cluster=True, namespace="team-a").save("gpu-cluster")
      # or KubeflowTrainerCredentials(kubeconfig="~/.kube/config", context="gpu")

* **what**: ``profile="cluster"`` (see ``retraining_jobs.CLUSTER``: runtime
  ``torch-distributed``, ``num_nodes=2``, ``resources_per_node={"gpu": 4, ...}``, the
  PVC ``retraining-data`` mounted at ``/mnt/shared/retraining`` in the training pods);
  the flow's own workers must mount the same storage at the same path;

and serve it with those parameters::

    uv run --frozen python examples/prefect_retraining.py --serve \\
        --credentials gpu-cluster --profile cluster

A local run sets what Prefect's temporary server needs on a small machine (see
``LOCAL_PREFECT_ENV``); its TrainJobs stay in ``.kf-trainer/prefect/trainjobs``::

    uv run --frozen kf-trainer --backend local --state-dir .kf-trainer/prefect/trainjobs jobs list

A retried training task reattaches to its job instead of submitting another (one
retried after the job *failed* submits a fresh attempt); cancelling the flow run
deletes its unfinished TrainJobs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: What Prefect's temporary server needs for a local run on a small machine, set before
#: Prefect is imported (it reads its settings then): 20 s, Prefect's default start-up
#: timeout, is not enough on 2 busy cores, and its telemetry heartbeat's first write races
#: the server's own writes to its SQLite database ("database is locked", logged with two
#: tracebacks; docs/prefect.md). Settings of your own (environment, profile) win.
LOCAL_PREFECT_ENV = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}
if not os.environ.get("PREFECT_API_URL"):
    for _key, _value in LOCAL_PREFECT_ENV.items():
        os.environ.setdefault(_key, _value)

from prefect import flow, task  # noqa: E402
from prefect.runtime import flow_run as this_flow_run  # noqa: E402

from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob, stop_flow_run_trainjobs  # noqa: E402
from retraining_jobs import profile as job_profile  # noqa: E402
from retraining_ml import (  # noqa: E402
    current_accuracy,
    day_of,
    evaluate,
    layout,
    prepare_data,
    promote,
    promoted_note,
    summary,
    train,
)

#: Where files go on this machine when the profile names no shared directory.
LOCAL_DIR = ".kf-trainer/prefect"
#: The training task, retried twice: a retry reattaches to its TrainJob.
train_job = run_trainjob.with_options(retries=2, retry_delay_seconds=60)


def credentials_for(
    credentials: str | None, profile: str | dict[str, Any], shared_dir: str | None
) -> KubeflowTrainerCredentials | str:
    """A saved block's name (a cluster), or by default the local backend, its job
    state beside the data."""
    if credentials:
        return credentials
    root = Path(shared_dir or job_profile(profile).root(LOCAL_DIR)).resolve()
    return KubeflowTrainerCredentials(backend="local", state_dir=str(root / "trainjobs"))


def _stop_trainjobs(flow: Any, flow_run: Any, state: Any) -> None:
    # Cancelling the flow run from the UI or API kills its process: stop its jobs too.
    params = dict(flow_run.parameters or {})
    creds = credentials_for(
        params.get("credentials"), params.get("profile") or "local", params.get("shared_dir")
    )
    stop_flow_run_trainjobs(str(flow_run.id), creds)


@task
def prepare(shared_dir: str, day: int) -> dict[str, Any]:
    """Write the day's train and test sets; return where everything goes."""
    paths = layout(shared_dir, day)
    print(prepare_data(paths["data_dir"], day))
    return {**paths, "day": day}


@task
def evaluate_candidate(model_uri: str, paths: dict[str, Any]) -> dict[str, Any]:
    """The candidate's test metrics, and the promoted model's accuracy on the same
    (today's) test set."""
    metrics = evaluate(model_uri, paths["data_dir"])
    baseline = current_accuracy(paths["registry"], paths["data_dir"])
    print(f"candidate {metrics}, {promoted_note(paths['registry'], baseline)}")
    return {**metrics, "promoted_accuracy": baseline}


@task
def promote_model(model_uri: str, metrics: dict[str, Any], paths: dict[str, Any]) -> dict[str, Any]:
    """Copy the candidate into the registry, with its metrics."""
    kept = {k: metrics[k] for k in ("accuracy", "loss")}
    return promote(model_uri, {**kept, "day": paths["day"]}, paths["registry"])


@flow(name="kf-retraining", log_prints=True, on_cancellation=[_stop_trainjobs])
def retraining(
    day: int | None = None,
    credentials: str | None = None,
    profile: str | dict[str, Any] = "local",
    shared_dir: str | None = None,
) -> dict[str, Any]:
    """Retrain on one day's data and promote the model if it is better.

    Args:
        day: which day's data (default: the day of the run's scheduled start).
        credentials: the name of a saved ``KubeflowTrainerCredentials`` block; none
            runs the job on this machine.
        profile: what the job asks for: ``local``, ``cluster``, or JobProfile fields.
        shared_dir: where data and models go (default: the profile's, else
            ``.kf-trainer/prefect``); shared storage on a cluster.
    """
    job = job_profile(profile)
    when = day if day is not None else day_of(this_flow_run.scheduled_start_time)
    paths = prepare(shared_dir or job.root(LOCAL_DIR), when)
    spec = job.spec(train, {"data_dir": paths["data_dir"], "model_dir": paths["model_dir"]})
    outputs = train_job(spec, credentials_for(credentials, profile, shared_dir))
    # require_result: a job whose return value cannot be read fails the flow saying why.
    model_uri = outputs.require_result()["model_uri"]
    metrics = evaluate_candidate(model_uri, paths)
    if metrics["accuracy"] > metrics["promoted_accuracy"]:
        promote_model(model_uri, metrics, paths)
        decision = "promoted"
    else:
        print("keeping the promoted model: the candidate is not better")
        decision = "kept"
    return {"day": when, "decision": decision, "trainjob": outputs.name, **metrics}


def deployment_parameters(credentials: str | None, profile: str) -> dict[str, Any]:
    """The parameters a scheduled deployment runs with (a cluster's block and profile,
    or nothing: this machine)."""
    return {
        key: value
        for key, value in (("credentials", credentials), ("profile", profile))
        if value not in (None, "local")
    }


class _NotTheServerStopping(logging.Filter):
    """Drops Prefect's "Stopping temporary server on ..." line (logged at exit)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Stopping temporary server")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Retrain once, or serve a daily schedule.")
    parser.add_argument("--day", type=int, help="which day's data (default: today)")
    parser.add_argument("--credentials", help="a saved KubeflowTrainerCredentials block")
    parser.add_argument("--profile", default="local", help="local, cluster, or JSON")
    parser.add_argument("--serve", action="store_true", help="run daily at 03:00 UTC")
    args = parser.parse_args(argv)
    if args.serve:
        retraining.serve(
            name="kf-retraining-daily",
            cron="0 3 * * *",
            parameters=deployment_parameters(args.credentials, args.profile),
            tags=["kubeflow-trainer"],
        )
        return 0
    # Prefect stops its temporary server at exit and logs it, after the summary below:
    # the summary, and its "see it:" command, stay the last lines a user reads.
    logging.getLogger("prefect").addFilter(_NotTheServerStopping())
    outcome = retraining(day=args.day, credentials=args.credentials, profile=args.profile)
    # After Prefect's own logging: what happened, where the model is, how to see the job.
    creds = credentials_for(args.credentials, args.profile, None)
    state_dir = None if isinstance(creds, str) else creds.state_dir
    root = Path(job_profile(args.profile).root(LOCAL_DIR)).resolve()
    promoted = outcome["decision"] == "promoted"
    print(summary(promoted, str(root / "registry"), outcome["trainjob"], state_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
