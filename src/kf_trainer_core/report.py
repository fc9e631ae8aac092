"""Report progress and metrics from inside a training function.

    from kf_trainer_core.report import report, track

    def train(epochs: int = 10):
        from kf_trainer_core.report import report, track
        for epoch in track(range(epochs)):          # progress and time left, per epoch
            loss = ...
            report(metrics={"loss": loss, "epoch": epoch})

Where the reports go, all from rank 0 of node 0 only (other ranks are no-ops unless
``all_ranks=True``):

* a line ``##kf-trainer-progress## {"progressPercentage": ...}`` in the node's log, which
  the waiting side reads on any cluster, the local backend writes into the job's
  ``status.trainerStatus``, and which stays in the log for later;
* when the Trainer's status server is enabled (feature gate ``TrainJobStatus``: the
  controller injects ``KUBEFLOW_TRAINER_SERVER_URL`` and the paths of a CA certificate
  and a projected token), a ``POST {"trainerStatus": {...}}`` with the Bearer token, as
  the Kubeflow SDK's ``update_trainjob_status`` does, so the TrainJob's status shows it.

Reports are coalesced: the latest values go out at most once per interval (5 s, or
``KF_TRAINER_REPORT_INTERVAL``) - the log line from the calling thread (one write, so it
never splits a line of the function's own), the POST from a daemon thread - so
``report`` is cheap enough for every step and never waits on the network. Each state is
POSTed once. The generated program sends the last state when the function returns (or
raises); every POST, and that final flush as a whole, has a total deadline (5 s), so a
status server that answers slowly, or never, cannot hold the end of training.

The token goes only to the server the controller named: ``https://`` only, verified
with the injected CA certificate (nothing is sent without it), redirects never followed.
A metric name longer than the CRD's 64 characters is shortened to a unique name (its
start, ``~`` and a digest of the whole name), so two names never merge; the first such
name, and metrics past the 256th, are said once on stderr.
Outside a job every call is a no-op; nothing here raises.

This module imports only the standard library and runs on Python 3.8+: the generated
program carries its source into pods whose image does not have kf-trainer-suite
installed (see ``docs/progress.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

T = TypeVar("T")

__all__ = ["MARKER", "flush", "report", "track"]

#: Rank 0 prints the trainer status on a line that starts with this marker.
MARKER = "##kf-trainer-progress## "
#: Injected by the Trainer's ``TrainJobStatus`` plugin: the endpoint, the CA
#: certificate's path and the projected service-account token's path.
URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
#: Seconds between two sends (the SDK's and the status server's expectation: 5).
INTERVAL_ENV = "KF_TRAINER_REPORT_INTERVAL"
#: ``1`` turns reporting on in a process that the generated program did not start.
ENABLE_ENV = "KF_TRAINER_REPORT"
DEFAULT_INTERVAL = 5.0
#: A status server that does not answer within this time is skipped for this send.
POST_TIMEOUT = 5.0
#: The TrainJob CRD's limits on ``trainerStatus.metrics``.
MAX_METRICS = 256
MAX_TEXT = 64


def _rank_zero() -> bool:
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    node = os.environ.get("PET_NODE_RANK") or os.environ.get("JOB_COMPLETION_INDEX") or "0"
    return rank == "0" and node == "0"


def _metric_name(name: str) -> str:
    """The name as the status server takes it: at most 64 characters, and distinct
    names stay distinct (a long one keeps its start and gains a digest of the whole)."""
    if len(name) <= MAX_TEXT:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:10]
    return name[: MAX_TEXT - 11] + "~" + digest


def _text(value: object) -> str:
    if isinstance(value, float):
        value = format(value, ".6g")
    return str(value)[:MAX_TEXT]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _Reporter:
    """The process's reporting state; one per process, shared by all threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.wake = threading.Event()
        self.enabled = False
        self.percent: int | None = None
        self.eta: int | None = None
        self.metrics: dict[str, str] = {}
        self.dirty = False
        self.reported = False
        self.last_send: float | None = None
        self.last_line: float | None = None
        self.thread: threading.Thread | None = None
        self.warned = False
        self.said: set[str] = set()
        self.sends = 0
        #: Whether the latest state was POSTed successfully (a failed one is retried by
        #: the final flush; one that arrived is never sent twice).
        self.delivered = False

    def active(self) -> bool:
        return self.enabled or bool(os.environ.get(URL_ENV)) or os.environ.get(ENABLE_ENV) == "1"

    def interval(self) -> float:
        try:
            return max(0.0, float(os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL))
        except ValueError:
            return DEFAULT_INTERVAL

    def update(
        self, progress: float | None, eta_seconds: float | None, metrics: Mapping[str, Any] | None
    ) -> None:
        with self.lock:
            if progress is not None:
                self.percent = max(0, min(100, int(float(progress))))
            if eta_seconds is not None:
                self.eta = max(0, min(2**31 - 1, int(float(eta_seconds))))
            for key, value in (metrics or {}).items():
                name = _metric_name(str(key))
                text = _text(value)
                if not name or not text:
                    continue
                if name != key:
                    self.say_once(
                        "long-name",
                        f"metric name {str(key)[:80]!r}... is longer than {MAX_TEXT} "
                        f"characters; it is reported as {name!r} (names that long get a "
                        "digest, so they never merge).",
                    )
                if name not in self.metrics and len(self.metrics) >= MAX_METRICS:
                    self.say_once(
                        "too-many",
                        f"more than {MAX_METRICS} metric names; {name!r} and later new "
                        "names are not reported (the TrainJob status holds "
                        f"{MAX_METRICS}).",
                    )
                    continue
                self.metrics[name] = text
            self.dirty = self.reported = True
            now = time.monotonic()
            line = None
            if self.last_line is None or now - self.last_line >= self.interval():
                # The marker is printed by the training thread itself, so it never lands
                # in the middle of one of the function's own lines.
                line, self.last_line = self.snapshot(), now
            posting = bool(os.environ.get(URL_ENV))
            if posting and self.thread is None:
                self.thread = threading.Thread(
                    target=self._loop, name="kf-trainer-report", daemon=True
                )
                self.thread.start()
        if line is not None:
            _print_marker(line)
        if posting:
            self.wake.set()

    def say_once(self, what: str, message: str) -> None:
        """One line on stderr, the first time only (``report`` runs every step)."""
        if what in self.said:
            return
        self.said.add(what)
        with contextlib.suppress(Exception):  # a closed stderr must not stop training
            print("kf-trainer: " + message, file=sys.stderr, flush=True)

    def snapshot(self) -> dict[str, Any]:
        status: dict[str, Any] = {"lastUpdatedTime": _now()}
        if self.percent is not None:
            status["progressPercentage"] = self.percent
        if self.eta is not None:
            status["estimatedRemainingSeconds"] = self.eta
        if self.metrics:
            status["metrics"] = [{"name": k, "value": v} for k, v in self.metrics.items()]
        return status

    def _loop(self) -> None:
        while True:
            self.wake.wait()
            if self.last_send is not None:
                left = self.last_send + self.interval() - time.monotonic()
                if left > 0:
                    time.sleep(left)  # later reports merge into the one send
            # One send at a time, each with the state of its moment: a report taken
            # earlier can never arrive after a later one (the final flush waits here).
            with self.send_lock:
                with self.lock:
                    self.wake.clear()
                    if not self.dirty:
                        continue
                    self.dirty = False
                    status = self.snapshot()
                    self.last_send = time.monotonic()
                self.send(status)

    def send(self, status: dict[str, Any], timeout: float = POST_TIMEOUT) -> None:
        """POST to the status server (from the daemon thread, or the final flush),
        returning within ``timeout`` whatever the server does."""
        self.sends += 1
        url = os.environ.get(URL_ENV)
        if url:
            error = _post(url, status, timeout)
            with self.lock:
                # Delivered only if no report came in meanwhile (that one is dirty).
                self.delivered = error is None and not self.dirty
            if error and not self.warned:
                self.warned = True
                print(
                    "kf-trainer: cannot report to the TrainJob status server ("
                    + error
                    + "); progress is still in this log.",
                    file=sys.stderr,
                    flush=True,
                )

    def flush(self, timeout: float = POST_TIMEOUT) -> None:
        """Send the latest state now (the last one must not wait for the interval),
        all within ``timeout``: waiting for a send under way included."""
        deadline = time.monotonic() + max(0.0, timeout)
        # Waits for a send under way (within the deadline), so the final state is the
        # last one the status server gets.
        turn = self.send_lock.acquire(timeout=max(0.0, timeout))
        try:
            with self.lock:
                if not self.reported:
                    return
                # Each state is POSTed once: not again if the daemon thread has just
                # delivered it (report() then flush() at once used to send it twice).
                post = self.dirty or not self.delivered
                self.dirty = False
                status = self.snapshot()
                self.last_send = self.last_line = time.monotonic()
            # Always printed: the log's tail then holds the final state, right before the
            # result, for a waiter without a status server.
            _print_marker(status)
            left = deadline - time.monotonic()
            if not turn:
                self.say_once(
                    "flush",
                    "the status server did not answer in time; the final progress is "
                    "in this log only.",
                )
            elif post and left > 0 and os.environ.get(URL_ENV):
                self.send(status, left)
        finally:
            if turn:
                self.send_lock.release()


