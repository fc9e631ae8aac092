"""TrainJob names: the CRD's rules, the JobSet pod-name limit, and deterministic names
generated from an orchestrator identity (dag/task/run, flow run/task, pipeline run/task).

The CRD allows RFC 1035 labels of up to 63 characters, but the JobSet controller names
pods ``<job>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>``, and pod hostnames must
stay within 63 characters too. So the longest usable name depends on the runtime's
longest replicated-job name: 33 with a ``dataset-initializer``, 35 with a
``model-initializer``, 44 with a ``launcher``, 48 with ``node`` only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from kf_trainer_core.base.errors import InvalidNameError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields._model import fix

# The steps' names, where the name limits come from (kept importable from here).
from kf_trainer_core.k8s.trainjob import DATASET_INITIALIZER as DATASET_INITIALIZER
from kf_trainer_core.k8s.trainjob import LAUNCHER as LAUNCHER
from kf_trainer_core.k8s.trainjob import MODEL_INITIALIZER as MODEL_INITIALIZER
from kf_trainer_core.k8s.trainjob import NODE as NODE

NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
CRD_MAX_LENGTH = 63

# "-" + "-<jobIndex>-<podIndex>-" + 5 random characters, with single-digit indexes.
_POD_SUFFIX = len("-") + len("-0-0-") + 5
#: The longest name usable whatever the runtime (its steps include dataset-initializer).
SAFE_MAX_LENGTH = CRD_MAX_LENGTH - _POD_SUFFIX - len("dataset-initializer")


def max_name_length(replicated_jobs: Iterable[str]) -> int:
    """The longest TrainJob name whose pods fit, for a runtime with these replicated
    jobs."""
    longest = max((len(r) for r in replicated_jobs), default=len(NODE))
    return min(CRD_MAX_LENGTH, CRD_MAX_LENGTH - _POD_SUFFIX - longest)


def name_problem(name: str, limit: int = CRD_MAX_LENGTH, why: str = "") -> str | None:
    """Why ``name`` cannot name a TrainJob (with the fix), or ``None`` if it can."""
    if not NAME_PATTERN.match(name):
        return fix(
            f"{shown(name)} is not a valid TrainJob name (RFC 1035 label: lowercase letters, "
            "digits and '-', starting with a letter, ending alphanumeric).",
            f"use e.g. {shown(slugify(name) or 'train-job')}.",
        )
    if len(name) > limit:
        reason = why or "the CRD allows 63"
        return fix(
            f"{shown(name)} has {len(name)} characters; {reason}, so at most {limit}.",
            f"shorten it to {limit} characters, e.g. {shown(fit_name(name, limit))}.",
        )
    return None


def slugify(text: str) -> str:
    """Lowercase ``text`` into an RFC 1035 label fragment (may be empty)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    slug = re.sub(r"-{2,}", "-", slug).strip("-")
    slug = slug.lstrip("0123456789-")
    return slug


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def fit_name(name: str, limit: int = SAFE_MAX_LENGTH) -> str:
    """``name`` made valid and at most ``limit`` long; a cut name gets a short hash of
    the original so that different long names stay different."""
    slug = slugify(name) or "job"
    if len(slug) <= limit and slug == name:
        return slug
    suffix = _digest(name, 6)
    head = slug[: max(1, limit - len(suffix) - 1)].rstrip("-")
    return f"{head}-{suffix}"


def name_from_identity(
    *parts: str | int | None, prefix: str = "", limit: int = SAFE_MAX_LENGTH
) -> str:
    """A deterministic TrainJob name for an orchestrator identity.

    The same parts always give the same name (so a retried task finds its job again) and
    different parts give different names (a hash of all parts is appended), while the
    readable head comes from ``prefix`` or the leading parts. The result always fits
    ``limit`` (default: the limit of any runtime).
    """
    identity = "/".join("" if p is None else str(p) for p in parts)
    # Ten hex digits (40 bits) keep collisions negligible; tiny limits get fewer.
    suffix = _digest(identity, max(4, min(10, limit - 3)))
    readable = slugify(prefix) if prefix else slugify("-".join(str(p) for p in parts[:2] if p))
    room = limit - len(suffix) - 1
    head = readable[:room].rstrip("-") or "tj"[:room]
    return f"{head}-{suffix}"


def require_job_name(name: object, argument: str = "name") -> str:
    """``name`` when it can name an existing TrainJob, else :class:`InvalidNameError`
    naming ``argument`` and the fix.

    Every client operation on one job checks its name with this before its first
    request: an empty name would otherwise reach the API as the *collection* URL
    (``DELETE …/trainjobs/`` deletes every TrainJob of the namespace; a GET lists them).
    """
    if not isinstance(name, str):
        raise InvalidNameError(
            f"{argument}={shown(name)} is a {type(name).__name__}, not a TrainJob name. Fix: pass "
            "the job's name as a string (submit() returns it as .job.name, train() as is)."
        )
    if not name.strip():
        raise InvalidNameError(
            f"{argument}={shown(name)} is empty: it names no TrainJob (sent as is, it would "
            "address every TrainJob of the namespace). Fix: pass the job's name as submit() "
            "or train() returned it; to act on several jobs use stop_unfinished(identity=...) "
            "or label_selector=...."
        )
    if len(name) > CRD_MAX_LENGTH or not NAME_PATTERN.match(name):
        raise InvalidNameError(
            f"{argument}={shown(name)} is not a TrainJob name (lowercase letters, digits and '-', "
            f"starting with a letter, ending alphanumeric, at most {CRD_MAX_LENGTH} "
            "characters), so no such job can exist. Fix: pass the job's name as submit() or "
            "train() returned it (list_jobs() shows the namespace's jobs)."
        )
    return name
