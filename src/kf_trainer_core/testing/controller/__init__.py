"""A simulated Kubeflow Trainer controller for the Kubernetes-API test server.

:class:`TrainerController` makes the in-process :class:`~kf_trainer_core.testing.store.Store`
behave like a cluster that runs Kubeflow Trainer v2.3.0, JobSet v0.12, the Job
controller, the scheduler and kubelets:

* a TrainJob gets a JobSet built from its (Cluster)TrainingRuntime (trainer and
  initializer overrides, ML-policy environment, runtime patches), owned by the TrainJob;
* the JobSet gets ``batch/v1`` Jobs (stored as :data:`JOBS`), the Jobs get Pods that go
  ``Pending`` -> ``Running`` -> ``Succeeded``/``Failed`` with realistic conditions,
  container states, logs (:class:`~kf_trainer_core.testing.store.PodLogs`) and core/v1
  Events;
* statuses flow back up: Job status, JobSet ``replicatedJobsStatus``/conditions, and the
  TrainJob's ``conditions`` (only ``Suspended``, ``Complete``, ``Failed``, with the reasons
  and messages the real controllers use), ``jobsStatus`` and ``trainerStatus``.

How each TrainJob behaves is scripted by a :class:`~kf_trainer_core.testing.scenarios.Scenario`
(annotation ``testing.kf-trainer-suite/scenario``, :meth:`TrainerController.script`, or
:attr:`TrainerController.default_scenario`); ``executor="exec"`` runs the trainer
container's command for real as a local subprocess.

Design: one worker thread owns all simulation state. Store changes (via
:meth:`Store.subscribe`) and finished subprocesses post work items to it; timed steps
sit in one heap. Scripted jobs cost no threads, so hundreds run concurrently.
Everything the worker does is guarded: an object deleted meanwhile is ignored, an
unexpected exception is logged and the worker carries on.
"""

from __future__ import annotations

from kf_trainer_core.testing.controller.simulator import TrainerController
from kf_trainer_core.testing.controller.vocab import JOBS, LAUNCHER_ENV, TORCH_MASTER_PORT
from kf_trainer_core.testing.crd import find_upstream
from kf_trainer_core.testing.runtimes import install_runtimes
from kf_trainer_core.testing.scenarios import (
    PRESETS,
    SCENARIO_ANNOTATION,
    PodContext,
    PodResult,
    Scenario,
    Step,
)

__all__ = [
    "JOBS",
    "LAUNCHER_ENV",
    "PRESETS",
    "SCENARIO_ANNOTATION",
    "TORCH_MASTER_PORT",
    "PodContext",
    "PodResult",
    "Scenario",
    "Step",
    "TrainerController",
    "find_upstream",
    "install_runtimes",
]
