"""kf-trainer-suite for Prefect: Kubeflow Trainer TrainJobs as native Prefect tasks.

* :class:`KubeflowTrainerCredentials`: the block that says where jobs run (a cluster
  or this machine); ``prefect block register -m kf_trainer_prefect`` registers it.
* :func:`run_trainjob` (submit, stream logs, wait, outputs in one task) and its steps
  :func:`submit_trainjob`, :func:`wait_trainjob`, :func:`stream_trainjob_logs`,
  :func:`get_trainjob_outputs`, :func:`cancel_trainjob`; each has an ``a``-prefixed
  async twin.
* :func:`trainjob_task`: a decorator that runs a Python function as a ``CustomTrainer``
  TrainJob and returns its return value.
* :func:`trainjob_cleanup_hook` for ``on_cancellation`` / ``on_crashed``, and
  :func:`trainjob_flow`, a flow to serve for scheduled retraining.
* :func:`retry_infrastructure_failures` / :func:`retry_on_classes`: ``retry_condition_fn``
  predicates that retry only the failure classes a retry can fix.

Importing this package does not import a Kubernetes client library: the tasks load the
client when they run.
"""

from kf_trainer_core.base.extras import require

require("prefect", "prefect", "kf_trainer_prefect", "Prefect 3")

from kf_trainer_prefect.credentials import KubeflowTrainerCredentials  # noqa: E402
from kf_trainer_prefect.decorators import atrainjob_task, trainjob_task  # noqa: E402
from kf_trainer_prefect.flows import (  # noqa: E402
    prune_trainjobs,
    prune_trainjobs_flow,
    stop_flow_run_trainjobs,
    trainjob_cleanup_hook,
    trainjob_flow,
)
from kf_trainer_prefect.retries import retry_infrastructure_failures, retry_on_classes  # noqa: E402
from kf_trainer_prefect.tasks import (  # noqa: E402
    acancel_trainjob,
    aget_trainjob_outputs,
    arun_trainjob,
    astream_trainjob_logs,
    asubmit_trainjob,
    await_trainjob,
    cancel_trainjob,
    get_trainjob_outputs,
    run_trainjob,
    stream_trainjob_logs,
    submit_trainjob,
    wait_trainjob,
)

__all__ = [
    "KubeflowTrainerCredentials",
    "acancel_trainjob",
    "aget_trainjob_outputs",
    "arun_trainjob",
    "astream_trainjob_logs",
    "asubmit_trainjob",
    "atrainjob_task",
    "await_trainjob",
    "cancel_trainjob",
    "get_trainjob_outputs",
    "prune_trainjobs",
    "prune_trainjobs_flow",
    "retry_infrastructure_failures",
    "retry_on_classes",
    "run_trainjob",
    "stop_flow_run_trainjobs",
    "stream_trainjob_logs",
    "submit_trainjob",
    "trainjob_cleanup_hook",
    "trainjob_flow",
    "trainjob_task",
    "wait_trainjob",
]
