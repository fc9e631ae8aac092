"""Fill a test server's namespace with the TrainJobs real namespaces accumulate.

Kubeflow Trainer has no TTL: every finished TrainJob stays, each embedding its
training program (tens of KiB). :func:`populate` writes such jobs straight into the
store — as the apiserver would hold them after their runs, with their status already
``Complete`` — so that tests and benchmarks can put thousands in a namespace in
seconds instead of thousands of HTTP creates. Clients see them exactly as objects the
apiserver serves: the same store answers their lists and watches.

Jobs made "by others" (the Kubeflow SDK, kubectl, notebooks) carry no label of this
suite; ``suite=True`` makes jobs as this suite labels them
(``app.kubernetes.io/managed-by=kf-trainer-suite``).
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from kf_trainer_core.testing.store import Store, format_timestamp

__all__ = ["finished_trainjob", "populate"]

_FILLER = "    loss = loss * 0.99 + step * 1e-6  # one line of a training loop\n"


def _program(size: int) -> str:
    """Python source of about ``size`` bytes (what the SDK embeds in ``trainer.command``)."""
    lines = ["def train():", "    loss = 1.0", "    for step in range(1000):"]
    text = "\n".join(lines) + "\n"
    body = _FILLER * max(1, (size - len(text)) // len(_FILLER) + 1)
    return (text + body)[:size]


def finished_trainjob(
    name: str,
    *,
    program_bytes: int = 20 * 1024,
    suite: bool = False,
    failed: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A TrainJob as it stands after its run: its program in the trainer's command, its
    ``Complete`` (or ``Failed``) condition and its steps' status."""
    now = format_timestamp()
    all_labels = dict(labels or {})
    if suite:
        all_labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    condition = "Failed" if failed else "Complete"
    return {
        "apiVersion": TRAINJOBS.api_version,
        "kind": TRAINJOBS.kind,
        "metadata": {"name": name, "labels": all_labels},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {
                "numNodes": 1,
                "command": ["bash", "-c", f"python - <<'EOF'\n{_program(program_bytes)}\nEOF"],
            },
        },
        "status": {
            "conditions": [
                {
                    "type": condition,
                    "status": "True",
                    "reason": "JobsFailed" if failed else "JobsCompleted",
                    "message": "jobset " + ("failed" if failed else "completed"),
                    "lastTransitionTime": now,
                }
            ],
            "jobsStatus": [
                {
                    "name": "node",
                    "ready": 0,
                    "succeeded": 0 if failed else 1,
                    "failed": 1 if failed else 0,
                    "active": 0,
                    "suspended": 0,
                }
            ],
        },
    }


def populate(
    store: Store,
    namespace: str,
    count: int,
    *,
    prefix: str = "others",
    program_bytes: int = 20 * 1024,
    suite: bool = False,
) -> list[str]:
    """Store ``count`` finished TrainJobs named ``{prefix}-{i}`` in ``namespace``;
    return their names. Written as the objects an apiserver holds (uid, version,
    timestamps set by the store); the simulated controller takes them for finished."""
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        store.create(
            TRAINJOBS,
            finished_trainjob(name, program_bytes=program_bytes, suite=suite),
            namespace=namespace,
        )
    return names
