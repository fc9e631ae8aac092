"""A stand-in for the scheduler and the kubelets: pod phases, container states, image
pulls, Events, logs, and the scripted run of a container (its scenario step)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from functools import partial

from kf_trainer_core.k8s.objects import (
    CONTAINER_CREATING,
    CONTAINERS_NOT_READY,
    POD_COMPLETED,
    POD_FAILED,
    pod_conditions,
)
from kf_trainer_core.k8s.quantity import parse_quantity
from kf_trainer_core.k8s.trainjob import SCHEDULER
from kf_trainer_core.manifest.builder import is_function_launch
from kf_trainer_core.spec.function import TERMINATION_MESSAGE_LIMIT
from kf_trainer_core.testing.controller.jobset import container, names
from kf_trainer_core.testing.controller.parts import ClusterParts
from kf_trainer_core.testing.controller.pods import (
    container_status_of,
    default_logs,
    fmt,
    full_image,
    placeholders,
    truncate_bytes,
)
from kf_trainer_core.testing.controller.state import PodSim, Sim, safe
from kf_trainer_core.testing.controller.vocab import JSON, NODE_GPUS, SIM_NODES
from kf_trainer_core.testing.scenarios import (
    KWOK_TERMINATION_MESSAGE_ANNOTATION,
    NOT_RUN_LINE,
    evict_pod_status,
)
from kf_trainer_core.testing.store import PODS, TRAINJOBS, format_timestamp

_DEADLINE = "Pod was active on the node longer than the specified deadline"


#: What each simulated node offers: the same as each of kwok's nodes on the real control
#: plane, so that a pod too big for them is left unscheduled on both.
_NODE_CAPACITY = {"cpu": 64, "memory": 256 * 2**30, "nvidia.com/gpu": NODE_GPUS}


def _insufficient(spec: JSON) -> list[str]:
    """The resources a pod asks more of than any node has, as the scheduler counts: the
    sum over its containers (requests, else limits), or its largest init container."""

    def ask(c: JSON, name: str) -> float:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(name, (res.get("limits") or {}).get(name))
        try:
            return float(parse_quantity(value)) if value is not None else 0.0
        except ValueError:
            return 0.0

    short = []
    for name, capacity in _NODE_CAPACITY.items():
        run = sum(ask(c, name) for c in spec.get("containers") or [])
        init = max((ask(c, name) for c in spec.get("initContainers") or []), default=0.0)
        if max(run, init) > capacity:
            short.append(name)
    return sorted(short)


def _unschedulable_message(short: list[str]) -> str:
    reasons = ", ".join(f"4 Insufficient {name}" for name in short)
    return (
        f"0/4 nodes are available: {reasons}. no new claims to deallocate, preemption: 0/4 "
        "nodes are available: 4 Preemption is not helpful for scheduling."
    )


class Kubelet:
    """Drives each pod from ``Pending`` to ``Succeeded``/``Failed`` as its step says."""

    def __init__(self, cx: ClusterParts) -> None:
        self.cx = cx
        self._node_seq = itertools.count()
        self._ip_seq = itertools.count()

    def _after(self, pod: PodSim, delay: float, fn: Callable[[], None]) -> None:
        self.cx.worker.after(delay, pod.job.sim.token, fn)

    # ------------------------------------------------------------------ scheduling

    def admit(self, pod: PodSim) -> None:
        """A new pod: schedule it (after the scenario's unschedulable time); a pod that
        asks for more GPUs, CPU or memory than a node has stays Pending, Unschedulable, as the real
        scheduler leaves it; a pod with scheduling gates stays Pending, SchedulingGated
        (the real API server sets that condition; the scheduler skips the pod)."""
        if pod.spec.get("schedulingGates"):
            gated = "Scheduling is blocked due to non-empty scheduling gates"
            self._pending(pod, "SchedulingGated", gated)
            return
        short = _insufficient(pod.spec)
        if short:
            self._unschedulable(pod, _unschedulable_message(short))
            return
        unschedulable = pod.job.sim.scenario.unschedulable_for
        if unschedulable > 0:
            self._unschedulable(pod)
            self._after(pod, unschedulable, partial(self._schedule, pod))
        else:
            self._schedule(pod)

    def _unschedulable(self, pod: PodSim, message: str | None = None) -> None:
        # The scenario's unschedulable time: as if the GPUs were taken meanwhile.
        message = message or _unschedulable_message(["nvidia.com/gpu"])
        self._pending(pod, "Unschedulable", message)
        self.cx.events.pod(pod, "Warning", "FailedScheduling", message, component=SCHEDULER)

    def _pending(self, pod: PodSim, reason: str, message: str) -> None:
        """Leave ``pod`` Pending with ``PodScheduled=False`` for ``reason``, as the real
        scheduler (Unschedulable) or API server (SchedulingGated) does."""
        now = format_timestamp()

        def fn(obj: JSON) -> None:
            obj["status"] = {
                "phase": "Pending",
                "qosClass": (obj.get("status") or {}).get("qosClass", "BestEffort"),
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    }
                ],
            }

        self.write(pod, fn)

    def _schedule(self, pod: PodSim) -> None:
        if not pod.active:
            return
        n = next(self._node_seq) % SIM_NODES
        pod.node = f"kf-sim-node-{n}"
        pod.host_ip = f"172.18.0.{n + 2}"
        now = format_timestamp()
        pod.waiting = {"reason": CONTAINER_CREATING}

        def fn(obj: JSON) -> None:
            obj["spec"]["nodeName"] = pod.node
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Pending",
                    "hostIP": pod.host_ip,
                    "hostIPs": [{"ip": pod.host_ip}],
                    "startTime": now,
                    "conditions": pod_conditions(
                        now,
                        ready=False,
                        reason=CONTAINERS_NOT_READY,
                        not_ready=names(pod.containers),
                    ),
                    "containerStatuses": [
                        container_status_of(c, waiting={"reason": CONTAINER_CREATING})
                        for c in pod.containers
                    ],
                }
            )

        self.write(pod, fn, spec_too=True)
        sim = pod.job.sim
        events = self.cx.events
        events.pod(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {sim.namespace}/{pod.name} to {pod.node}",
            component=SCHEDULER,
        )
        for c in pod.containers:
            events.pod(pod, "Normal", "Pulling", f'Pulling image "{c.get("image")}"', container=c)
        step = pod.job.rjob.step
        delay = step.pending_delay if step.pending_delay is not None else sim.scenario.pending_delay
        if step.outcome == "image-pull":
            self._after(pod, delay, partial(self._pull_failed, pod))
        else:
            self._after(pod, delay, partial(self._start, pod))

    # ------------------------------------------------------------------ image pulls

    def _pull_failed(self, pod: PodSim) -> None:
        if not pod.active:
            return
        sim = pod.job.sim
        main = container(pod.containers, pod.main) or pod.containers[0]
        image = str(main.get("image") or "")
        err = (
            f'failed to pull and unpack image "{full_image(image)}": failed to resolve reference '
            f'"{full_image(image)}": {full_image(image)}: not found'
        )
        full = f"rpc error: code = NotFound desc = {err}"
        events = self.cx.events
        events.pod(
            pod, "Warning", "Failed", f'Failed to pull image "{image}": {full}', container=main
        )
        events.pod(pod, "Warning", "Failed", "Error: ErrImagePull", container=main)
        self._set_waiting(pod, main, {"reason": "ErrImagePull", "message": full})
        self._after(
            pod,
            sim.scenario.pending_delay or 0.01,
            partial(self._pull_backoff, pod, main, image, full),
        )
        fail_after = pod.job.rjob.step.image_pull_fail_after
        if fail_after is not None:
            self._after(pod, fail_after, partial(self._pull_give_up, pod))

    def _pull_backoff(self, pod: PodSim, main: JSON, image: str, err: str) -> None:
        if not pod.active:
            return
        events = self.cx.events
        events.pod(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', container=main)
        events.pod(pod, "Warning", "Failed", "Error: ImagePullBackOff", container=main)
        self._set_waiting(
            pod,
            main,
            {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}": ErrImagePull: {err}',
            },
        )

    def _set_waiting(self, pod: PodSim, main: JSON, waiting: JSON) -> None:
        pod.waiting = waiting

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status["containerStatuses"] = [
                container_status_of(
                    c,
                    waiting=waiting
                    if c is main or c.get("name") == main.get("name")
                    else {"reason": CONTAINER_CREATING},
                )
                for c in pod.containers
            ]

        self.write(pod, fn)

    def _pull_give_up(self, pod: PodSim) -> None:
        # A pod stuck pulling is failed by its deadline (activeDeadlineSeconds on the pod,
        # or a queueing system's wait-for-pods-ready timeout).
        if not pod.active:
            return
        now = format_timestamp()

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Failed",
                    "reason": "DeadlineExceeded",
                    "message": _DEADLINE,
                    "conditions": pod_conditions(now, ready=False, reason=POD_FAILED),
                }
            )

        pod.phase = "Failed"
        self.write(pod, fn)
        self.cx.events.pod(pod, "Normal", "DeadlineExceeded", _DEADLINE)
        self._close_logs(pod)
        self.cx.status.mark(pod.job.sim, pod.job)
        self.cx.job_ctl.pod_done(pod, success=False)

    # ------------------------------------------------------------------ running

    def _start(self, pod: PodSim) -> None:
        if not pod.active:
            return
        cx = self.cx
        sim, job = pod.job.sim, pod.job
        for c in pod.containers:
            image = str(c.get("image") or "")
            took = random.randint(300, 2500)
            cx.events.pod(
                pod,
                "Normal",
                "Pulled",
                f'Successfully pulled image "{image}" in {took}ms ({took}ms including '
                f"waiting). Image size: {random.randint(50, 9000) * 1_000_000} bytes.",
                container=c,
            )
            cx.events.pod(
                pod, "Normal", "Created", f"Created container: {c.get('name')}", container=c
            )
            cx.events.pod(
                pod, "Normal", "Started", f"Started container {c.get('name')}", container=c
            )
        now = format_timestamp()
        pod.phase, pod.started, pod.ready, pod.started_at, pod.waiting = (
            "Running",
            True,
            True,
            now,
            None,
        )
        n = next(self._ip_seq)
        pod.ip = f"10.244.{n // 250 % 250}.{n % 250 + 2}"

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Running",
                    "podIP": pod.ip,
                    "podIPs": [{"ip": pod.ip}],
                    "conditions": pod_conditions(now, ready=True),
                    "containerStatuses": [
                        container_status_of(c, running_since=now) for c in pod.containers
                    ],
                }
            )
            if pod.spec.get("initContainers"):
                status["initContainerStatuses"] = [
                    container_status_of(
                        c,
                        terminated={
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        },
                    )
                    for c in pod.spec["initContainers"]
                ]

        self.write(pod, fn)
        cx.status.mark(sim, job)
        cx.job_ctl.check_startup(sim)  # e.g. an MPI launcher waits for its nodes to be Ready
        self._run(pod)

    def _run(self, pod: PodSim) -> None:
        sim, rjob = pod.job.sim, pod.job.rjob
        sc, step = sim.scenario, rjob.step
        if callable(sc.executor):
            self.cx.runner.start(pod, sc.executor)
            return
        if rjob.kind == "server":
            self._schedule_logs(pod, default_logs(pod, "serve"), 0.0)
            return  # serves (sshd) until the JobSet is done
        not_run = None
        if sc.executor == "function" and rjob.kind == "trainer":
            not_run = not_run_reason(self._command(pod))
        if rjob.kind == "trainer" and (
            sc.executor == "exec" or (sc.executor == "function" and not_run is None)
        ):
            self.cx.runner.start(pod, None)
            return
        outcome = step.outcome or "succeed"
        duration = float(step.duration or 0.0)
        if outcome in ("fail", "oom", "evicted"):
            ranks = [r for r in step.ranks or [0] if r < rjob.completions] or [0]
            if pod.index not in ranks or pod.job.index != 0:
                outcome = "hang"  # a healthy rank waits on its failed peer
        lines = step.logs if step.logs is not None else default_logs(pod, outcome)
        if step.logs is not None:
            lines = [fmt(line, placeholders(pod)) for line in lines]
        if not_run is not None and pod.is_rank0:
            # Said where the user looks: the job's log (and so its result_missing).
            lines = [NOT_RUN_LINE.format(why=not_run), *lines]
        self._schedule_logs(pod, lines, duration)
        trainer_rank0 = pod.is_rank0 and rjob.kind == "trainer"
        if trainer_rank0 and sc.progress:
            n = len(sc.progress)
            for i, update in enumerate(sc.progress):
                self._after(pod, duration * (i + 1) / (n + 1), partial(self._progress, sim, update))
        if outcome == "succeed":
            message = step.message
            if message is None and trainer_rank0:
                message = sc.termination_message
            kwok = pod.annotations.get(KWOK_TERMINATION_MESSAGE_ANNOTATION)
            if kwok is not None:  # as kwok's nodes do on the real control plane
                message = kwok
            self._after(pod, duration, partial(self.finish, pod, 0, "Completed", message))
        elif outcome in ("fail", "oom"):
            code = int(step.exit_code if step.exit_code is not None else 1)
            reason = "OOMKilled" if outcome == "oom" else "Error"
            # kwok's failing stages keep the annotation's message too.
            message = pod.annotations.get(KWOK_TERMINATION_MESSAGE_ANNOTATION, step.message)
            self._after(pod, duration, partial(self.finish, pod, code, reason, message))
        elif outcome == "evicted":
            self._after(pod, duration, partial(self.finish, pod, 137, "Error", None, evicted=True))
        # never-finish / hang: runs until killed

    @staticmethod
    def _command(pod: PodSim) -> list[str]:
        main = container(pod.containers, pod.main) or (pod.containers or [{}])[0]
        return [str(a) for a in main.get("command") or []]

    def _schedule_logs(self, pod: PodSim, lines: list[str], duration: float) -> None:
        if not lines:
            return
        n = len(lines)
        batches: dict[float, list[str]] = {}
        for i, line in enumerate(lines):
            batches.setdefault(duration * i / n, []).append(line)
        for offset, batch in batches.items():
            text = "\n".join(batch)
            if offset <= 0:
                self._log_lines(pod, text)
            else:
                self._after(pod, offset, partial(self._log_lines, pod, text))

    def _log_lines(self, pod: PodSim, text: str) -> None:
        if pod.active and not pod.logs_closed:
            self.log(pod, text)

    def log(self, pod: PodSim, text: str) -> None:
        """Lines of the pod's main container: its log, and the tail a
        ``FallbackToLogsOnError`` message is made of."""
        self.cx.logs.append(pod.namespace, pod.name, pod.main, text)
        pod.tail.extend(text.split("\n"))

    def _progress(self, sim: Sim, update: tuple[int | None, int | None, dict[str, str]]) -> None:
        if sim.state != "active" or sim.terminal or sim.suspended:
            return
        pct, remaining, metrics = update
        status: JSON = {"lastUpdatedTime": format_timestamp()}
        if pct is not None:
            status["progressPercentage"] = pct
        if remaining is not None:
            status["estimatedRemainingSeconds"] = remaining
        if metrics:
            status["metrics"] = [{"name": k, "value": v} for k, v in metrics.items()]

        def fn(obj: JSON) -> None:
            obj.setdefault("status", {})["trainerStatus"] = status

        store = self.cx.store
        safe(store.mutate, TRAINJOBS, sim.namespace, sim.name, fn, subresource="status")

    # ------------------------------------------------------------------ ending

    def finish(
        self,
        pod: PodSim,
        exit_code: int,
        reason: str,
        message: str | None,
        *,
        evicted: bool = False,
    ) -> None:
        """The main container exited with ``exit_code``: the pod's terminal phase."""
        if not pod.active or pod.phase != "Running":
            return
        run = pod.run
        if run is not None:
            self.cx.runner.stop(run)
            pod.run = None
        main = container(pod.containers, pod.main) or pod.containers[0]
        if (
            message is None
            and exit_code != 0
            and main.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            # The kubelet falls back to the log tail: at most 80 lines / 2048 bytes.
            message = truncate_bytes("\n".join(list(pod.tail)[-80:]), 2048)
        if message is not None:
            message = truncate_bytes(message, TERMINATION_MESSAGE_LIMIT)
        self._close_logs(pod)
        now = format_timestamp()
        success = exit_code == 0
        pod.phase = "Succeeded" if success else "Failed"
        pod.ready = False
        terminal_reason = POD_COMPLETED if success else POD_FAILED

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            statuses = []
            for c in pod.containers:
                term: JSON = {
                    "exitCode": exit_code if c is main else 0,
                    "reason": reason if c is main else "Completed",
                    "startedAt": pod.started_at or now,
                    "finishedAt": now,
                }
                if c is main and message:
                    term["message"] = message
                statuses.append(container_status_of(c, terminated=term))
            status.update(
                {
                    "phase": pod.phase,
                    "conditions": pod_conditions(now, ready=False, reason=terminal_reason),
                    "containerStatuses": statuses,
                }
            )
            if evicted:
                evict_pod_status(status, now)

        self.write(pod, fn)
        self.cx.status.mark(pod.job.sim, pod.job)
        self.cx.job_ctl.pod_done(pod, success)

    def kill(self, pod: PodSim, *, delete: bool) -> None:
        """Stop a pod: its containers are killed (Killing events), logs end, and
        (``delete``) the pod object goes."""
        if not pod.alive:
            return
        cx = self.cx
        was_running = pod.active and pod.started
        pod.alive = False
        if pod.run is not None:
            cx.runner.stop(pod.run)
            pod.run = None
        if was_running:
            for c in pod.containers:
                cx.events.pod(
                    pod, "Normal", "Killing", f"Stopping container {c.get('name')}", container=c
                )
        self._close_logs(pod)
        job = pod.job
        if job.pods.get(pod.index) is pod:
            del job.pods[pod.index]
        key = (job.sim.namespace, pod.name)
        if cx.pods.get(key) is pod:
            del cx.pods[key]
        if delete:
            safe(cx.store.delete, PODS, job.sim.namespace, pod.name)
        cx.status.mark(job.sim, job)

    def _close_logs(self, pod: PodSim) -> None:
        if pod.logs_closed:
            return
        pod.logs_closed = True
        for c in pod.containers:
            self.cx.logs.close(pod.namespace, pod.name, str(c.get("name")))

    def write(self, pod: PodSim, fn: Callable[[JSON], None], *, spec_too: bool = False) -> None:
        """Change the pod object (its status; ``spec_too``: the whole object)."""
        subresource = "*" if spec_too else "status"
        safe(self.cx.store.mutate, PODS, pod.namespace, pod.name, fn, subresource=subresource)


def not_run_reason(command: list[str]) -> str | None:
    """Why a trainer container with ``command`` cannot run on this machine (``None``: it
    can — a function's program the suite built, which installs nothing)."""
    if is_function_launch(command):
        return None
    if not command:
        return "it runs its image's entrypoint"
    if command[0] == "mpirun":
        return "an MPI launch"
    if command[:2] == ["bash", "-c"] and len(command) > 5 and command[3] == "kf-trainer":
        return "its packages_to_install would be installed on this machine"
    return "it runs a command of its image"
