"""Issue 36: a ``wait`` is followed from the public call to the HTTP request in a few
frames of the suite's own code — counted here on a real traceback, as
``docs/architecture.md`` ("From a call to the wire") counts them.

The test server refuses the GET of the job (403), so the error is raised by the
transport where the request was made and travels up through every frame in between; a
job not yet in the shared informer's cache is read by name, the path the document
draws. Frames are counted whose file lies in ``kf_trainer_core``.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

import kf_trainer_core
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.testing.server import KubeTestServer

PACKAGE = Path(kf_trainer_core.__file__).resolve().parent

#: The async path on the portal's loop (AsyncTrainerClient.wait to the request) and
#: what the sync face adds (TrainerClient.wait, Portal.call): the document's table.
ON_THE_LOOP = 6
SYNC_FACE = 2


def _ours(exc: BaseException) -> list[str]:
    """The suite's own frames of ``exc``'s traceback, outermost first."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [
        f"{Path(f.filename).name}:{f.name}"
        for f in frames
        if Path(f.filename).resolve().is_relative_to(PACKAGE)
    ]


def _refuse_reads(server: KubeTestServer) -> None:
    # Only the read by name is refused: the informer still lists and watches.
    server.faults.forbid("get", "trainjobs")


def test_an_async_wait_reaches_the_request_in_six_frames(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    import asyncio

    _refuse_reads(kube)

    async def main() -> BaseException:
        async with AsyncTrainerClient(k8s_config) as client:
            with pytest.raises(ApiError) as caught:
                await client.wait("not-listed-yet", timeout=30)
            return caught.value

    ours = _ours(asyncio.run(main()))
    assert ours[0] == "aio.py:wait", ours
    assert ours[-1] == "transport.py:perform", ours
    assert len(ours) <= ON_THE_LOOP, ours


def test_a_sync_wait_adds_the_sync_face_and_the_portal(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    _refuse_reads(kube)
    with TrainerClient(k8s_config) as client, pytest.raises(ApiError) as caught:
        client.wait("not-listed-yet", timeout=30)
    ours = _ours(caught.value)
    assert ours[:2] == ["sync.py:wait", "portal.py:call"], ours
    assert ours[-1] == "transport.py:perform", ours
    assert len(ours) <= ON_THE_LOOP + SYNC_FACE, ours
