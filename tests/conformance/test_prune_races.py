"""Prune racing a rerun of the same identity (issue 33, finding 4), on the test bed, the
real control plane and the local backend.

Before: prune listed the identity's attempt 0 (Failed); a rerun created attempt 1; prune
deleted attempt 0 (its listed uid and version still held). Attempt 0's name is the
identity's lock, so the next submit created attempt 0 again: two jobs training for one
identity. Now prune reads the identity again just before deleting its attempt 0, a rerun
claims its attempt on attempt 0 before creating it (which also refuses a delete already
under way), and attempt 0 goes last. The rerun is played from prune's own request hook,
just before each of the calls prune makes about attempt 0, so every interleaving is
tried.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conformance_support import FAST, make_cluster, until

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.k8s.calls import Delete, Get, Patch
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from raw_calls import aside

#: Before which of prune's calls about attempt 0 the rerun runs.
MOMENTS = ("read", "dry-run", "suspend", "delete")


def _moment(call: Any) -> str | None:
    if isinstance(call, Get):
        return "read"
    if isinstance(call, Delete):
        return "dry-run" if call.dry_run else "delete"
    if isinstance(call, Patch):
        return "suspend"
    return None


def failing() -> None:
    raise ValueError("attempt failed")


@pytest.fixture(params=["testbed", pytest.param("real", marks=pytest.mark.control_plane), "local"])
def where(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[KubernetesConfig | LocalConfig, TrainJobSpec]]:
    """A backend configuration and a spec whose jobs fail at once."""
    if request.param == "local":
        spec = TrainJobSpec(trainer=CustomTrainer(failing))
        yield LocalConfig(state_dir=str(tmp_path / "state")), spec
        return
    for cluster in make_cluster(request, request.param, tmp_path):
        yield cluster.config(), cluster.spec("fail", runtime=cluster.fast_fail_runtime())


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_rerun_during_prune_keeps_the_identity_to_one_live_line(
    where: tuple[KubernetesConfig | LocalConfig, TrainJobSpec], moment: str
) -> None:
    config, spec = where
    identity = f"dag/train/race-{moment}"
    with TrainerClient(config, retry=FAST) as other:
        first = other.submit(spec, identity=identity).job.name
        other.wait_for_job_status(first, "Failed", timeout=120)
        played: list[str] = []

        def rerun(call: Any) -> None:
            if played or getattr(call, "name", None) != first or _moment(call) != moment:
                return
            # The hook runs on the clients' loop: the rerun goes through a loop of its own.
            submitted = aside(other, lambda rerunner: rerunner.submit(spec, identity=identity))
            played.append(submitted.job.name)

        with TrainerClient(config, retry=FAST, request_hook=rerun) as pruner:
            report = pruner.prune_jobs(older_than=0, identity_prefix=identity)
        if not played:
            pytest.skip(f"prune made no {moment} call about attempt 0")
        (second,) = played
        assert second != first  # the rerun made attempt 1
        assert first not in report.deleted, report.lines()
        # The lock is still there: the next rerun adopts attempt 1 (or the one after it),
        # never creating attempt 0 again beside it.
        again = other.submit(spec, identity=identity, fresh_after_failure=False)
        assert (again.job.name, again.created) == (second, False)
        names = {j.name for j in other.list_jobs() if j.identity == identity}
        assert names == {first, second}
        until(lambda: other.get_job(second).status is JobState.FAILED, 120, "attempt 1 failed")
