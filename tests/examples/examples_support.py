"""Helpers shared by the example tests (a module of its own: test files never import
conftest)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"

#: The profile the examples run with on the Kubernetes-API test server: the local one,
#: plus the annotation that makes the simulated Trainer really run the training
#: function (preset ``exec``), so that real metrics decide the branch.
EXEC_PROFILE: dict[str, Any] = {
    "options": [{"type": "Annotations", "annotations": {SCENARIO_ANNOTATION: "exec"}}]
}

#: Two days whose data differ enough that a model of the first loses to a fresh one on
#: the second (the data drift by day).
DAY, DRIFTED_DAY = 40, 43


def registry(shared_dir: Path) -> dict[str, Any] | None:
    """The promoted model's metrics (``None``: nothing promoted yet)."""
    path = shared_dir / "registry" / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else None


@contextmanager
def local_jobs(state_dir: Path) -> Iterator[TrainerClient]:
    """A client of the local backend in ``state_dir``; afterwards every job there is
    deleted, and none of their processes may be left."""
    from kf_trainer_core.backends.local.procs import processes_of_job

    with TrainerClient(LocalConfig(state_dir=str(state_dir))) as client:
        try:
            yield client
        finally:
            jobs = client.list_jobs()
            for job in jobs:
                client.delete_job(job.name)
            deadline = time.monotonic() + 30
            while any(processes_of_job(str(job.uid)) for job in jobs):
                assert time.monotonic() < deadline, "processes of deleted jobs still run"
                time.sleep(0.1)


def assert_no_secret(secret: str, *texts: Any) -> None:
    """``secret`` appears in none of ``texts`` (anything: it is rendered as JSON or
    text)."""
    for text in texts:
        rendered = text if isinstance(text, str) else json.dumps(text, default=str)
        assert secret not in rendered
