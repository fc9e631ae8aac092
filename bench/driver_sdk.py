"""The baseline side of the benchmarks: the Kubeflow SDK 0.5 (``kubeflow.trainer``),
driven the way its documentation shows, in its own virtual environment.

This file runs with the SDK venv's interpreter (``python -I driver_sdk.py MODE CONFIG``),
where neither this repository's packages nor its dependencies are importable, so it
uses the standard library and the SDK only. It talks to the orchestrator
(:mod:`bench.common`) through stdout: ``READY`` once every wait has been issued, then
one ``RESULT {json}`` line. Times are ``time.time()`` so that they compare with the
test server's, which runs in the orchestrator's process on the same machine.

Modes:

``wait``
    one thread per job calling ``TrainerClient.wait_for_job_status`` (one client per
    thread: a shared client would funnel every request through the one worker thread
    of its ``ApiClient`` pool, which would be unfair to the SDK).
``requests``
    per job: ``train()`` then ``wait_for_job_status(polling_interval=...)``.
``submit``
    ``train()`` throughput at several thread counts.
``local``
    one trivial job on ``LocalProcessBackendConfig`` (venv + pip install + torchrun).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

# The SDK is only installed in its own venv; mypy checks this file without it.
from kubeflow.common.types import KubernetesBackendConfig  # type: ignore[import-not-found]
from kubeflow.trainer import (  # type: ignore[import-not-found]
    CustomTrainer,
    TrainerClient,
)
from kubeflow.trainer.options import Annotations, Name  # type: ignore[import-not-found]

SCENARIO_ANNOTATION = "testing.kf-trainer-suite/scenario"


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def emit(tag: str, payload: Any = None) -> None:
    """One protocol line on stdout."""
    text = tag if payload is None else f"{tag} {json.dumps(payload)}"
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def train_noop() -> dict[str, int]:
    """The trivial training function (its source is shipped by the SDK)."""
    print("training: nothing to do")
    return {"ok": 1}


def kube_client(cfg: dict[str, Any]) -> Any:
    return TrainerClient(
        KubernetesBackendConfig(config_file=cfg["kubeconfig"], namespace=cfg["namespace"])
    )


def run_threads(targets: list[Any]) -> None:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    emit("READY")
    for t in threads:
        t.join()


def mode_wait(cfg: dict[str, Any]) -> dict[str, Any]:
    names: list[str] = cfg["names"]
    poll = float(cfg.get("polling_interval", 2))
    # Clients are built up front, one after another: load_kube_config sets a global.
    clients = [kube_client(cfg) for _ in names]
    returned: dict[str, float] = {}
    errors: dict[str, str] = {}

    def waiter(client: Any, name: str) -> Any:
        def run() -> None:
            try:
                client.wait_for_job_status(name, timeout=int(cfg["timeout"]), polling_interval=poll)
                returned[name] = time.time()
            except Exception as exc:  # reported, not raised: one failure must not hide the rest
                errors[name] = repr(exc)

        return run

    rss_before = rss_bytes()
    run_threads([waiter(c, n) for c, n in zip(clients, names, strict=True)])
    return {"returned": returned, "errors": errors, "rss_before": rss_before}


def mode_requests(cfg: dict[str, Any]) -> dict[str, Any]:
    """As bench.driver_ours: a warm-up job, then each group in turn; per job a client of
    its own, ``train()`` then ``wait_for_job_status(polling_interval=...)``."""

    def run_group(jobs: list[dict[str, Any]]) -> dict[str, Any]:
        names: dict[str, str] = {}
        errors: dict[str, str] = {}

        def one(job: dict[str, Any]) -> None:
            name = job["name"]
            scenario = json.dumps({"preset": "success", "duration": job["duration"]})
            try:
                client = kube_client(cfg)
                client.train(
                    runtime=client.get_runtime("torch-distributed"),
                    trainer=CustomTrainer(func=train_noop),
                    options=[Name(name=name), Annotations({SCENARIO_ANNOTATION: scenario})],
                )
                names[job["key"]] = name
                client.wait_for_job_status(
                    name,
                    timeout=int(cfg["timeout"]),
                    polling_interval=float(job["polling_interval"]),
                )
            except Exception as exc:
                errors[job["key"]] = repr(exc)

        start = time.time()
        threads = [threading.Thread(target=one, args=(j,), daemon=True) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"start": start, "end": time.time(), "names": names, "errors": errors}

    setup = run_group([cfg["warmup"]])
    groups = [run_group(g["jobs"]) for g in cfg["groups"]]
    return {"setup": setup, "groups": groups}


def submit_level(clients: list[Any], runtime: Any, names: list[str]) -> dict[str, Any]:
    """``train()`` every name, the names dealt out to one thread per client."""
    scenario = json.dumps({"preset": "success"})
    concurrency = len(clients)
    errors: list[str] = []

    def worker(client: Any, chunk: list[str]) -> None:
        for name in chunk:
            try:
                client.train(
                    runtime=runtime,
                    trainer=CustomTrainer(func=train_noop),
                    options=[Name(name=name), Annotations({SCENARIO_ANNOTATION: scenario})],
                )
            except Exception as exc:
                errors.append(repr(exc))

    chunks = [names[i::concurrency] for i in range(concurrency)]
    threads = [
        threading.Thread(target=worker, args=(c, ch), daemon=True)
        for c, ch in zip(clients, chunks, strict=True)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "jobs": len(names),
        "seconds": elapsed,
        "errors": errors[:5],
        "error_count": len(errors),
    }


def mode_submit(cfg: dict[str, Any]) -> dict[str, Any]:
    levels: list[dict[str, Any]] = []
    for level in cfg["levels"]:
        clients = [kube_client(cfg) for _ in range(int(level["concurrency"]))]
        runtime = clients[0].get_runtime("torch-distributed")
        if not levels:
            # Connection set-up and lazy imports happen before the clock starts.
            clients[0].train(
                runtime=runtime,
                trainer=CustomTrainer(func=train_noop),
                options=[Name(name=cfg["warmup_name"])],
            )
        levels.append(submit_level(clients, runtime, level["names"]))
    return {"levels": levels}


def mode_local(cfg: dict[str, Any]) -> dict[str, Any]:
    from kubeflow.trainer import LocalProcessBackendConfig

    # The SDK starts the job's shell with exactly the trainer's env (nothing inherited),
    # so what pip needs to find the wheels on this machine's disk is passed explicitly.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    for key in ("PIP_FIND_LINKS", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "SSL_CERT_FILE"):
        if key in os.environ:
            env[key] = os.environ[key]
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # Unbuffered, so that pip's lines reach the log (and get their time stamps) as they
    # are written rather than in one block at the end.
    env["PYTHONUNBUFFERED"] = "1"
    start = time.time()
    client = TrainerClient(LocalProcessBackendConfig())
    name = client.train(
        runtime="torch-distributed",
        trainer=CustomTrainer(func=train_noop, packages_to_install=list(cfg["packages"]), env=env),
    )
    lines: list[tuple[float, str]] = []
    finished = threading.Event()

    def follow() -> None:
        # Timestamps of the log lines split the run into venv, install and training.
        # (The SDK's follow=True prints to the console instead of yielding, so read the
        # whole log a few times a second and stamp what is new.)
        while True:
            stop = finished.is_set()
            seen = list(client.get_job_logs(name))
            now = time.time()
            lines.extend((now, line) for line in seen[len(lines) :])
            if stop:
                return
            finished.wait(0.25)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    status = "unknown"
    error = None
    try:
        job = client.wait_for_job_status(name, timeout=int(cfg["timeout"]))
        status = job.status
    except Exception as exc:
        error = repr(exc)
    end = time.time()
    finished.set()
    reader.join(5)
    venv_made = next((t for t, line in lines if "Operating inside" in line), None)
    installed = next((t for t, line in lines if line.startswith("Successfully installed")), None)
    return {
        "status": status,
        "error": error,
        "seconds": end - start,
        # venv created -> pip bootstrapped and the packages installed
        "install_seconds": (installed - venv_made) if installed and venv_made else None,
        # client created -> packages installed: everything before the function starts
        "prepare_seconds": (installed - start) if installed else None,
        "log_tail": [line for _, line in lines[-15:]],
    }


MODES = {
    "wait": mode_wait,
    "requests": mode_requests,
    "submit": mode_submit,
    "local": mode_local,
}


def main() -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    mode, config_path = sys.argv[1], sys.argv[2]
    with open(config_path) as fh:
        cfg = json.load(fh)
    result = MODES[mode](cfg)
    result["rss_after"] = rss_bytes()
    emit("RESULT", result)


if __name__ == "__main__":
    main()
