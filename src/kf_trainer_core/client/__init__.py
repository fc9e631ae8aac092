"""``AsyncTrainerClient`` and ``TrainerClient``: the Kubeflow SDK's client surface,
idempotent and event-driven, over a real cluster or this machine.

>>> client = TrainerClient()                                  # kubeconfig / in-cluster
>>> name = client.train(trainer=CustomTrainer(train), identity=("dag", "task", "run"))
>>> job = client.wait_for_job_status(name)                    # one shared watch
>>> client.get_job_outputs(name).result                       # the function's return

:class:`AsyncTrainerClient` is the client: each method awaits the operations of
:mod:`kf_trainer_core.programs` over one connection (:class:`~kf_trainer_core.k8s.api.Api`).
:class:`TrainerClient` is the same client behind the process's portal
(:mod:`kf_trainer_core.base.portal`): each of its methods is one line that runs the async
method there, so that sync callers — threads, forked workers, a notebook cell inside a
running event loop — share one connection and one watch per namespace.
"""

from kf_trainer_core.client.aio import AsyncTrainerClient, CancelAction, Submitted
from kf_trainer_core.client.sync import TrainerClient

__all__ = ["AsyncTrainerClient", "CancelAction", "Submitted", "TrainerClient"]
