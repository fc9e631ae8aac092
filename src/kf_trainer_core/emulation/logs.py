"""Container logs as the kubelet keeps and serves them: each line stamped with the
node's clock, and the ``pods/log`` query — which container, whether it has started,
``sinceTime``/``sinceSeconds``, ``tailLines``, ``timestamps``, ``limitBytes``.

One set of rules for the test bed (lines in memory, served over HTTP) and the local
backend (CRI-style ``<RFC3339Nano> <text>`` files, read in process), so that a log
query means the same on both and what the conformance tests prove of the test bed
holds for the local backend too. Stamps are nanoseconds since the epoch. Standard
library and :mod:`kf_trainer_core.k8s` only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.status import StatusError

JSON = dict[str, Any]
#: One log line: its stamp (ns since the epoch) and its text.
Line = tuple[int, str]

_STAMP = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?\Z"
)


def format_stamp(ns: int) -> str:
    """A stored line's stamp: RFC 3339 with all nine digits, so that in a log file the
    text order is the time order."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def shown_stamp(ns: int) -> str:
    """A stamp as ``timestamps=true`` shows it: Go's RFC3339Nano, whose fraction drops
    its trailing zeros (and its dot when nothing is left)."""
    text = format_stamp(ns)
    head, _, fraction = text[:-1].partition(".")
    fraction = fraction.rstrip("0")
    return f"{head}.{fraction}Z" if fraction else f"{head}Z"


def parse_stamp(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp (any fraction length)."""
    m = _STAMP.match(text.strip())
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {shown(text)}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction = (m.group(7) or "")[:9].ljust(9, "0")
    zone = m.group(8) or "Z"
    offset = 0
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    when = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    return (int(when.timestamp()) - offset) * 1_000_000_000 + int(fraction)


def since_time(text: str) -> int:
    """A ``sinceTime`` query parameter; the API server's 400 when it is malformed."""
    try:
        return parse_stamp(text)
    except ValueError:
        raise StatusError.bad_request(
            f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse'
        ) from None


def stamp_of(when: datetime) -> int:
    """``when`` in nanoseconds since the epoch (exact: no float on the way)."""
    delta = when.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def select(lines: Iterable[Line], since: int | None, tail: int | None) -> list[Line]:
    """The lines a query returns: stamped at or after ``since``, then the last
    ``tail`` of them (``0``: none)."""
    out = [line for line in lines if since is None or line[0] >= since]
    if tail is not None:
        out = out[-tail:] if tail > 0 else []
    return out


def render(lines: Sequence[Line], timestamps: bool) -> bytes:
    """The response body of ``lines``: each newline-terminated, stamped with
    ``timestamps``."""
    if timestamps:
        return "".join(f"{shown_stamp(t)} {text}\n" for t, text in lines).encode()
    return "".join(f"{text}\n" for _, text in lines).encode()


def log_container(pod: JSON, requested: str | None) -> str:
    """The container a log request reads: the one named (a 400 when the pod has none
    of that name), else the pod's only container (a 400 naming the choices)."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [c.get("name") for c in spec.get("containers") or []]
    init = [c.get("name") for c in spec.get("initContainers") or []]
    ephemeral = [c.get("name") for c in spec.get("ephemeralContainers") or []]
    if not requested:
        if len(containers) == 1:
            return str(containers[0])
        message = (
            f"a container name must be specified for pod {name}, choose one of: "
            f"[{' '.join(containers)}]"
        )
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise StatusError.bad_request(message)
    if requested not in containers + init + ephemeral:
        raise StatusError.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def check_started(pod: JSON, container: str, wrote_logs: Callable[[], bool]) -> None:
    """Refuse (400, the kubelet's words) the log of a container still waiting to
    start; ``wrote_logs()``: whether it has a log already (asked of a pod without a
    status yet)."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") != container:
                continue
            state = cs.get("state") or {}
            waiting = state.get("waiting")
            if "running" in state or "terminated" in state or waiting is None:
                return
            reason = waiting.get("reason") or "ContainerCreating"
            raise StatusError.bad_request(_waiting_message(container, name, reason))
    if status.get("phase") in ("Running", "Succeeded", "Failed") or wrote_logs():
        return
    raise StatusError.bad_request(_waiting_message(container, name, "ContainerCreating"))


def _waiting_message(container: str, pod: str, reason: str) -> str:
    # The kubelet's wording for the common image failures.
    if reason == "ErrImagePull":
        detail = "image can't be pulled"
    elif reason == "ImagePullBackOff":
        detail = "trying and failing to pull image"
    else:
        detail = reason
    return f'container "{container}" in pod "{pod}" is waiting to start: {detail}'
