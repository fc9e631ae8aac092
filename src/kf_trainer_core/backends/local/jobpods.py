"""The pods a local job's plan makes: one per initializer it asks for, then the trainer
nodes (with MPI, the launcher as node 0), each with its container as a cluster would
show it and the processes that run it here; and the preparation of the trainer program
(its file, the interpreter, torchrun or plain ranks).

Standard library only, like the supervisor that imports it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from kf_trainer_core.backends.local import launch
from kf_trainer_core.backends.local._common import (
    JOB_UID_ENV,
    NODE,
    ORIGINAL_PYTHONPATH_ENV,
    WORKSPACE_ENV,
)
from kf_trainer_core.backends.local.initializer import DEST_ENV, KIND_ENV
from kf_trainer_core.backends.local.pods import JobPlace, PodRun, pod_object
from kf_trainer_core.emulation.jobs import apply_initializer, apply_trainer, upsert_env

JSON = dict[str, Any]

#: The image an initializer pod shows (the local backend runs it as a process).
INITIALIZER_IMAGE = "local/kf-trainer-initializer"


def initializer_pod(place: JobPlace, rjobs: list[str], rjob: str, entry: JSON, cwd: str) -> PodRun:
    """The pod of initializer ``rjob`` (``dataset-initializer``...) for the TrainJob's
    ``spec.initializer`` entry ``entry``."""
    kind = rjob.split("-")[0]
    container: JSON = {
        "name": rjob,
        "image": INITIALIZER_IMAGE,
        "command": [sys.executable, "-m", "kf_trainer_core.backends.local.initializer"],
    }
    apply_initializer(container, entry)
    obj = pod_object(place, rjobs, rjob, 0, container)
    pod = PodRun(rjob, obj)
    env = dict(os.environ)  # the supervisor's: PYTHONPATH finds this package
    env.pop(ORIGINAL_PYTHONPATH_ENV, None)
    env.update({WORKSPACE_ENV: str(place.workspace), JOB_UID_ENV: place.uid})
    env.update(
        {
            KIND_ENV: kind,
            DEST_ENV: str(place.workspace / kind),
            "PYTHONUNBUFFERED": "1",
        }
    )
    pod.env = env
    pod.cwd = cwd
    pod.launches = [launch.Launch(list(container["command"]))]
    return pod


def _base_env(place: JobPlace) -> dict[str, str]:
    """The trainer's environment: the submitter's (its PYTHONPATH restored), without
    any rank variables of an enclosing launcher."""
    env = dict(os.environ)
    original = env.pop(ORIGINAL_PYTHONPATH_ENV, None)
    if original is not None:
        if original:
            env["PYTHONPATH"] = original
        else:
            env.pop("PYTHONPATH", None)
    for key in list(env):
        if key.startswith("PET_") or key in launch.RANK_VARIABLES:
            del env[key]
    env["PYTHONUNBUFFERED"] = "1"
    env[WORKSPACE_ENV] = str(place.workspace)
    env[JOB_UID_ENV] = place.uid
    return env


def trainer_pods(
    place: JobPlace,
    rjobs: list[str],
    plan: JSON,
    trainer: JSON,
    layout: list[tuple[str, int, int]],
    nnodes: int,
    cwd: str,
) -> list[PodRun]:
    """The trainer's pods, one per ``(replicated job, completion index, node rank)`` of
    ``layout``; their processes are decided by :func:`prepare_trainer`."""
    runtime = dict(plan.get("runtime") or {})
    policy = str(runtime.get("policy") or "torch")
    asked = launch.procs_per_node(trainer.get("numProcPerNode"), runtime.get("num_proc_per_node"))
    # auto: one per GPU the node is given, known once the kubelet shares them out.
    nproc = asked or 1
    port = launch.free_port()
    base = _base_env(place)
    pods = []
    for rjob, index, node_rank in layout:
        shape = launch.NodeShape(
            node_rank=node_rank,
            nnodes=nnodes,
            nproc=nproc,
            master_port=port,
            completion_index=index,
            mpi=policy == "mpi",
        )
        # The runtime's node container with the TrainJob's trainer over it, as the
        # Trainer makes it, and the torch policy's variables as this machine sets them.
        container: JSON = {"name": NODE, "image": runtime.get("image") or "local/python"}
        container["command"] = list(runtime.get("command") or [])
        if runtime.get("args"):
            container["args"] = list(runtime["args"])
        apply_trainer(container, trainer)
        node_env = launch.node_env(shape)
        upsert_env(container, [{"name": k, "value": v} for k, v in node_env.items()])
        obj = pod_object(place, rjobs, rjob, index, container)
        pod = PodRun(rjob, obj)
        pod.env = {**base, **node_env}
        pod.cwd = cwd
        pod.launches = []  # decided once the program is prepared
        pod.first_lines = [f"kf-trainer: warning: {w}" for w in plan.get("warnings") or []]
        pod.shape = shape
        pod.auto_procs = asked is None
        pods.append(pod)
    return pods


def prepare_trainer(
    place: JobPlace,
    plan: JSON,
    pods: list[PodRun],
    program: launch.TrainerProgram,
    cancel: threading.Event | None = None,
) -> None:
    """Write the program, choose interpreter and launcher, fill each pod's
    processes. Failures become the pods' failures; setting ``cancel`` stops a
    virtualenv build."""
    python = str(plan.get("python") or sys.executable)
    policy = str((plan.get("runtime") or {}).get("policy") or "torch")
    lead = pods[0]
    program_file: str | None = None
    if program.kind == "function":
        if program.packages:
            if plan.get("use_venv"):
                from kf_trainer_core.backends.local.venv import ensure_venv

                assert lead.log is not None
                python = ensure_venv(
                    place.paths.venvs,
                    python,
                    program.packages,
                    program.index_urls,
                    lead.log.write,
                    # Marked with the job: cancelling it stops a long install too.
                    env={**os.environ, JOB_UID_ENV: place.uid},
                    cancel=cancel,
                )
            else:
                missing = _missing_distributions(program.packages)
                if missing:
                    for pod in pods:
                        assert pod.log is not None
                        pod.log.write(
                            "kf-trainer: warning: packages_to_install are not "
                            f"installed here and the local backend does not install them "
                            f"(missing: {', '.join(missing)}); it runs {python}. Fix: "
                            "install them, or LocalConfig(use_venv=True)."
                        )
        text = launch.map_program_args(program.program, str(place.workspace))
        path = place.run_dir / f"kf_trainer_{program.func_name}.py"
        path.write_text(text)
        program_file = str(path)
    use_torchrun = (
        program.kind == "function"
        and policy == "torch"
        and launch.torch_importable(python, sys.executable)
    )
    bindir = os.path.dirname(python)
    for pod in pods:
        assert pod.shape is not None
        pod.env["PATH"] = bindir + os.pathsep + pod.env.get("PATH", os.defpath)
        pod.launches = launch.node_launches(program, program_file, python, pod.shape, use_torchrun)


def _missing_distributions(requirements: tuple[str, ...]) -> list[str]:
    import re
    from importlib import metadata

    missing = []
    for req in requirements:
        name = re.split(r"[<>=!~;\[ @]", req.strip(), maxsplit=1)[0]
        if not name or "/" in name:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(req)
    return missing
