"""API failures, the same whichever client library met them."""

from __future__ import annotations

import json
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


class ApiError(KFTrainerError):
    """A failed API request, with the Kubernetes ``Status`` when the server sent one.

    ``code`` is the HTTP status, or 0 when no answer came (connection refused, reset or
    timed out).
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
        super().__init__(f"{text}: {message}" if message else text)

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
