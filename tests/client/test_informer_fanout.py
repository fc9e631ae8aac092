"""A change reaches only its own waiters, and finished jobs nobody waits for cost a
version string each: the informer's work per event and its memory per finished job do
not grow with the number of other waits or jobs. Counts, never timings."""

from __future__ import annotations

import asyncio
from typing import Any

from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy
from kf_trainer_core.programs import informer as informer_mod
from kf_trainer_core.spec import Annotations, CustomTrainer, Name, Suspend, TrainJobSpec
from kf_trainer_core.testing.population import populate
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

WAITS = 1000


class _CountingSubscribers(dict[str, Any]):
    """The informer's subscriber index, counting every entry it hands out."""

    visits = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.visits += 1
        return super().get(key, default)

    def items(self) -> Any:
        self.visits += len(self)
        return super().items()

    def values(self) -> Any:
        self.visits += len(self)
        return super().values()

    def __iter__(self) -> Any:
        self.visits += len(self)
        return super().__iter__()


class _CountingWaker:
    def __init__(self) -> None:
        self.notified = 0

    def notify(self) -> None:
        self.notified += 1


class _Parked(informer_mod.Informer):
    """An informer whose loop counts as running without one: dispatch is driven by the
    test, as the watch would drive it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._task = True  # type: ignore[assignment]


def _job(name: str, version: int, complete: bool) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return {
        "metadata": {"name": name, "resourceVersion": str(version)},
        "status": {"conditions": conditions},
    }


def test_each_change_visits_only_its_own_subscribers() -> None:
    state = informer_mod.InformerState(TRAINJOBS, "ns")
    informer = _Parked(state, lambda: None, watch_timeout=5, poll_interval=1, policy=DEFAULT_POLICY)
    counting = _CountingSubscribers()
    informer.subscribers = state.wanted = counting
    names = [f"job-{i}" for i in range(WAITS)]
    wakers = {name: _CountingWaker() for name in names}
    for name in names:
        informer.subscribe(name, wakers[name])  # type: ignore[arg-type]
    counting.visits = 0
    # The watch brings one event per job, one at a time: each finishes.
    for version, name in enumerate(names, start=1):
        changes = state.apply_event({"type": "MODIFIED", "object": _job(name, version, True)})
        informer._dispatch(changes)
    # Each change looked up its own key: 1,000 lookups, not 1,000 x 1,000...
    assert counting.visits == WAITS
    # ...and each waiter was woken once, by its own job's change only.
    assert {w.notified for w in wakers.values()} == {1}
    # A change of the informer itself (its loop died, listing forbidden) wakes everyone.
    informer._dispatch([])
    assert {w.notified for w in wakers.values()} == {2}


def test_finished_jobs_nobody_waits_for_are_kept_as_version_strings() -> None:
    state = informer_mod.InformerState(
        TRAINJOBS, "ns", finished=lambda obj: bool(obj["status"]["conditions"])
    )
    state.wanted = {"watched"}
    listing = {
        "metadata": {"resourceVersion": "900"},
        "items": [_job(f"done-{i}", i, True) for i in range(100)]
        + [_job("running", 200, False), _job("watched", 201, True)],
    }
    changes = state.apply_list(listing)
    assert len(changes) == 102
    # No dict per finished job: one version string each, apart from the full objects.
    assert set(state.cache.full) == {"running", "watched"}
    assert state.cache.versions == {f"done-{i}": str(i) for i in range(100)}
    # Read back, a stubbed name still shows its name and version.
    assert state.cache["done-7"] == {"metadata": {"name": "done-7", "resourceVersion": "7"}}
    assert state.objects_for("done-7") == []
    # The waiter of "watched" leaves: its finished job becomes a version string too.
    state.wanted = set()
    state.release("watched")
    assert set(state.cache.full) == {"running"}
    assert state.cache.versions["watched"] == "201"
    # A re-list that finds nothing new reports nothing; a vanished job is reported gone.
    listing["items"] = listing["items"][1:]
    changes = state.apply_list(listing)
    assert [(c.name, c.obj) for c in changes] == [("done-0", None)]


def _train() -> int:
    return 1


async def test_async_waits_are_each_offered_their_own_jobs_changes(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    """Over HTTP: 100 of the suite's jobs are resumed and finish while 100 waits and 1,000
    finished jobs are in the shared informer: each change is offered to its own waiter
    only, and the finished jobs stay version strings."""
    populate(kube.store, "default", 1000, prefix="ours-old", suite=True, program_bytes=256)
    fast = RetryPolicy(attempts=6, base=0.02, cap=0.2)
    async with AsyncTrainerClient(k8s_config, retry=fast) as client:
        key = client._informer_key("trainjobs")
        registry = informer_mod._registries.setdefault(asyncio.get_running_loop(), {})
        # The shared informer is made before any wait, so that its index counts.
        informer = informer_mod.informer(
            key,
            lambda: informer_mod.Informer(
                client._jobs_state(), client._new_api, **client._informer_timing()
            ),
        )
        counting = _CountingSubscribers()
        informer.subscribers = informer.state.wanted = counting
        changes = 0
        apply_event = informer.state.apply_event

        def counted(event: Any) -> list[informer_mod.Change]:
            nonlocal changes
            found = apply_event(event)
            changes += len(found)
            return found

        informer.state.apply_event = counted  # type: ignore[method-assign]
        names = []
        for i in range(100):
            spec = TrainJobSpec(
                trainer=CustomTrainer(_train),
                options=[
                    Name(f"fan-{i}"),
                    Suspend(),
                    Annotations({SCENARIO_ANNOTATION: "success"}),
                ],
            )
            names.append((await client.submit(spec)).job.name)
        waits = asyncio.gather(*(client.wait(n, timeout=120) for n in names))
        while len(counting) < len(names) or not informer.synced:
            await asyncio.sleep(0.05)
        # Every wait listens: the jobs run now, their changes come by the watch.
        for name in names:
            kube.store.patch(TRAINJOBS, "default", name, {"spec": {"suspend": False}})
        jobs = await waits
        assert all(job.status is JobState.COMPLETE for job, _ in jobs)
        assert registry[key] is informer
        assert changes >= 2 * len(names)  # each job changed at least twice while watched
        # One lookup per change (plus the initial list's and a few wake-alls), however
        # many other waits there are: not (changes x waits).
        assert counting.visits <= changes + 1000 + 3 * len(names)
        versions = informer.state.cache.versions
        assert len(versions) >= 1000
        assert all(isinstance(v, str) for v in versions.values())
