"""Waiting on the real control plane (issue 23 item 6): completion latency with the
real controllers, and namespace size on the real server, ours beside the Kubeflow SDK.

* **Completion latency.** ``start.sh --controllers``: the real Trainer controller turns
  each TrainJob into a JobSet, kwok's fake nodes run its pod, and the Trainer controller
  writes ``Complete``. Jobs are created suspended, every wait is put in place, then they
  are resumed together; each job's pod stays Running for a duration of its own (kwok's
  ``kwok.x-k8s.io/duration`` through a ``RuntimePatch``), so completions are spread.
  The clock starts when this process's own watch on the TrainJobs delivers the
  ``Complete`` condition (``lastTransitionTime`` has whole seconds only) and stops when
  ``wait`` returns in the waiting process: same machine, same clock. Our watch and the
  waiting process's are both fed by the apiserver's watch cache, so the figure is what
  the waiting process adds after the server has announced the completion.
* **Namespace size.** API-only control plane: 10,000 foreign ~20-KiB TrainJobs (no
  label of this suite, as the SDK or kubectl makes them) are created over HTTP by
  concurrent writers; a fresh process then waits for a few jobs of its own, whose
  ``Complete`` this process writes through ``/status``. Notice latency (from the write's
  answer to the wait's return) and RSS growth (peak RSS over RSS before the waits), at 0
  and at 10,000 foreign jobs.

Not in ``--quick`` (two cold starts, ~1 GiB): the rows are skipped with the reason.
Every control plane started here is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    JSON,
    DriverError,
    Follower,
    Settings,
    cpu_seconds,
    driver,
    latencies,
    process_probe,
    ratio,
    sdk_python,
    sdk_unavailable_reason,
    summary,
)
from bench.realcp import GROUP, NAMESPACE, PLURAL, VERSION, RealControlPlane, unavailable_reason

#: (key, driver side, driver mode, label)
SIDES = [
    ("ours_async", "ours", "wait-async", "ours: AsyncTrainerClient.wait, a task per job"),
    ("ours_sync", "ours", "wait-sync", "ours: TrainerClient.wait, a thread per job"),
    ("sdk", "sdk", "wait", "Kubeflow SDK: wait_for_job_status (2 s poll), a thread per job"),
]

#: Ours again on jobs whose pod ends with no termination message: the result is then
#: looked for in node-0's log, which kwok's nodes cannot serve (a real node serves it).
NO_RESULT_SIDE = (
    "ours_async_no_result",
    "ours",
    "wait-async",
    "ours: AsyncTrainerClient.wait, no termination message (result read from the log)",
)

#: Jobs per side in the completion-latency row, and the spread of their pods' run time.
LATENCY_JOBS = 20
FIRST_SECONDS, SPREAD_SECONDS = 1.0, 5.0
#: Foreign jobs in the namespace row; each one's program; own jobs waited per process.
FOREIGN_JOBS = 10000
PROGRAM_BYTES = 20 * 1024
OWN_WAITS = 8


def run(settings: Settings, workdir: Path) -> JSON:
    reason = unavailable_reason()
    if reason is None and settings.quick:
        reason = "not in --quick: two real control planes cost ~35 s to start and ~1.3 GiB"
    if reason is not None:
        settings.note(f"realwait: skipped ({reason})")
        return {"skipped": reason}
    sdk_ok = sdk_python(settings) is not None
    out: JSON = {"sdk_skipped": None if sdk_ok else sdk_unavailable_reason()}
    sides = [s for s in SIDES if sdk_ok or s[1] != "sdk"]
    # One part alone (KF_BENCH_REALWAIT_PARTS=latency or namespace) keeps the other
    # part of the previous results, which says when it ran.
    parts = os.environ.get("KF_BENCH_REALWAIT_PARTS", "latency,namespace").split(",")
    previous = _previous(settings)
    if "latency" in parts:
        out["latency"] = _part(completion_latency, settings, workdir, [*sides, NO_RESULT_SIDE])
    elif "latency" in previous:
        out["latency"] = previous["latency"]
    if "namespace" in parts:
        out["namespace"] = _part(namespace_size, settings, workdir, sides)
    elif "namespace" in previous:
        out["namespace"] = previous["namespace"]
    return out


def _part(measure: Any, settings: Settings, workdir: Path, sides: list[Any]) -> JSON:
    # The machine is shared (other engineers' tests, a CI run): say how busy it was.
    before = list(os.getloadavg())
    part: JSON = measure(settings, workdir, sides)
    part["load_before"], part["load_after"] = before, list(os.getloadavg())
    part["ran_at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return part


def _previous(settings: Settings) -> JSON:
    path = settings.out / "bench" / "results.json"
    try:
        section: JSON = json.loads(path.read_text())["sections"]["realwait"]
    except (OSError, ValueError, KeyError):
        return {}
    for part in ("latency", "namespace"):
        if isinstance(section.get(part), dict):
            section[part].setdefault("ran_at", section.get("ran_at"))
    return section


def _noop() -> int:
    return 1


def _manifest(duration: str | None = None, *, result: bool = True) -> JSON:
    from kf_trainer_core.manifest.builder import build_trainjob
    from kf_trainer_core.spec import CustomTrainer, Name, TrainJobSpec
    from kf_trainer_core.testing.kwok import DURATION, TERMINATION_MESSAGE, node_annotations

    options: list[Any] = [Name("bench")]
    if duration is not None:
        annotations = {DURATION: duration}
        if result:
            # What the generated program writes on a real node: the function's return
            # value (``_noop``'s 1) as node-0's termination message.
            annotations[TERMINATION_MESSAGE] = "1"
        options.append(node_annotations(annotations))
    built = build_trainjob(
        TrainJobSpec(trainer=CustomTrainer(_noop), options=options), namespace=NAMESPACE
    )
    manifest: JSON = built.manifest
    return manifest


def _create(cp: RealControlPlane, bodies: Sequence[JSON], threads: int = 16) -> None:
    api = cp.api()

    def one(body: JSON) -> None:
        api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, bodies))


def _named(manifest: JSON, name: str, *, suspend: bool = False) -> JSON:
    meta = {k: v for k, v in manifest["metadata"].items() if k != "namespace"}
    body = {**manifest, "metadata": {**meta, "name": name}}
    if suspend:
        body["spec"] = {**manifest["spec"], "suspend": True}
    return body


class CompleteWatch:
    """This process's own watch on the namespace's TrainJobs: when each one's
    ``Complete=True`` first arrived (``time.time()``)."""

    def __init__(self, cp: RealControlPlane) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(str(cp.kubeconfig), client_configuration=configuration)
        self._api = client.CustomObjectsApi(client.ApiClient(configuration))
        self.completed: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        from kubernetes import watch

        listed = self._api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        rv = listed["metadata"]["resourceVersion"]
        self._ready.set()
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    self._api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NAMESPACE,
                    PLURAL,
                    resource_version=rv,
                    timeout_seconds=20,
                    allow_watch_bookmarks=True,
                ):
                    stamp = time.time()
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    name = obj.get("metadata", {}).get("name")
                    conditions = (obj.get("status") or {}).get("conditions") or []
                    if (
                        name
                        and name not in self.completed
                        and any(
                            c.get("type") == "Complete" and c.get("status") == "True"
                            for c in conditions
                        )
                    ):
                        self.completed[name] = stamp
                    if self._stop.is_set():
                        w.stop()
            except Exception:  # a dropped stream: open it again from where it was
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()


def _resume(cp: RealControlPlane, names: Sequence[str]) -> float:
    api = cp.api()
    started = time.time()

    def one(name: str) -> None:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"suspend": False}}
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    return started


def completion_latency(settings: Settings, workdir: Path, sides: list[Any]) -> JSON:
    """Completions written by the real Trainer controller; see the module's text."""
    out: JSON = {"jobs_per_side": LATENCY_JOBS, "spread_seconds": SPREAD_SECONDS, "sides": {}}
    cp = RealControlPlane(workdir, controllers=True, name="cp-controllers", port_offset=10)
    settings.note("realwait: starting the control plane with its controllers")
    with cp:
        out["start_seconds"] = cp.started_in
        watch = CompleteWatch(cp)
        try:
            for key, side, mode, label in sides:
                names = [f"lat-{key.replace('_', '-')}-{i}" for i in range(LATENCY_JOBS)]
                bodies = [
                    _named(
                        _manifest(
                            f"{FIRST_SECONDS + SPREAD_SECONDS * i / LATENCY_JOBS:.2f}s",
                            result=key != NO_RESULT_SIDE[0],
                        ),
                        name,
                        suspend=True,
                    )
                    for i, name in enumerate(names)
                ]
                _create(cp, bodies)
                config: JSON = {
                    "kubeconfig": str(cp.kubeconfig),
                    "namespace": NAMESPACE,
                    "names": names,
                    "timeout": 300,
                    "polling_interval": 2,
                }
                settings.note(f"realwait: completion latency, {label}")
                try:
                    with driver(side, mode, config, workdir, settings) as d:
                        d.wait_ready(timeout=180)
                        time.sleep(1.0)  # every wait has looked once
                        resumed = _resume(cp, names)
                        result = d.result(timeout=300)
                except DriverError as exc:
                    out["sides"][key] = {"label": label, "error": str(exc)}
                    continue
                values = latencies(result["returned"], watch.completed)
                run_times = [watch.completed[n] - resumed for n in names if n in watch.completed]
                out["sides"][key] = {
                    "label": label,
                    **summary(values),
                    "errors": len(result["errors"]),
                    "error_sample": list(result["errors"].values())[:3],
                    "latencies": sorted(values),
                    "resume_to_complete": summary(run_times),
                }
        finally:
            watch.stop()
        out["apiserver_rss_mb"] = cp.apiserver_rss_mb()
    _ratios(out["sides"])
    return out


