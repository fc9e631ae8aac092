"""The container backend's pod runner: how the local kubelet runs a pod in a container.

The kubelet (:mod:`kf_trainer_core.backends.local.kubelet`) keeps everything a cluster's
controllers and kubelet would write — pods, statuses, events, logs, conditions — and
hands the running of each pod to a :class:`~kf_trainer_core.backends.local.kubelet.PodRunner`:
this machine's processes (the local backend), or :class:`ContainerRunner`, one container
per pod in a Docker or Podman engine (the container backend).

Imported by the supervisor only for container jobs: the Docker SDK stays out of the
local backend's start-up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from kf_trainer_core.backends.local._common import (
    CLUSTER_WORKSPACE,
    INITIALIZERS,
    TERMINATION_LOG_ENV,
    WORKSPACE_ENV,
)
from kf_trainer_core.backends.local.checkpoints import TRAINER_ENV_NAMES, container_mount
from kf_trainer_core.backends.local.container import (
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    NAMESPACE_LABEL,
    POD_LABEL,
)
from kf_trainer_core.backends.local.container.engine import (
    Engine,
    ImageUnavailable,
    connect,
    ensure_image,
)
from kf_trainer_core.backends.local.initializer import DEST_ENV, KIND_ENV

JSON = dict[str, Any]

#: Where the job's run directory (termination messages, hostfile) appears in a container.
RUN_MOUNT = "/kf-trainer/run"
#: Where a shell command's container reads the values that came from Secrets (a file
#: mounted read-only), so that they are not in its inspectable configuration.
SECRET_MOUNT = "/kf-trainer/secret-env"
#: Run as ``<shell> -c SOURCE_SECRETS kf-trainer <command...>``: the values, then the
#: pod's own command, unchanged.
SOURCE_SECRETS = ". " + SECRET_MOUNT + ' && exec "$@"'
_SHELLS = frozenset({"sh", "bash"})
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Where the suite's own code appears in initializer containers (read-only).
CODE_MOUNT = "/opt/kf-trainer/lib"
MPI_HOSTFILE = "/etc/mpi/hostfile"
#: How long a stopped container gets between SIGTERM and SIGKILL (the pod's grace).
GRACE_SECONDS = 5
#: How long log readers get to drain after a container ended.
DRAIN_SECONDS = 2.0
#: What every container gets unless ContainerConfig.env says otherwise: collective
#: libraries bind to loopback, as the nodes rendezvous on 127.0.0.1 over the host network.
DEFAULT_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


@dataclass
class _Running:
    """A started container: its log reader, and its exit code once ``done``."""

    container: Any
    reader: threading.Thread
    code: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ContainerRunner:
    """One container per pod in a Docker/Podman engine (see
    :mod:`kf_trainer_core.backends.local.container`). ``settings`` is the job's plan entry: the
    :class:`~kf_trainer_core.config.ContainerConfig` fields plus ``trainer_image``."""

    def __init__(
        self,
        settings: JSON,
        *,
        namespace: str,
        name: str,
        uid: str,
        workspace: Path,
        run_dir: Path,
        cwd: str,
    ) -> None:
        self.settings = settings
        self.namespace, self.name, self.uid = namespace, name, uid
        self.workspace = workspace
        self.run_dir = run_dir
        self.cwd = cwd
        self._engine: Engine | None = None
        self._running: dict[str, _Running] = {}
        self._pulled: set[str] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ engine

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = connect(
                str(self.settings.get("engine") or "auto"), self.settings.get("host")
            )
        return self._engine

    # ------------------------------------------------------------------ shaping

    def trainer_image(self) -> str:
        return str(self.settings.get("trainer_image") or "")

    def shape(self, pod: Any) -> None:
        container: JSON = pod.obj["spec"]["containers"][0]
        if pod.rjob in INITIALIZERS:
            image = str(
                self.settings.get("initializer_image")
                or self.settings.get("image")
                or self.trainer_image()
            )
            container["command"] = ["python3", "-m", "kf_trainer_core.backends.local.initializer"]
            env = list(container.get("env") or [])
            for entry in env:
                if entry.get("name") == "STORAGE_URI" and "value" in entry:
                    entry["value"] = self._local_source(str(entry["value"]))
            container["env"] = env
        else:
            image = self.trainer_image()
            runtime = self.settings.get("runtime_args") or []
            if not container.get("args") and runtime:
                container["args"] = list(runtime)
        container["image"] = image
        container["imagePullPolicy"] = str(self.settings.get("pull_policy") or "IfNotPresent")
        mounts = [{"name": "workspace", "mountPath": CLUSTER_WORKSPACE}]
        container["volumeMounts"] = mounts
        statuses = (pod.obj.get("status") or {}).get("containerStatuses") or []
        for status in statuses:
            status["image"] = image

    def _local_source(self, uri: str) -> str:
        """A local path or ``file://`` URI as an absolute path (mounted at the same
        place in the initializer container); other URIs unchanged."""
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return uri
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else uri).expanduser()
        if not path.is_absolute():
            path = Path(self.cwd) / path
        return str(path.resolve())

    # ------------------------------------------------------------------ starting

    def start(self, pod: Any, env: dict[str, str]) -> None:
        try:
            engine = self.engine
            image = str(pod.image)
            if not image:
                raise ImageUnavailable(
                    "InvalidImageName",
                    "no image: the TrainJob, its runtime and ContainerConfig.image name none. "
                    "Fix: set ContainerConfig(image=...) or the trainer's image.",
                )
            if image not in self._pulled:
                ensure_image(engine.client, image, str(self.settings.get("pull_policy")))
                self._pulled.add(image)
            kwargs = self._create_args(pod, env)
            container = engine.client.containers.create(image, **kwargs)
        except ImageUnavailable as exc:
            pod.start_error = (exc.reason, str(exc))
            self._forget_secrets(pod.name)
            return
        except Exception as exc:  # the engine refused (bad mount, bad limits, ...)
            pod.start_error = ("StartError", f"the container engine refused the pod: {exc}")
            self._forget_secrets(pod.name)
            return
        prefix = "podman" if self.engine.name == "podman" else "docker"
        pod.runtime_id = f"{prefix}://{container.id}"
        running = _Running(
            container,
            threading.Thread(
                target=self._pump, args=(container, pod), name=f"logs-{pod.name}", daemon=True
            ),
        )
        with self._lock:
            self._running[pod.name] = running
        try:
            container.start()
        except Exception as exc:
            with contextlib.suppress(Exception):
                container.remove(force=True)
            with self._lock:
                self._running.pop(pod.name, None)
            pod.runtime_id = ""
            self._forget_secrets(pod.name)
            pod.start_error = ("StartError", f"the container did not start: {exc}")
            return
        running.reader.start()
        threading.Thread(
            target=self._wait, args=(running, pod), name=f"wait-{pod.name}", daemon=True
        ).start()

    def _create_args(self, pod: Any, env: dict[str, str]) -> JSON:
        from docker.types import DeviceRequest, Mount

        spec: JSON = pod.obj["spec"]["containers"][0]
        initializer = pod.rjob in INITIALIZERS
        environment = {**DEFAULT_ENV, **dict(self.settings.get("env") or {}), **env}
        environment.update(
            {
                "PYTHONUNBUFFERED": "1",
                WORKSPACE_ENV: CLUSTER_WORKSPACE,
                TERMINATION_LOG_ENV: f"{RUN_MOUNT}/{pod.name}.termination-log",
            }
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        mounts = [
            Mount(CLUSTER_WORKSPACE, str(self.workspace), type="bind"),
            Mount(RUN_MOUNT, str(self.run_dir), type="bind"),
        ]
        if initializer:
            from kf_trainer_core.backends.local.procs import package_root

            kind = pod.rjob.split("-")[0]
            environment.update(
                {KIND_ENV: kind, DEST_ENV: f"{CLUSTER_WORKSPACE}/{kind}", "PYTHONPATH": CODE_MOUNT}
            )
            mounts.append(Mount(CODE_MOUNT, package_root(), type="bind", read_only=True))
            source = environment.get("STORAGE_URI", "")
            if source.startswith("/") and os.path.exists(source):
                mounts.append(Mount(source, source, type="bind", read_only=True))
        elif pod.shape is not None and pod.shape.mpi:
            hostfile = self.run_dir / "hostfile"
            slots = pod.shape.nnodes * pod.shape.nproc
            hostfile.write_text(f"127.0.0.1 slots={slots}\n")
            mounts.append(Mount(MPI_HOSTFILE, str(hostfile), type="bind", read_only=True))
        command = [str(c) for c in spec.get("command") or []]
        hidden = self._hide_secrets(pod.name, spec, env, environment, command)
        if hidden is not None:
            mounts.append(Mount(SECRET_MOUNT, str(hidden), type="bind", read_only=True))
            command = [command[0], "-c", SOURCE_SECRETS, "kf-trainer", *command]
        checkpoints = None if initializer else container_mount(environment, self.namespace)
        if checkpoints is not None:
            mounts.append(Mount(checkpoints[1], checkpoints[0], type="bind"))
        for item in self.settings.get("mounts") or []:
            parts = str(item).split(":")
            mounts.append(Mount(parts[1], parts[0], type="bind", read_only=parts[2:] == ["ro"]))
        args: JSON = {
            "name": f"kft-{pod.name}-{self.uid[:8]}",
            "environment": environment,
            "labels": {
                JOB_UID_LABEL: self.uid,
                JOB_NAME_LABEL: self.name,
                NAMESPACE_LABEL: self.namespace,
                POD_LABEL: pod.name,
            },
            "mounts": mounts,
            # The nodes rendezvous over loopback: no bridge network, no private addresses.
            "network_mode": "host",
            "init": True,
            "detach": True,
        }
        cargs = [str(c) for c in spec.get("args") or []]
        # Kubernetes' command replaces the image's ENTRYPOINT and args its CMD.
        if command:
            args["entrypoint"] = command
            args["command"] = cargs
        elif cargs:
            args["command"] = cargs
        if self.settings.get("apply_resource_limits", True) and not initializer:
            args.update(_limits(spec.get("resources") or {}, DeviceRequest, pod.gpus))
        return args

    def secret_file(self, pod_name: str) -> Path:
        """Where a pod's Secret values are kept on this machine while it runs."""
        return self.run_dir / "secrets" / f"{pod_name}.env"

    def _hide_secrets(
        self,
        pod_name: str,
        spec: JSON,
        env: dict[str, str],
        environment: dict[str, str],
        command: list[str],
    ) -> Path | None:
        """Move the values that came from Secrets out of ``environment`` into a file the
        pod's shell command sources (``docker inspect`` shows a container's environment
        to anyone who may use the engine; a mounted file it does not). Only for a
        ``sh``/``bash`` command (the suite's ``CustomTrainer`` programs): another command
        keeps them in its environment (``docs/backends.md``). The file's directory is
        private to this user; the file goes when the pod ends, and with the job."""
        if not command or os.path.basename(command[0]) not in _SHELLS:
            return None
        # Not from a Secret: the spec's plain values, and what the suite adds itself (the
        # checkpoint directory, which must stay a variable: its mount is made from it).
        plain = {str(e.get("name")) for e in spec.get("env") or [] if "value" in e}
        plain |= TRAINER_ENV_NAMES
        names = [n for n in env if n not in plain and _SHELL_NAME.fullmatch(n) and n in environment]
        if not names:
            return None
        path = self.secret_file(pod_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)  # nobody else on this machine reaches the file
        text = "".join(f"export {n}={shlex.quote(environment.pop(n))}\n" for n in names)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        # Readable by the container's user, whoever it is: only through the mount.
        path.chmod(0o644)
        return path

    def _forget_secrets(self, pod_name: str) -> None:
        with contextlib.suppress(OSError):
            self.secret_file(pod_name).unlink()

    def _pump(self, container: Any, pod: Any) -> None:
        """Copy the container's output into the pod's log, line by line."""
        buffer = b""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    self._line(pod, raw)
        except Exception as exc:  # the engine went away mid-stream
            if pod.log is not None:
                pod.log.write(f"kf-trainer-container: the log stream ended: {exc}")
        if buffer:
            self._line(pod, buffer)

    @staticmethod
    def _line(pod: Any, raw: bytes) -> None:
        pod.take_line(raw.decode("utf-8", errors="replace").rstrip("\r"))

    def _wait(self, running: _Running, pod: Any) -> None:
        try:
            result = running.container.wait()
            code = int(result.get("StatusCode", 1))
            with contextlib.suppress(Exception):
                running.container.reload()
                if (running.container.attrs.get("State") or {}).get("OOMKilled"):
                    pod.start_error = (
                        "OOMKilled",
                        "the container exceeded its memory limit and the kernel stopped it",
                    )
        except Exception as exc:
            code = 137
            pod.start_error = ("Error", f"the container engine stopped answering: {exc}")
        running.code = code
        running.done.set()

    # ------------------------------------------------------------------ watching

    def poll(self, pod: Any) -> int | None:
        with self._lock:
            running = self._running.get(pod.name)
        if running is None:
            return None
        if not running.done.is_set():
            return None
        running.reader.join(DRAIN_SECONDS)
        self._forget_secrets(pod.name)
        if self.settings.get("auto_remove", True):
            with contextlib.suppress(Exception):
                running.container.remove(force=True)
        with self._lock:
            self._running.pop(pod.name, None)
        return running.code

    # ------------------------------------------------------------------ stopping

    def stop(self, pods: Iterable[Any]) -> None:
        pods = list(pods)
        with self._lock:
            targets = [self._running.pop(p.name) for p in pods if p.name in self._running]
        for pod in pods:
            self._forget_secrets(pod.name)

        def stop_one(running: _Running) -> None:
            with contextlib.suppress(Exception):
                running.container.stop(timeout=GRACE_SECONDS)
            running.reader.join(DRAIN_SECONDS)
            with contextlib.suppress(Exception):
                running.container.remove(force=True)

        threads = [threading.Thread(target=stop_one, args=(r,), daemon=True) for r in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GRACE_SECONDS + 10)

    def sweep(self, remove: bool) -> None:
        remove = remove or bool(self.settings.get("auto_remove", True))
        try:
            client = self.engine.client
        except Exception:
            return
        remove_by_label(client, self.uid, stop_only=not remove)