def _print_marker(status: dict[str, Any]) -> None:
    try:
        text = MARKER + json.dumps(status, sort_keys=True, separators=(",", ":")) + "\n"
        sys.stdout.write(text)  # one write: the line stays whole
        sys.stdout.flush()
    except Exception:  # a closed stdout must not stop training
        pass


#: The most of a status server's answer that is read (the answer is not used).
MAX_ANSWER = 1 << 16


def _post(url: str, status: dict[str, Any], timeout: float) -> str | None:
    """POST ``{"trainerStatus": status}``; the reason it failed, or ``None``.

    Returns within ``timeout`` in total, whatever the server does (a server that sends
    one byte every few seconds never trips a per-read timeout): the request runs in a
    daemon thread whose socket is shut when the deadline passes."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            # The token is a credential: never in clear text, never to a guessed host.
            return "the server URL is not https://host/...; the token goes over TLS only"
        token_path = os.environ.get(TOKEN_ENV)
        if not token_path:
            return "no token path in " + TOKEN_ENV
        ca = os.environ.get(CA_CERT_ENV)
        if not ca or not os.path.isfile(ca):
            return "no CA certificate at " + CA_CERT_ENV + "; the server cannot be verified"
        # A projected token is rotated by the kubelet: read it for every send.
        with open(token_path) as fh:
            token = fh.read().strip()
    except Exception as exc:
        return type(exc).__name__
    outcome: list[str | None] = []
    sockets: list[socket.socket] = []
    done, abandoned = threading.Event(), threading.Event()

    def attempt() -> None:
        try:
            outcome.append(_request(parts, ca, token, status, timeout, sockets, abandoned))
        except Exception as exc:
            outcome.append(type(exc).__name__)
        finally:
            done.set()

    worker = threading.Thread(target=attempt, name="kf-trainer-post", daemon=True)
    worker.start()
    if not done.wait(max(0.0, timeout)):
        abandoned.set()  # a request still connecting never sends (it would arrive late)
        for sock in sockets:
            # The plain socket's shutdown: wakes a read blocked in the TLS layer.
            with contextlib.suppress(Exception):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        return "no answer within " + format(timeout, "g") + "s"
    return outcome[0] if outcome else "no answer"


def _request(
    parts: Any,
    ca: str,
    token: str,
    status: dict[str, Any],
    timeout: float,
    sockets: list[socket.socket],
    abandoned: threading.Event,
) -> str | None:
    """One POST over TLS verified with ``ca`` only; a redirect is an answer, not
    followed (the token must not go to another host or port)."""
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=ca)  # this CA only, hostname checked

    class _Connection(http.client.HTTPSConnection):
        def connect(self) -> None:
            raw = socket.create_connection((self.host, self.port), self.timeout)
            sockets.append(raw)
            self.sock = context.wrap_socket(raw, server_hostname=self.host)

    conn = _Connection(parts.hostname, parts.port or 443, timeout=timeout, context=context)
    try:
        conn.connect()
        if abandoned.is_set():
            return "abandoned"
        path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        conn.request(
            "POST",
            path,
            body=json.dumps({"trainerStatus": status}).encode(),
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        resp.read(MAX_ANSWER)
        if resp.status >= 300:
            return "HTTP " + str(resp.status)
        return None
    finally:
        conn.close()


_REPORTER = _Reporter()


def report(
    progress: float | None = None,
    eta_seconds: float | None = None,
    metrics: Mapping[str, Any] | None = None,
    *,
    all_ranks: bool = False,
) -> bool:
    """Report how far training is: ``progress`` in percent (0-100), the estimated
    seconds left, and metrics (``{"loss": 0.41}``; values become strings, the latest
    value of each name is kept). Returns whether the report was taken; never raises.

    Only rank 0 of node 0 reports unless ``all_ranks`` is true (the job has one
    status, so other ranks would overwrite it). A no-op outside a TrainJob.
    """
    try:
        if not _REPORTER.active() or not (all_ranks or _rank_zero()):
            return False
        _REPORTER.update(progress, eta_seconds, metrics)
        return True
    except Exception:
        return False


def track(
    iterable: Iterable[T], total: int | None = None, *, every: int = 1, start: int = 0
) -> Iterator[T]:
    """Yield the items of ``iterable`` and report progress and time left after every
    ``every`` items: ``for epoch in track(range(epochs)): ...``. ``total`` defaults
    to ``start + len(iterable)``; without a total only metrics reported inside the loop
    show.

    ``start``: the items done before this loop, e.g. the epochs of a checkpoint this
    attempt resumed from: ``for epoch in track(range(first, epochs), start=first)``
    reports ``first / epochs`` at once and counts on from there (the time left is
    estimated from this attempt's own pace).
    """
    start = max(0, int(start))
    if total is None:
        try:
            total = start + len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    began = time.monotonic()
    if total:
        report(progress=100.0 * min(start, total) / total)
    for done, item in enumerate(iterable, 1):
        yield item
        if total and (done % max(1, every) == 0 or start + done >= total):
            elapsed = time.monotonic() - began
            left = elapsed / done * max(0, total - start - done)
            report(progress=100.0 * min(start + done, total) / total, eta_seconds=left)


def flush(timeout: float = POST_TIMEOUT) -> None:
    """Send what was reported and not yet sent, now. The generated program calls it
    when the training function returns or raises."""
    try:
        _REPORTER.flush(timeout)
    except Exception:
        return


def _enable() -> None:
    """Called by the generated program: this process runs a training function."""
    _REPORTER.enabled = True


def parse_line(line: str) -> dict[str, Any] | None:
    """The trainer status on a progress marker line (``None`` if it is not one)."""
    idx = line.find(MARKER)
    if idx < 0:
        return None
    try:
        status = json.loads(line[idx + len(MARKER) :])
    except (ValueError, RecursionError):
        return None
    return status if isinstance(status, dict) else None
