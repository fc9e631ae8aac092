"""Run waits in an event loop of a fresh process, timing every callback of the loop.

Run as a script by ``tests/*/test_*_loop_blocking.py`` (a cold start: nothing of the suite
is imported before the loop runs, except where a real host imports it first)::

    python tests/loop_scenarios.py MODE SETTINGS.json RESULT.json

MODE is ``trigger`` (``TrainJobTrigger`` as Airflow's triggerer runs it: the trigger's
module imported on the loop, each trigger a task), ``client`` (concurrent
``AsyncTrainerClient.wait`` calls on one client, made in the loop) or ``prefect`` (a
Prefect flow running ``await_trainjob`` tasks at once). SETTINGS holds the kubeconfig,
the jobs to wait for and the threshold; RESULT receives what every wait returned and
the loop's slow callbacks (:class:`kf_trainer_core.testing.loopwatch.LoopWatch`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
#: The scenario's event loop, once its waits have started (for the stacks dumped below).
_LOOP: asyncio.AbstractEventLoop | None = None


def _dump_stacks_after(seconds: float) -> None:
    """Shortly before the parent's limit, write every thread's stack and every task of
    the scenario's loop to stderr: a scenario that hangs then names where it waits."""
    import faulthandler
    import threading

    faulthandler.dump_traceback_later(seconds, exit=False)

    def chain(task: asyncio.Task[Any]) -> str:
        # A suspended task's own stack is one frame: follow what each coroutine awaits.
        lines, awaited = [], task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                lines.append(
                    f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
                )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        return "\n".join(lines)

    def tasks() -> None:
        loop = _LOOP
        if loop is None:
            return
        stacks: dict[str, int] = {}
        for task in asyncio.all_tasks(loop):
            text = chain(task)
            stacks[text] = stacks.get(text, 0) + 1
        # The same stack once, with how many tasks are there (a hundred waits, one frame).
        for text, count in sorted(stacks.items(), key=lambda item: -item[1]):
            print(f"{count} task(s) at:\n{text}", file=sys.stderr)

    timer = threading.Timer(seconds, tasks)
    timer.daemon = True
    timer.start()


def _loopwatch() -> Any:
    # Loaded by path: importing the package would import the suite before the loop runs.
    path = SRC / "kf_trainer_core" / "testing" / "loopwatch.py"
    spec = importlib.util.spec_from_file_location("_kf_loopwatch", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def _trigger(settings: dict[str, Any]) -> list[Any]:
    # As Airflow's TriggerRunner does: the trigger's class is imported on the running
    # loop (create_triggers -> import_string), then each trigger runs as a task.
    await asyncio.sleep(0)
    module = importlib.import_module("kf_trainer_airflow.triggers.trainjob")
    await asyncio.sleep(0)

    async def first(kwargs: dict[str, Any]) -> Any:
        trigger = module.TrainJobTrigger(
            namespace="default", kubeflow_trainer_conn_id=settings["conn_id"], **kwargs
        )
        async for event in trigger.run():
            return event.payload
        return None

    tasks = []
    for kwargs in settings["triggers"]:
        tasks.append(asyncio.ensure_future(first(kwargs)))
        await asyncio.sleep(0)  # the triggerer creates them one by one
    return list(await asyncio.gather(*tasks))


async def _client(settings: dict[str, Any]) -> list[Any]:
    from kf_trainer_core.client import AsyncTrainerClient
    from kf_trainer_core.config import KubernetesConfig

    config = KubernetesConfig(kubeconfig=settings["kubeconfig"], namespace="default")
    async with AsyncTrainerClient(config) as client:

        async def one(name: str) -> str:
            job, _ = await client.wait(name, timeout=settings.get("timeout", 300))
            return str(job.status.value)

        waits = asyncio.gather(*(one(n) for n in settings["jobs"]))
        await _ready(settings)
        return list(await waits)


async def _ready(settings: dict[str, Any]) -> None:
    """Tell the parent that the waits have started (it then ends the jobs)."""
    global _LOOP
    _LOOP = asyncio.get_running_loop()
    await asyncio.sleep(settings.get("settle", 3.0))
    if settings.get("ready"):
        Path(settings["ready"]).touch()


def _prefect(settings: dict[str, Any]) -> list[Any]:
    from prefect import flow

    from kf_trainer_prefect import KubeflowTrainerCredentials, await_trainjob

    creds = KubeflowTrainerCredentials(kubeconfig=settings["kubeconfig"], namespace="default")

    @flow
    async def many() -> list[Any]:
        # Async tasks called from an async flow run in the flow's own event loop.
        waits = asyncio.gather(
            *(
                await_trainjob(n, creds, timeout=settings.get("timeout", 300))
                for n in settings["jobs"]
            )
        )
        # The parent ends the jobs only once told that the waits have started.
        await _ready(settings)
        outs = await waits
        return [str(o.status.value) for o in outs]

    return asyncio.run(many())  # type: ignore[arg-type]


def main() -> None:
    mode, settings_path, result_path = sys.argv[1:4]
    settings = json.loads(Path(settings_path).read_text())
    watch = _loopwatch().LoopWatch(threshold=settings.get("threshold", 0.05))
    if settings.get("dump_after"):
        _dump_stacks_after(float(settings["dump_after"]))
    for module in settings.get("preimport", []):
        # What the host process has imported before any of the suite's code runs.
        importlib.import_module(module)
    watch.install()
    try:
        if mode == "trigger":
            results = asyncio.run(_trigger(settings))
        elif mode == "client":
            results = asyncio.run(_client(settings))
        elif mode == "prefect":
            results = _prefect(settings)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        watch.uninstall()
    Path(result_path).write_text(
        json.dumps(
            {
                "results": results,
                "callbacks": watch.callbacks,
                "max_cpu": watch.max_cpu,
                "max_wall": watch.max_wall,
                "max_blocked": watch.max_blocked,
                "gc_total": watch.gc_total,
                "gc_longest": watch.gc_longest,
                "slow": [s.as_dict() for s in watch.slow],
                "report": watch.report(),
            }
        )
    )


if __name__ == "__main__":
    main()
