"""API failures, the same whichever client library met them."""

from __future__ import annotations

import json
import re
from typing import Any

from kf_trainer_core.base.errors import KFTrainerError

#: Codes worth retrying: a dropped connection (0), throttling and server trouble.
RETRYABLE_CODES = frozenset({0, 408, 429, 500, 502, 503, 504})


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``metav1.Status`` failure body, shaped (and ordered) as the apiserver sends it;
    the test server and the local backend answer with it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    # The apiserver omits empty details entirely (omitempty on a pointer).
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class _CodeIs:
    """A read-only attribute of :class:`ApiError`: whether its HTTP status is ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __get__(self, err: ApiError | None, owner: type[ApiError] | None = None) -> bool:
        return err is not None and err.code == self.code

    def __set__(self, err: ApiError, value: Any) -> None:
        raise AttributeError("read-only: set the error's code instead")


#: Where a client chooses its cluster and credentials, as its fixes name them. The
#: ``kf-trainer`` command names its flags instead (``ApiError.fix(settings)``).
CLIENT_SETTINGS = "the client's KubernetesConfig (kubeconfig, context)"

#: Failures with code 0 that are not a connection that failed.
_NOT_UNREACHABLE = frozenset({"BadWatchLine"})
#: How the API server says it could not reach a node's kubelet for a log.
_KUBELET = re.compile(r"/containerLogs/|:10250\b")


class ApiError(KFTrainerError):
    """A failed API request, with the Kubernetes ``Status`` when the server sent one.

    ``code`` is the HTTP status, or 0 when no answer came (connection refused, reset or
    timed out). Where the fix is known whoever asked (credentials refused, a request
    forbidden, an API server out of reach), the message ends with it, naming the
    client's settings; :meth:`fix` words it for other settings (the CLI's flags).
    """

    def __init__(
        self,
        code: int,
        reason: str = "",
        message: str = "",
        *,
        status: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.status = status or {}
        self.retry_after = retry_after
        text = f"{code} {reason}".strip() if code else reason or "connection failed"
        #: What failed, without the fix.
        self.detail = f"{text}: {message}" if message else text
        if self.unreachable:
            self.detail = f"cannot reach the API server: {self.detail}"
        fix = self.fix()
        super().__init__(_with_fix(self.detail, fix) if fix else self.detail)

    @property
    def unreachable(self) -> bool:
        """No answer came: the connection failed (refused, reset, timed out)."""
        return self.code == 0 and self.reason not in _NOT_UNREACHABLE

    def fix(self, settings: str = CLIENT_SETTINGS) -> str | None:
        """How to fix a failure whose fix does not depend on the request: credentials
        the API server refused (401) or that may not do this (403), an API server out
        of reach (0). ``settings``: where the user chose the cluster and credentials."""
        if self.code == 401:
            return (
                f"check the credentials of {settings}: the API server did not accept them "
                "(an expired token or certificate, or a context of another cluster)."
            )
        if self.code == 403:
            return (
                f"check the credentials of {settings} and that they may do this in this "
                "namespace (the message names the verb and resource RBAC must grant)."
            )
        if self.unreachable:
            return (
                f"check that the API server of {settings} is reachable (its address, the "
                "network, a VPN or proxy), or run on this machine with the local backend."
            )
        if self.kubelet_unreachable:
            return (
                "the API server answered, but could not reach the kubelet of the pod's node "
                "to read the log (the node may be gone, or closed to the API server): read "
                "the log where the cluster keeps logs, or ask the cluster's admins about "
                "the node."
            )
        return None

    @property
    def kubelet_unreachable(self) -> bool:
        """A log read the API server could not pass on to the node's kubelet (a 500
        naming the kubelet's ``containerLogs`` endpoint or its port 10250)."""
        return self.code == 500 and bool(_KUBELET.search(self.message or ""))

    @classmethod
    def from_response(
        cls, code: int, body: bytes | str | None, headers: Any = None, fallback: str = ""
    ) -> ApiError:
        """Build from an HTTP answer, reading the ``Status`` body and ``Retry-After``."""
        status: dict[str, Any] = {}
        if body:
            try:
                parsed = json.loads(body)
                if isinstance(parsed, dict):
                    status = parsed
            except ValueError:
                status = {
                    "message": body.decode(errors="replace") if isinstance(body, bytes) else body
                }
        retry_after: float | None = None
        raw = None
        if headers is not None:
            try:
                raw = headers.get("Retry-After")
            except AttributeError:
                raw = None
        if raw is None:
            raw = (status.get("details") or {}).get("retryAfterSeconds")
        if raw is not None:
            try:
                retry_after = float(raw)
            except (TypeError, ValueError):
                retry_after = None
        return cls(
            code,
            str(status.get("reason") or fallback),
            str(status.get("message") or ""),
            status=status,
            retry_after=retry_after,
        )

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES

    # Whether the answer was 404, 409, ... (read as ``err.not_found``).
    not_found = _CodeIs(404)
    conflict = _CodeIs(409)
    gone = _CodeIs(410)
    forbidden = _CodeIs(403)
    unauthorized = _CodeIs(401)
    invalid = _CodeIs(422)

    @property
    def already_exists(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"

    def causes(self) -> list[str]:
        """Field causes of a 422 (``spec.trainer.numNodes: Invalid value ...``)."""
        found = (self.status.get("details") or {}).get("causes") or []
        return [f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in found]


def _with_fix(problem: str, fix: str) -> str:
    """``problem`` ended by one full stop, then ``Fix: fix``."""
    text = problem.rstrip()
    if not text.endswith((".", "!", "?")):
        text += "."
    return f"{text} Fix: {fix}"
