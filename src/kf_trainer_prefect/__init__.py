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

from __future__ import annotations

from typing import TYPE_CHECKING

from kf_trainer_core.tasks import lazy_names, require

require("prefect", "prefect", "kf_trainer_prefect", "Prefect 3")

# Names resolve on first use (PEP 562): importing one module of the package
# (``kf_trainer_prefect.tasks``) must not import the others — the flows build Prefect
# flows, whose parameter schemas load pydantic.v1, and the credentials block loads the
# core's configuration models.
if TYPE_CHECKING:
    from kf_trainer_prefect.credentials import KubeflowTrainerCredentials
    from kf_trainer_prefect.decorators import atrainjob_task, trainjob_task
    from kf_trainer_prefect.flows import (
        prune_trainjobs,
        prune_trainjobs_flow,
        stop_flow_run_trainjobs,
        trainjob_cleanup_hook,
        trainjob_flow,
    )
    from kf_trainer_prefect.retries import retry_infrastructure_failures, retry_on_classes
    from kf_trainer_prefect.tasks import (
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

_LAZY = {
    "KubeflowTrainerCredentials": "kf_trainer_prefect.credentials",
    "acancel_trainjob": "kf_trainer_prefect.tasks",
    "aget_trainjob_outputs": "kf_trainer_prefect.tasks",
    "arun_trainjob": "kf_trainer_prefect.tasks",
    "astream_trainjob_logs": "kf_trainer_prefect.tasks",
    "asubmit_trainjob": "kf_trainer_prefect.tasks",
    "atrainjob_task": "kf_trainer_prefect.decorators",
    "await_trainjob": "kf_trainer_prefect.tasks",
    "cancel_trainjob": "kf_trainer_prefect.tasks",
    "get_trainjob_outputs": "kf_trainer_prefect.tasks",
    "prune_trainjobs": "kf_trainer_prefect.flows",
    "prune_trainjobs_flow": "kf_trainer_prefect.flows",
    "retry_infrastructure_failures": "kf_trainer_prefect.retries",
    "retry_on_classes": "kf_trainer_prefect.retries",
    "run_trainjob": "kf_trainer_prefect.tasks",
    "stop_flow_run_trainjobs": "kf_trainer_prefect.flows",
    "stream_trainjob_logs": "kf_trainer_prefect.tasks",
    "submit_trainjob": "kf_trainer_prefect.tasks",
    "trainjob_cleanup_hook": "kf_trainer_prefect.flows",
    "trainjob_flow": "kf_trainer_prefect.flows",
    "trainjob_task": "kf_trainer_prefect.decorators",
    "wait_trainjob": "kf_trainer_prefect.tasks",
}


# ``prefect block register -m kf_trainer_prefect`` finds the block by listing the
# module's members: ``__dir__`` lists the lazy names too.
__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
