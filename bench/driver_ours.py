"""Our side of the benchmarks, run in a separate interpreter so that it never shares a
GIL with the test server: ``python -m bench.driver_ours MODE CONFIG.json``.

It talks to the orchestrator (:mod:`bench.common`) through stdout: ``READY`` once every
wait has been issued, then one ``RESULT {json}`` line. Times are ``time.time()`` so that
they compare with the test server's clock (same machine, other process).

Modes: ``wait-sync`` (a thread per job, one shared :class:`TrainerClient`),
``wait-async`` (a task per job, one :class:`AsyncTrainerClient` — the Airflow triggerer
case), ``requests`` (submit with an identity, then wait), ``submit-sync`` /
``submit-async`` (creation throughput) and ``local`` (one trivial job on the local
backend). The SDK-style async pollers are in :mod:`bench.driver_poll`, which does not
import this suite (its memory must not include ours).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the dev group

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec

SCENARIO_ANNOTATION = "testing.kf-trainer-suite/scenario"
Config = dict[str, Any]


def emit(tag: str, payload: Any = None) -> None:
    """One protocol line on stdout."""
    text = tag if payload is None else f"{tag} {json.dumps(payload)}"
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def train_noop() -> dict[str, int]:
    """The trivial training function."""
    print("training: nothing to do")
    return {"ok": 1}


def k8s_config(cfg: Config) -> KubernetesConfig:
    return KubernetesConfig(kubeconfig=cfg["kubeconfig"], namespace=cfg["namespace"])


def job_spec(scenario: dict[str, Any]) -> TrainJobSpec:
    return TrainJobSpec(
        trainer=CustomTrainer(train_noop),
        options=[Annotations({SCENARIO_ANNOTATION: json.dumps(scenario)})],
    )


# ----------------------------------------------------------------------------- waits


def mode_wait_sync(cfg: Config) -> dict[str, Any]:
    names: list[str] = cfg["names"]
    returned: dict[str, float] = {}
    errors: dict[str, str] = {}
    with TrainerClient(k8s_config(cfg)) as client:
        # One call first, so that the baseline memory includes the client's imports
        # and connection pool, as the SDK-style pollers' does.
        client.get_runtime("torch-distributed")
        rss_before = rss_bytes()

        def wait(name: str) -> None:
            try:
                client.wait(name, timeout=cfg["timeout"])
                returned[name] = time.time()
            except Exception as exc:  # reported, not raised: one failure must not hide the rest
                errors[name] = repr(exc)

        threads = [threading.Thread(target=wait, args=(n,), daemon=True) for n in names]
        for t in threads:
            t.start()
        emit("READY")
        for t in threads:
            t.join()
    return {"returned": returned, "errors": errors, "rss_before": rss_before}


async def _wait_async(cfg: Config) -> dict[str, Any]:
    names: list[str] = cfg["names"]
    returned: dict[str, float] = {}
    errors: dict[str, str] = {}
    async with AsyncTrainerClient(k8s_config(cfg)) as client:
        await client.get_runtime("torch-distributed")  # see mode_wait_sync
        rss_before = rss_bytes()

        async def wait(name: str) -> None:
            try:
                await client.wait(name, timeout=cfg["timeout"])
                returned[name] = time.time()
            except Exception as exc:
                errors[name] = repr(exc)

        tasks = [asyncio.create_task(wait(n)) for n in names]
        await asyncio.sleep(0.2)  # let every task subscribe before saying so
        emit("READY")
        await asyncio.gather(*tasks)
    return {"returned": returned, "errors": errors, "rss_before": rss_before}


def mode_wait_async(cfg: Config) -> dict[str, Any]:
    return asyncio.run(_wait_async(cfg))


# ----------------------------------------------------------------------------- requests


def mode_requests(cfg: Config) -> dict[str, Any]:
    """A warm-up job (the process's one-off costs: runtime lookup, the informers' list
    and watch), then each group of jobs in turn, its jobs concurrently; every job is
    submitted with an identity and waited for. Reports the time window of each part."""
    with TrainerClient(k8s_config(cfg)) as client:

        def run_group(jobs: list[dict[str, Any]]) -> dict[str, Any]:
            names: dict[str, str] = {}
            errors: dict[str, str] = {}

            def run(job: dict[str, Any]) -> None:
                key = job["key"]
                try:
                    spec = job_spec({"preset": "success", "duration": job["duration"]})
                    name = client.submit(spec, identity=("bench", "requests", key)).job.name
                    names[key] = name
                    client.wait(name, timeout=cfg["timeout"])
                except Exception as exc:
                    errors[key] = repr(exc)

            start = time.time()
            threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return {"start": start, "end": time.time(), "names": names, "errors": errors}

        setup = run_group([cfg["warmup"]])
        groups = [run_group(g["jobs"]) for g in cfg["groups"]]
    return {"setup": setup, "groups": groups}


# ----------------------------------------------------------------------------- submit


def level_result(concurrency: int, jobs: int, seconds: float, errors: list[str]) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "jobs": jobs,
        "seconds": seconds,
        "errors": errors[:5],
        "error_count": len(errors),
    }


def submit_level_sync(
    client: TrainerClient,
    spec: TrainJobSpec,
    concurrency: int,
    names: list[str],
    identity: bool = False,
) -> dict[str, Any]:
    errors: list[str] = []

    def submit(name: str) -> None:
        try:
            if identity:
                # As an orchestrator submits: a fresh identity per job.
                client.submit(spec, identity=("bench", "submit", name))
            else:
                client.submit(spec, name=name)
        except Exception as exc:
            errors.append(repr(exc))

    with ThreadPoolExecutor(concurrency) as pool:
        start = time.perf_counter()
        list(pool.map(submit, names))
        elapsed = time.perf_counter() - start
    return level_result(concurrency, len(names), elapsed, errors)


def mode_submit_sync(cfg: Config) -> dict[str, Any]:
    spec = job_spec({"preset": "success"})
    with TrainerClient(k8s_config(cfg)) as client:
        # A per-client cost, not a per-job one: the runtime lookup and a first submit
        # (connection set-up, lazy imports) happen before the clock starts.
        client.get_runtime("torch-distributed")
        client.submit(spec, name=cfg["warmup_name"])
        levels = [
            submit_level_sync(
                client,
                spec,
                int(level["concurrency"]),
                level["names"],
                identity=bool(cfg.get("identity")),
            )
            for level in cfg["levels"]
        ]
    return {"levels": levels}


async def submit_level_async(
    client: AsyncTrainerClient, spec: TrainJobSpec, concurrency: int, names: list[str]
) -> dict[str, Any]:
    queue = list(reversed(names))
    errors: list[str] = []

    async def worker() -> None:
        while queue:
            name = queue.pop()
            try:
                await client.submit(spec, name=name)
            except Exception as exc:
                errors.append(repr(exc))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return level_result(concurrency, len(names), elapsed, errors)


async def _submit_async(cfg: Config) -> dict[str, Any]:
    spec = job_spec({"preset": "success"})
    async with AsyncTrainerClient(k8s_config(cfg)) as client:
        await client.get_runtime("torch-distributed")  # see mode_submit_sync
        await client.submit(spec, name=cfg["warmup_name"])
        levels = [
            await submit_level_async(client, spec, int(level["concurrency"]), level["names"])
            for level in cfg["levels"]
        ]
    return {"levels": levels}


def mode_submit_async(cfg: Config) -> dict[str, Any]:
    return asyncio.run(_submit_async(cfg))


# ----------------------------------------------------------------------------- local


def mode_local(cfg: Config) -> dict[str, Any]:
    """One trivial job on the local backend, or on the container backend when ``cfg``
    has ``container`` (ContainerConfig settings) — the same call, another config."""
    from kf_trainer_core.config import parse_backend

    state_dir = cfg.get("state_dir") or tempfile.mkdtemp(prefix="kf-bench-local-")
    backend = {"backend": "local", "state_dir": state_dir}
    if cfg.get("container"):
        backend.update(backend="container", **cfg["container"])
    start = time.time()
    status = "unknown"
    result: Any = None
    error = None
    try:
        with TrainerClient(parse_backend(backend)) as client:
            spec = TrainJobSpec(trainer=CustomTrainer(train_noop))
            if cfg.get("runtime"):
                spec = TrainJobSpec(runtime=cfg["runtime"], trainer=CustomTrainer(train_noop))
            name = client.submit(spec).job.name
            job, result = client.wait(name, timeout=cfg["timeout"])
            status = job.status.value
    except Exception as exc:
        error = repr(exc)
    return {"status": status, "result": result, "error": error, "seconds": time.time() - start}


MODES = {
    "wait-sync": mode_wait_sync,
    "wait-async": mode_wait_async,
    "requests": mode_requests,
    "submit-sync": mode_submit_sync,
    "submit-async": mode_submit_async,
    "local": mode_local,
}


def main() -> None:
    mode, config_path = sys.argv[1], sys.argv[2]
    with open(config_path) as fh:
        cfg = json.load(fh)
    profile = os.environ.get("KF_BENCH_PROFILE")
    if profile:
        # A cProfile of the whole mode, written to that file (for finding where the
        # time goes; never used for figures).
        import cProfile

        profiler = cProfile.Profile()
        result = profiler.runcall(MODES[mode], cfg)
        profiler.dump_stats(profile)
    else:
        result = MODES[mode](cfg)
    result["rss_after"] = rss_bytes()
    times = psutil.Process().cpu_times()
    result["cpu_after"] = times.user + times.system
    emit("RESULT", result)


if __name__ == "__main__":
    main()
