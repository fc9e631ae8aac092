"""Everything a ``TrainJobTrigger`` needs to wait or cancel, imported together.

The trigger imports this module in a worker thread when its first instance runs
(:func:`kf_trainer_core.base.offloop.imported`): imported on the triggerer's event loop,
these modules (the hook, the client, the Kubernetes library) would stop every trigger
of the triggerer for a quarter of a second or, on a busy machine, for seconds.
"""

from __future__ import annotations

import contextlib
import importlib

#: Heaviest last: each also brings what it imports.
MODULES = (
    "kf_trainer_core.errors",
    "kf_trainer_core.client",
    "kf_trainer_core.tasks.step_waits",
    "kf_trainer_core.tasks.lifecycle",
    "kf_trainer_core.tasks.jobs",
    "kf_trainer_airflow.hooks.trainer",
)

for _name in MODULES:
    importlib.import_module(_name)

with contextlib.suppress(ImportError):  # the local backend needs no Kubernetes library
    importlib.import_module("kubernetes_asyncio.client")