def _ratios(sides: JSON) -> None:
    sdk = sides.get("sdk", {})
    for key in ("ours_async", "ours_sync", NO_RESULT_SIDE[0]):
        ours = sides.get(key)
        if ours is not None:
            ours["ratio_p50"] = ratio(sdk.get("p50"), ours.get("p50"))
            ours["ratio_p95"] = ratio(sdk.get("p95"), ours.get("p95"))


def _settle(proc: Any, limit: float = 180.0) -> None:
    """Until the waiting process has done its start-up work (ours: the informer's list
    of the whole namespace): its CPU time stops growing for a second."""
    deadline = time.monotonic() + limit
    last, quiet = cpu_seconds(proc), 0
    while time.monotonic() < deadline and quiet < 2:
        time.sleep(0.5)
        now = cpu_seconds(proc)
        quiet = quiet + 1 if now - last < 0.05 else 0
        last = now


def namespace_size(settings: Settings, workdir: Path, sides: list[Any]) -> JSON:
    """Our waits beside the SDK's with 0 and 10,000 foreign jobs in the namespace."""
    from kf_trainer_core.testing.population import finished_trainjob

    out: JSON = {"foreign_jobs": FOREIGN_JOBS, "program_bytes": PROGRAM_BYTES, "rows": []}
    cp = RealControlPlane(workdir, controllers=False, name="cp-namespace", port_offset=20)
    settings.note("realwait: starting the control plane (API only) for namespace size")
    own = _manifest()
    with cp:
        for n in (0, FOREIGN_JOBS):
            row: JSON = {"jobs": n}
            if n:
                t0 = time.monotonic()
                bodies = []
                for i in range(n):
                    body = finished_trainjob(f"foreign-{i}", program_bytes=PROGRAM_BYTES)
                    body.pop("status", None)  # a create ignores it (status subresource)
                    bodies.append(body)
                settings.note(f"realwait: creating {n} foreign jobs of ~20 KiB")
                _create(cp, bodies, threads=16)
                row["create_seconds"] = time.monotonic() - t0
            for key, side, mode, label in sides:
                settings.note(f"realwait: namespace size, {n} foreign jobs, {label}")
                row[key] = _namespace_side(cp, workdir, settings, f"{key}-{n}", side, mode, own)
                row[key]["label"] = label
            out["rows"].append(row)
        out["apiserver_rss_mb"] = cp.apiserver_rss_mb()
    return out


