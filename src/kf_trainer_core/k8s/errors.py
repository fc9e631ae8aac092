"""API failures, the same whichever client library met them."""

from __future__ import annotations

import json
from typing import Any

from kf_trainer_core.errors import KFTrainerError

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

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def conflict(self) -> bool:
        return self.code == 409

    @property
    def already_exists(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.code == 410

    @property
    def forbidden(self) -> bool:
        return self.code == 403

    @property
    def unauthorized(self) -> bool:
        return self.code == 401

    @property
    def invalid(self) -> bool:
        return self.code == 422

    def causes(self) -> list[str]:
        """Field causes of a 422 (``spec.trainer.numNodes: Invalid value ...``)."""
        found = (self.status.get("details") or {}).get("causes") or []
        return [f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in found]
