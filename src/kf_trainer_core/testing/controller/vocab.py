"""Names the simulated controllers use that belong to the test bed alone. The facts
they share with the product — labels, condition types, reasons and messages, event
sources — are in :mod:`kf_trainer_core.k8s.trainjob`; object shapes in
:mod:`kf_trainer_core.k8s.objects`.
"""

from __future__ import annotations

from typing import Any

# The suite's generated launcher (builder.py) reads it; here it says "plain python" (no
# torchrun/mpirun in the simulated pods).
from kf_trainer_core.backends.local._common import LAUNCHER_ENV as LAUNCHER_ENV
from kf_trainer_core.testing.store import JOBS as JOBS

JSON = dict[str, Any]

MULTIKUEUE = "kueue.x-k8s.io/multikueue"
#: Trainer's ContainerTrainerPort (pkg/constants/constants.go): PET_MASTER_PORT.
TORCH_MASTER_PORT = 29500

SIM_NODES = 4  # pods are spread over kf-sim-node-0..3
#: ``nvidia.com/gpu`` each simulated node has (as the control plane's kwok nodes: 8).
NODE_GPUS = 8
LOG_TAIL = 80  # lines kept per pod for terminationMessagePolicy FallbackToLogsOnError