def remove_by_label(client: Any, uid: str, *, stop_only: bool = False) -> int:
    """Stop (and unless ``stop_only``, remove) every container and volume labelled with
    job ``uid``; the number of containers found."""
    # sparse: no inspect per container, which would race with their removal.
    found = client.containers.list(
        all=True, sparse=True, filters={"label": f"{JOB_UID_LABEL}={uid}"}
    )
    for container in found:
        with contextlib.suppress(Exception):
            if stop_only:
                if container.status in ("running", "created", "restarting", "paused"):
                    container.kill()
            else:
                container.remove(force=True)
    if not stop_only:
        with contextlib.suppress(Exception):
            for volume in client.volumes.list(filters={"label": f"{JOB_UID_LABEL}={uid}"}):
                with contextlib.suppress(Exception):
                    volume.remove(force=True)
    return len(found)


def purge_containers(settings: JSON, uid: str) -> None:
    """Remove everything job ``uid`` left in the engine (its deletion was asked for)."""
    try:
        engine = connect(str(settings.get("engine") or "auto"), settings.get("host"))
    except Exception:
        return  # no engine answers: nothing of it can run either
    try:
        remove_by_label(engine.client, uid)
    finally:
        with contextlib.suppress(Exception):
            engine.client.close()


def _limits(resources: JSON, device_request: Any, gpus: list[str] | None = None) -> JSON:
    """Engine limits from a container's ``resources`` (limits, else requests), and a
    device request for the node's ``gpus`` (:mod:`~kf_trainer_core.backends.local.gpus`:
    given only where it asks for some, as on a cluster)."""
    from kf_trainer_core.backends.local.machine import available, quantity, wanted

    asked = wanted(resources)
    have = available()
    out: JSON = {}
    with contextlib.suppress(ValueError):
        if "cpu" in asked:
            # The engine refuses more CPUs than the machine has: cap at what it has.
            cpus = min(quantity(asked["cpu"]), have["cpu"])
            out["nano_cpus"] = max(int(cpus * 1e9), 10_000_000)
    with contextlib.suppress(ValueError):
        if "memory" in asked:
            out["mem_limit"] = max(int(quantity(asked["memory"])), 6 * 2**20)
    if gpus:
        # By id: each node its own GPUs (the engine numbers them 0.. inside).
        out["device_requests"] = [device_request(device_ids=list(gpus), capabilities=[["gpu"]])]
    return out