def _namespace_side(
    cp: RealControlPlane,
    workdir: Path,
    settings: Settings,
    key: str,
    side: str,
    mode: str,
    manifest: JSON,
) -> JSON:
    names = [f"ns-{key.replace('_', '-')}-{i}" for i in range(OWN_WAITS)]
    _create(cp, [_named(manifest, name) for name in names])
    config: JSON = {
        "kubeconfig": str(cp.kubeconfig),
        "namespace": NAMESPACE,
        "names": names,
        "timeout": 600,
        "polling_interval": 2,
    }
    try:
        with driver(side, mode, config, workdir, settings) as d:
            d.wait_ready(timeout=600)
            proc = process_probe(d.pid)
            sampler = Follower(proc, lambda p: p.memory_info().rss, max)
            t0 = time.monotonic()
            _settle(proc)
            settle_seconds = time.monotonic() - t0
            # Spread over two seconds: one poll period of the SDK.
            done = cp.complete_paced(names, OWN_WAITS / 2.0)
            result: dict[str, Any] = d.result(timeout=600)
            with contextlib.suppress(Exception):
                sampler.value = max(sampler.value, proc.memory_info().rss)
            peak = int(sampler.stop())
    except DriverError as exc:
        return {"error": str(exc)}
    rss_before = int(result.get("rss_before") or 0)
    return {
        "rss_before_mb": rss_before / 2**20,
        "rss_growth_mb": max(0, peak - rss_before) / 2**20 if rss_before and peak else None,
        "settle_seconds": settle_seconds,
        "latency": summary(latencies(result["returned"], done)),
        "errors": len(result["errors"]),
        "error_sample": list(result["errors"].values())[:3],
    }
