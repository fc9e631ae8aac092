"""The labels and annotations the suite puts on every TrainJob it builds, once.

Standard library only: the status readers (and so every sensor, trigger and waiting
task) need these names without importing the builder and the spec models behind it
(``BENCHMARKS.md``, import cost). :mod:`kf_trainer_core.manifest.builder` writes them and
re-exports them under the same names.
"""

from __future__ import annotations

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kf-trainer-suite"
#: A digest of the orchestrator identity (label values are short and restricted).
IDENTITY_LABEL = "kf-trainer-suite/identity"
#: The orchestrator identity itself.
IDENTITY_ANNOTATION = "kf-trainer-suite/identity"
SPEC_HASH_ANNOTATION = "kf-trainer-suite/spec-hash"
ATTEMPT_ANNOTATION = "kf-trainer-suite/attempt"
#: On attempt 0 (the identity's lock): ``"<attempt> <unix seconds>"``, written by a
#: rerun just before it creates that later attempt, so that a prune racing it keeps
#: the lock (docs/safety.md).
CLAIM_ANNOTATION = "kf-trainer-suite/attempt-claimed"
#: Set (to :data:`PROGRESS_FROM_LOG`) on jobs whose function can report progress: rank 0
#: prints it in node-0's log, where the waiting side looks for it when the cluster has
#: no status server.
PROGRESS_ANNOTATION = "kf-trainer-suite/progress"
PROGRESS_FROM_LOG = "log"
#: On a local backend's pod: the GPUs its node was given (``0,1``), as
#: ``CUDA_VISIBLE_DEVICES`` and the container engine name them.
GPUS_ANNOTATION = "kf-trainer-suite/gpus"
