"""The failures an API server answers with a ``metav1.Status``, as the serving side
raises them: one vocabulary for the Kubernetes-API test server and the local backend.

:class:`StatusError` carries the code, reason, message and details of the Status body;
its constructors word each failure as the apiserver's generic registry does. The
client side never sees it: transports turn the body into
:class:`~kf_trainer_core.k8s.errors.ApiError`.

Standard library only (the local backend's supervisor imports it on every job start).
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.k8s.errors import status_body
from kf_trainer_core.k8s.resources import Resource

__all__ = ["StatusError"]

JSON = dict[str, Any]


def _details(res: Resource, name: str) -> JSON:
    # NotFound / AlreadyExists / Conflict name the *resource* (plural) in details.kind.
    d: JSON = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


class StatusError(Exception):
    """A failure that the API answers with a metav1.Status (code, reason, message)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JSON | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        #: Seconds for a ``Retry-After`` response header (429/503/504), if any.
        self.retry_after = retry_after

    def status(self) -> JSON:
        """The ``metav1.Status`` body, shaped as the apiserver sends it."""
        return status_body(self.code, self.reason, self.message, self.details)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.reason!r}, {self.message!r})"

    # Constructors for the errors the registry raises, with the apiserver's wording.
    @classmethod
    def not_found(cls, res: Resource, name: str) -> StatusError:
        """``404 NotFound``: ``trainjobs.trainer.kubeflow.org "x" not found``."""
        return cls(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))

    @classmethod
    def already_exists(cls, res: Resource, name: str) -> StatusError:
        """``409 AlreadyExists``."""
        return cls(
            409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name)
        )

    @classmethod
    def conflict(cls, res: Resource, name: str, why: str) -> StatusError:
        """``409 Conflict`` (stale resourceVersion, failed precondition)."""
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
            _details(res, name),
        )

    @classmethod
    def bad_request(cls, message: str) -> StatusError:
        """``400 BadRequest`` (no details, as the apiserver sends it)."""
        return cls(400, "BadRequest", message)

    @classmethod
    def gone(cls, message: str) -> StatusError:
        """``410 Expired`` (what the apiserver calls a compacted resourceVersion)."""
        return cls(410, "Expired", message)

    @classmethod
    def invalid(cls, res: Resource, name: str, causes: list[tuple[str, str, str]]) -> StatusError:
        """``422 Invalid``; ``causes`` are ``(field, reason, message)``, message without field."""
        parts = [f"{f}: {m}" for f, _, m in causes]
        text = "; ".join(parts) if len(parts) <= 1 else "[" + ", ".join(parts) + "]"
        return cls(
            422,
            "Invalid",
            f'{res.kind}{"." + res.group if res.group else ""} "{name}" is invalid: {text}',
            {
                "name": name,
                **({"group": res.group} if res.group else {}),
                "kind": res.kind,
                "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
            },
        )

    @classmethod
    def path_not_found(cls) -> StatusError:
        """``404`` for a path that names no resource (empty details, as the apiserver)."""
        return cls(404, "NotFound", "the server could not find the requested resource", {})
