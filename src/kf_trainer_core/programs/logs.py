"""A step's log: read it now, follow it across reconnects and restarts (alone, or
beside a wait: :class:`LogFollower`), or read the progress a function reports in it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.aio import TaskScope
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.base.timeutil import parse_time
from kf_trainer_core.cluster.status import (
    failing_pod,
    job_state,
    newest_by_step,
    reports_in_log,
    with_trainer_status,
)
from kf_trainer_core.errors import SpecError, TrainJobFailedError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get, OpenLogStream, ReadLog
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.programs.reads import get_object, job_not_found, job_pods
from kf_trainer_core.spec.function import progress_from_log

if TYPE_CHECKING:
    from types import TracebackType

#: Tries of a log read that is a courtesy or evidence (progress, a finished job's
#: result, a failure's log tail) and of the first opening of a pod's log stream: a node
#: that serves no log (kwok, a virtual kubelet, a node gone) refuses at once and for
#: good, and must not hold a wait for the retry policy's seconds of back-off.
FIRST_OPEN_ATTEMPTS = COURTESY_ATTEMPTS = 2

#: Lines at the end of node-0's log searched for the result and the last progress (the
#: generated program prints both last).
PROGRESS_LOG_TAIL = 200


def _container_for(step: str) -> str:
    return step if step in (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER) else names.NODE


def _pod_for_step(pods: list[dict[str, Any]], step: str) -> Mapping[str, Any] | None:
    return newest_by_step(pods).get(step)


def _started(pod: Mapping[str, Any], container: str) -> bool:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            state = cs.get("state") or {}
            return "running" in state or "terminated" in state
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")


def _split_timestamp(line: str) -> tuple[str | None, str]:
    stamp, sep, text = line.partition(" ")
    if sep and len(stamp) >= 20 and stamp[4:5] == "-" and stamp[10:11] == "T":
        return stamp, text
    return None, line


async def _refuse_missing_step(
    api: Api, namespace: str, name: str, step: str, pods: list[dict[str, Any]]
) -> None:
    """A finished job has all the pods it will have: asking for a step it never ran is
    a mistake to name (with the steps it has), not an empty log."""
    obj = await get_object(api, namespace, name)  # TrainJobNotFoundError if it is not there
    if not pods or not job_state(obj).terminal:
        return  # the step may not have started yet
    have = sorted(newest_by_step(pods))
    raise SpecError.single(
        "step",
        f"TrainJob {name} has no step {shown(step)}; its steps are {', '.join(have)}.",
        "ask for one of those.",
        title="Invalid arguments",
    )


async def read_logs(
    api: Api,
    namespace: str,
    name: str,
    step: str = "node-0",
    tail: int | None = None,
    *,
    strict: bool = False,
    attempts: int | None = None,
) -> list[str]:
    """The log of one step now (empty if its pod has not started). ``strict``: a
    finished job without that step is a :class:`SpecError` naming its steps.
    ``attempts``: tries of the read (``None``: the retry policy's)."""
    names.require_job_name(name)
    pods = await job_pods(api, namespace, name)
    if strict and _pod_for_step(pods, step) is None:
        # No pod for the step: a job that does not exist is an error, not an empty log
        # (asked only then, so a read of a running step costs no extra request).
        await _refuse_missing_step(api, namespace, name, step, pods)
    try:
        return await _read_step_log(api, namespace, pods, step, tail, attempts)
    except ApiError as err:
        if err.code in (400, 404):  # not started yet, or gone
            return []
        raise


#: Lines read beyond a ``tail`` for those a person does not see: the generated program
#: ends a log with its last progress report and its result.
HIDDEN_SLACK = 20


async def shown_logs(
    api: Api,
    namespace: str,
    name: str,
    step: str,
    tail: int | None,
    raw: bool = False,
    *,
    strict: bool = False,
) -> list[str]:
    """:func:`read_logs` as a person reads it (:func:`kf_trainer_core.base.untrusted.shown_lines`:
    the last ``tail`` lines of those shown), or every line when ``raw``."""
    if raw:
        return await read_logs(api, namespace, name, step, tail, strict=strict)
    more = None if tail is None else tail + HIDDEN_SLACK
    shown = untrusted.shown_lines(await read_logs(api, namespace, name, step, more, strict=strict))
    return shown if tail is None else shown[len(shown) - min(tail, len(shown)) :]


async def _read_step_log(
    api: Api,
    namespace: str,
    pods: list[dict[str, Any]],
    step: str,
    tail: int | None,
    attempts: int | None = None,
) -> list[str]:
    """The last ``tail`` lines of ``step``'s log (empty before its container started);
    a read the API server refuses raises its :class:`ApiError`."""
    pod = _pod_for_step(pods, step)
    container = _container_for(step)
    if pod is None or not _started(pod, container):
        return []
    pod_name = str(pod["metadata"]["name"])
    text = await api(ReadLog(namespace, pod_name, container, tail_lines=tail, attempts=attempts))
    return str(text).splitlines()


class _LogCursor:
    """Where a log follow is: the node's timestamp of the last line emitted and how
    many emitted lines carry exactly that timestamp. A resumed read (from that
    timestamp: ``sinceTime`` is inclusive, and some kubelets round it down to the
    second) starts with lines already emitted; :meth:`accept` drops those and keeps
    every line after them, so nothing is repeated or lost."""

    def __init__(self) -> None:
        self.stamp: str | None = None
        self.seen = 0
        self._floor: Any = None
        self._pass_stamp: str | None = None
        self._pass_seen = 0
        self._skipped = 0

    def reset(self) -> None:
        """A new container instance: its log starts over."""
        self.__init__()  # type: ignore[misc]

    def start_pass(self) -> None:
        """A read from :attr:`stamp` begins."""
        self._floor = parse_time(self.stamp) if self.stamp else None
        self._pass_stamp, self._pass_seen, self._skipped = self.stamp, self.seen, 0

    def accept(self, line: str) -> str | None:
        """The line's text if it is new, else ``None``."""
        stamp, text = _split_timestamp(line)
        if stamp is not None and self._floor is not None:
            if parse_time(stamp) < self._floor:
                return None
            if stamp == self._pass_stamp and self._skipped < self._pass_seen:
                self._skipped += 1
                return None
        if stamp is not None:
            if stamp == self.stamp:
                self.seen += 1
            else:
                self.stamp, self.seen = stamp, 1
        return text

    def shown(self, line: str, raw: bool) -> str | None:
        """The line's text if it is new and to be shown, else ``None``: unless ``raw``,
        the suite's internal lines are hidden and the others made safe to print
        (:func:`kf_trainer_core.base.untrusted.shown_line`)."""
        text = self.accept(line.rstrip("\r"))
        if text is None or raw:
            return text
        return untrusted.shown_line(text)

    def resume(self, tail: int | None) -> dict[str, Any]:
        """Where a read starts: after the last line emitted, else ``tail`` lines back."""
        return {
            "since_time": self.stamp,
            "tail_lines": tail if self.stamp is None else None,
            "timestamps": True,
        }


async def follow_logs(
    api: Api,
    namespace: str,
    name: str,
    step: str = "node-0",
    *,
    tail: int | None = 1000,
    poll_interval: float = 1.0,
    start_timeout: float | None = None,
    raw: bool = False,
) -> AsyncIterator[str]:
    """A step's log lines as they are written, until its container ends: as a
    person reads them (the suite's progress and result lines hidden — a waiter shows
    them as progress and result instead —, control characters neutralised, each line
    capped), or every line as the log holds it when ``raw``.

    Waits for a pending pod instead of returning nothing; after a dropped stream it
    resumes from the last line's own timestamp (the node's clock wrote it, so no clock
    of ours is compared with it) and skips lines already emitted; replays at most
    ``tail`` lines of history on the first connect. A stream that ends as the container
    ends is followed by one read of what came after its last line: a stream cut at
    that moment (an apiserver restart, a proxy timeout) would otherwise lose the end.
    """
    names.require_job_name(name)
    container = _container_for(step)
    cursor = _LogCursor()
    waited = 0.0
    pod_name: str | None = None
    connected = False  # a stream of this pod was opened once
    while True:
        pods = await job_pods(api, namespace, name)
        pod = _pod_for_step(pods, step)
        if pod is None or not _started(pod, container):
            try:
                obj = await api(Get(TRAINJOBS, namespace, name))
            except ApiError as err:
                if not err.not_found:
                    raise
                if pod_name is None and waited == 0:
                    # Asked to follow a job that is not there: an error, not a silent end.
                    raise await job_not_found(api, namespace, name) from None
                return  # deleted while followed: its log ends here
            if job_state(obj).terminal and pod is None:
                return  # the job ended without this step ever running
            stuck = failing_pod([pod]) if pod is not None else None
            # Stuck (image pull...): nothing will be written. An unschedulable pod is not:
            # it starts once a node has room (capacity freed, a node added).
            if stuck is not None and stuck[2] != "Unschedulable":
                return
            if start_timeout is not None and waited >= start_timeout:
                return
            await api.sleep(poll_interval)
            waited += poll_interval
            continue
        current = str(pod["metadata"]["name"])
        if pod_name is not None and current != pod_name:
            cursor.reset()  # a new pod (restart): its log starts over
            connected = False
        pod_name = current
        # A node that never served this pod's log (kwok, a virtual kubelet, a node gone)
        # refuses at once and for good: tried twice, its error ends the follow in a
        # fraction of a second rather than after the policy's back-off. Once a stream
        # was open, a refusal is more likely a kubelet restart: the full policy.
        attempts = None if connected else FIRST_OPEN_ATTEMPTS
        call = OpenLogStream(
            namespace, current, container, **cursor.resume(tail), attempts=attempts
        )
        dropped = False
        try:
            async with api.stream(call) as lines:
                connected = True
                cursor.start_pass()
                try:
                    async for data in lines:
                        text = cursor.shown(data.decode("utf-8", errors="replace"), raw)
                        if text is not None:
                            yield text
                except ApiError:
                    # Cut, or silent for the transport's idle timeout (a dead connection,
                    # or a quiet log): resumed after the last line either way.
                    dropped = True
        except ApiError as err:
            if err.code in (400, 404):
                await api.sleep(poll_interval)
                continue
            raise
        # The stream ended: finished container, or a cut connection to resume.
        pods = await job_pods(api, namespace, name)
        pod = _pod_for_step(pods, step)
        if pod is None:
            return
        phase = (pod.get("status") or {}).get("phase")
        if (
            not dropped
            and phase in ("Succeeded", "Failed")
            and str(pod["metadata"]["name"]) == pod_name
        ):
            try:
                rest = await api(ReadLog(namespace, pod_name, container, **cursor.resume(tail)))
            except ApiError:
                return  # the pod went meanwhile: nothing more to read
            cursor.start_pass()
            for line in str(rest).splitlines():
                text = cursor.shown(line, raw)
                if text is not None:
                    yield text
            return
        await api.sleep(0.2 if not dropped else poll_interval)


class LogFollower:
    """A step's log followed beside a wait, each line to ``sink`` as it is written: the
    one follower of the client's ``run`` and of a task's wait (``tasks/``). A block
    around the wait::

        async with LogFollower(client.get_job_logs(name, step, follow=True), print):
            await client.wait_outputs(name)

    Leaving the block after the job ended — the wait returned, or raised
    :class:`~kf_trainer_core.errors.TrainJobFailedError` — gives the log up to
    :attr:`DRAIN_SECONDS` to deliver its last lines; any other way out (a timeout, the
    job deleted, the task cancelled or killed) stops it at once. Log trouble never
    fails the wait: it is told to ``on_error`` (by default, a last line to ``sink``).
    ``lines`` or ``sink`` ``None``: nothing is followed (a caller with no log to show
    keeps one shape)."""

    #: After the job ends, its log gets this long to drain the last lines. Its stream
    #: ends by itself once the containers have; the bound only covers an endpoint that
    #: keeps it open.
    DRAIN_SECONDS = 5.0

    def __init__(
        self,
        lines: AsyncIterator[str] | None,
        sink: Callable[[str], None] | None,
        *,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        #: Lines given to the sink so far.
        self.shown = 0
        #: What ended the follow early, if anything did.
        self.failed: Exception | None = None
        self._lines, self._sink, self._on_error = lines, sink, on_error
        self._scope = TaskScope()
        self._task: asyncio.Task[None] | None = None

    @property
    def followed(self) -> bool:
        """Whether the log was shown: followed without trouble, or some of it shown
        before trouble (else the caller may show its tail)."""
        return self._task is not None and (self.failed is None or self.shown > 0)

    async def __aenter__(self) -> LogFollower:
        if self._lines is not None and self._sink is not None:
            self._task = self._scope.start(self._follow(self._lines, self._sink), name="kf-logs")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._task is not None and (exc is None or isinstance(exc, TrainJobFailedError)):
                await TaskScope.drain(self._task, self.DRAIN_SECONDS)
        finally:
            # Also when the drain itself is cancelled: the follow never outlives the wait.
            await self._scope.cancel_all()

    async def _follow(self, lines: AsyncIterator[str], sink: Callable[[str], None]) -> None:
        try:
            # Closed when the follow stops (its stream with it), not when collected.
            async with contextlib.aclosing(lines) as stream:  # type: ignore[type-var]
                async for line in stream:
                    # Cleaned and capped by the client (a job's output is untrusted).
                    sink(line)
                    self.shown += 1
        except Exception as exc:  # the log is a courtesy: the wait decides
            self.failed = exc
            if self._on_error is not None:
                self._on_error(exc)
            else:
                sink(f"[kf-trainer] log stream ended: {exc}")


async def with_log_progress(api: Api, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the progress its function printed in node-0's log as
    ``status.trainerStatus``, where the cluster has no status server to write it.
    Unchanged when the job has a ``trainerStatus`` or does not report in its log.
    (Waits call it now and then; a job view that wants live progress can too.)"""
    if (obj.get("status") or {}).get("trainerStatus") or not reports_in_log(obj):
        return obj
    try:
        lines = await read_logs(
            api, namespace, str(obj["metadata"]["name"]), "node-0", 50, attempts=COURTESY_ATTEMPTS
        )
    except ApiError:
        return obj  # progress is a courtesy: a log that cannot be read shows none
    subject = f"TrainJob {namespace}/{obj['metadata']['name']}"
    status = progress_from_log(lines, subject)
    return obj if status is None else with_trainer_status(obj, status)
