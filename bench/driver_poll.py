"""The SDK-style alternative to our shared watch, in one event loop: a task per job
that repeats, every 2 s, the four requests the Kubeflow SDK's ``wait_for_job_status``
makes per poll (the TrainJob, its runtime — namespaced first, then cluster-scoped — and
the job's pods), with ``kubernetes_asyncio`` — what an async adapter built the SDK's
way would do in an Airflow triggerer.

Run as ``python -m bench.driver_poll poll-async CONFIG.json``; same protocol as
:mod:`bench.driver_ours`. It imports neither this suite nor pydantic, so its memory is
the pollers' own.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
from kubernetes_asyncio import client, config

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
RUNTIME = "torch-distributed"
Config = dict[str, Any]


def emit(tag: str, payload: Any = None) -> None:
    """One protocol line on stdout."""
    text = tag if payload is None else f"{tag} {json.dumps(payload)}"
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def complete(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


async def poll_all(cfg: Config) -> dict[str, Any]:
    names: list[str] = cfg["names"]
    ns: str = cfg["namespace"]
    interval = float(cfg["polling_interval"])
    configuration = client.Configuration()
    await config.load_kube_config(config_file=cfg["kubeconfig"], client_configuration=configuration)
    # One shared connection pool, large enough not to hold the pollers back below the
    # rate the SDK (a client per job) would reach.
    configuration.connection_pool_maxsize = min(len(names), 100)
    returned: dict[str, float] = {}
    errors: dict[str, str] = {}
    async with client.ApiClient(configuration) as api:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        rss_before = rss_bytes()

        async def poll(name: str) -> None:
            selector = (
                f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name"
                " in (dataset-initializer, model-initializer, launcher, node)"
            )
            try:
                while True:
                    obj = await custom.get_namespaced_custom_object(
                        GROUP, VERSION, ns, "trainjobs", name
                    )
                    try:
                        await custom.get_namespaced_custom_object(
                            GROUP, VERSION, ns, "trainingruntimes", RUNTIME
                        )
                    except client.ApiException as exc:
                        if exc.status != 404:
                            raise
                        await custom.get_cluster_custom_object(
                            GROUP, VERSION, "clustertrainingruntimes", RUNTIME
                        )
                    await core.list_namespaced_pod(ns, label_selector=selector)
                    if complete(obj):
                        returned[name] = time.time()
                        return
                    await asyncio.sleep(interval)
            except Exception as exc:  # reported, not raised: one failure must not hide the rest
                errors[name] = repr(exc)

        tasks = [asyncio.create_task(poll(n)) for n in names]
        await asyncio.sleep(0.2)
        emit("READY")
        await asyncio.gather(*tasks)
    return {"returned": returned, "errors": errors, "rss_before": rss_before}


def main() -> None:
    mode, config_path = sys.argv[1], sys.argv[2]
    if mode != "poll-async":
        raise SystemExit(f"unknown mode {mode!r}")
    with open(config_path) as fh:
        cfg = json.load(fh)
    result = asyncio.run(poll_all(cfg))
    result["rss_after"] = rss_bytes()
    emit("RESULT", result)


if __name__ == "__main__":
    main()
