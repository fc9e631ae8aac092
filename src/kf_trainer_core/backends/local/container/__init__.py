"""The container backend: the local backend's TrainJobs, with each pod a container.

>>> client = TrainerClient(ContainerConfig(image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"))
>>> name = client.train(trainer=CustomTrainer(train, num_nodes=2))

Everything but the pods is the local backend's (:mod:`kf_trainer_core.backends.local`): the
state directory, the API the client talks to, the detached supervisor per job, the
Trainer's conditions, events and pod statuses, logs as files another process can
follow. The job's kubelet runs its pods through a *pod runner*
(:class:`~kf_trainer_core.backends.local.kubelet.PodRunner`): processes on this machine for
:class:`~kf_trainer_core.config.LocalConfig`
(:class:`~kf_trainer_core.backends.local.kubelet.ProcessRunner`), containers of a Docker
or Podman engine for :class:`~kf_trainer_core.config.ContainerConfig`
(:class:`~kf_trainer_core.backends.local.container.runner.ContainerRunner`).

What a container gets, as a cluster's pod would:

* the image: ``ContainerConfig.image``, else the TrainJob's, else the runtime's;
* the trainer's command and arguments exactly as the TrainJob says (a
  ``CustomTrainer`` runs the generated ``bash -c`` script: ``pip install`` of
  ``packages_to_install`` and ``torchrun`` happen inside the container);
* the Trainer's environment (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` =
  127.0.0.1, ``PET_MASTER_PORT`` = a free port per job, ``JOB_COMPLETION_INDEX``), the
  TrainJob's env and Secrets, ``ContainerConfig.env``;
* the job's workspace at ``/workspace`` (initializer containers fill
  ``/workspace/dataset`` and ``/workspace/model``), and for MPI runtimes a hostfile
  at ``/etc/mpi/hostfile``;
* the host network: nodes rendezvous over loopback, never a bridge network;
* CPU, memory and GPU limits from ``resources_per_node``.

Containers and the engine are found by labels carrying the job's uid, so a delete, a
cancel, a crashed supervisor's successor or a finished job removes exactly what the job
started.
"""

from __future__ import annotations

#: Labels on every container the backend starts.
LABEL_PREFIX = "kf-trainer.kubeflow.org/"
JOB_UID_LABEL = LABEL_PREFIX + "job-uid"
JOB_NAME_LABEL = LABEL_PREFIX + "job-name"
NAMESPACE_LABEL = LABEL_PREFIX + "namespace"
POD_LABEL = LABEL_PREFIX + "pod"

__all__ = ["JOB_NAME_LABEL", "JOB_UID_LABEL", "LABEL_PREFIX", "NAMESPACE_LABEL", "POD_LABEL"]
