"""KFP's step components refuse an empty or invalid ``job_name`` before any request
(issue 14, item 1)."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core.errors import InvalidNameError
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_kfp.task import run_component


def _direct_requests(server: KubeTestServer) -> int:
    """Requests other than lists and watches (other tests' lingering informers may
    still list and watch; nothing else runs in the background)."""
    return sum(1 for r in server.requests.records if r.verb not in ("list", "watch"))


@pytest.mark.parametrize("kind", ["wait_step", "outputs", "cancel"])
@pytest.mark.parametrize("bad", [" ", "Bad_Name", "a/b"])
def test_components_refuse_bad_job_names(
    kind: str, bad: str, backend: dict[str, Any], server: KubeTestServer
) -> None:
    before = _direct_requests(server)
    inputs = {"job_name": bad, "backend_config": backend, "namespace": "default"}
    with pytest.raises(InvalidNameError, match=r"job_name=.*Fix: "):
        run_component(kind, inputs, {})
    assert _direct_requests(server) == before
