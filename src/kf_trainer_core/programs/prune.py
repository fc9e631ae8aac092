"""Pruning finished TrainJobs, as a program: pick them by age, by count per identity,
by status, label selector or identity prefix (and by the retention each job was
stamped with), then delete them one by one, each only if it is still the object that
was picked.

Never deleted: a job that has not finished (created, queued, suspended, running), a job
already being deleted, and — unless asked for — a job the suite did not create. Each
job goes through the one safe delete (:func:`~kf_trainer_core.programs.cancel.remove`:
the right to delete checked first, suspended, deleted in the background, its JobSet
waited out), which reads it again first and deletes it only if it is still the uid that
was listed, still finished and still due.

Attempt 0 of an identity is the identity's lock (a rerun makes a later attempt only
while attempt 0 exists: :func:`~kf_trainer_core.programs.submit.submit_identity`).
Prune keeps it while its identity keeps any other job, deletes it after the identity's
other jobs, and reads the identity again just before: a rerun that made, or is making
(its claim on attempt 0), a later attempt meanwhile keeps it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.marks import IDENTITY_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import JobState, job_state
from kf_trainer_core.fields import retention
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE, list_all
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.trainjob import condition
from kf_trainer_core.manifest.selectors import SUITE_SELECTOR
from kf_trainer_core.programs.cancel import Guard, remove
from kf_trainer_core.programs.submit import attempt_of, claim_of, jobs_for_identity

FINISHED = (JobState.COMPLETE.value, JobState.FAILED.value)
#: What is shown of an identity read from a cluster (untrusted text).
_SHOWN = 200


@dataclass(frozen=True)
class PruneRules:
    """Which finished jobs ``prune`` deletes.

    ``older_than`` (seconds since the job finished) and ``keep_last`` (the newest N
    attempts of each identity are kept) are the caller's rules; given together, a job
    must satisfy both. With ``honour_retention`` a job is also due when the
    :class:`~kf_trainer_core.fields.retention.Retention` it was stamped with says so.
    ``statuses``, ``label_selector``, ``identity_prefix`` and ``include_foreign``
    narrow (or widen) the jobs looked at; ``limit`` caps the deletes of one run.
    """

    older_than: float | None = None
    keep_last: int | None = None
    statuses: tuple[str, ...] = FINISHED
    label_selector: str | None = None
    identity_prefix: str | None = None
    include_foreign: bool = False
    honour_retention: bool = True
    limit: int | None = None

    @classmethod
    def of(cls, options: retention.PruneOptions) -> PruneRules:
        """The rules a caller's :class:`~kf_trainer_core.fields.retention.PruneOptions`
        give (``dry_run`` is the run's, not a rule), checked: a ``ValueError`` naming the
        option and the fix comes before any request."""
        unknown = [k for k in options if k not in retention.PRUNE_OPTIONS]
        if unknown:
            raise TypeError(f"prune got an unexpected keyword argument {shown(unknown[0])}")
        given: dict[str, Any] = {k: v for k, v in options.items() if k != "dry_run"}
        if given.get("older_than") is not None:
            given["older_than"] = retention.parse_age(given["older_than"])
        statuses = given.get("statuses", FINISHED)
        # Names as given: ``check`` refuses any that is not a finished state, naming it.
        given["statuses"] = tuple(
            s.value if isinstance(s, JobState) else str(s)
            for s in ([statuses] if isinstance(statuses, str) else statuses)
        )
        rules = cls(**given)
        rules.check()
        return rules

    def check(self) -> None:
        """Refuse rules that pick nothing or everything, before any request."""
        if self.older_than is not None and not (
            math.isfinite(self.older_than) and self.older_than >= 0
        ):
            raise ValueError(f"older_than={shown(self.older_than)}. Fix: use 0 seconds or more.")
        for what, value in (("keep_last", self.keep_last), ("limit", self.limit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{what}={shown(value)} is no count. Fix: pass a whole number.")
        if self.keep_last is not None and self.keep_last < 0:
            raise ValueError(f"keep_last={self.keep_last}. Fix: use 0 or more.")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit={self.limit}. Fix: use 1 or more (or None for no cap).")
        bad = [s for s in self.statuses if s not in FINISHED]
        if bad or not self.statuses:
            raise ValueError(
                f"statuses={shown(list(self.statuses))}: only finished jobs are pruned. Fix: pick "
                "from 'Complete' and 'Failed' (unfinished jobs are never deleted)."
            )
        if self.label_selector is not None and not self.label_selector.strip():
            raise ValueError(
                "label_selector='' selects nothing in particular. Fix: name a label, e.g. "
                "'team=a', or leave it out."
            )
        if self.identity_prefix is not None and not self.identity_prefix.strip("/ "):
            raise ValueError(
                f"identity_prefix={shown(self.identity_prefix)} names no identity. Fix: pass the "
                "start of an identity, e.g. 'my_dag/' (or leave it out)."
            )
        if self.older_than is None and self.keep_last is None and not self.honour_retention:
            raise ValueError(
                "prune has no rule: no older_than, no keep_last, and the jobs' own retention "
                "is ignored. Fix: give older_than (e.g. '7d') and/or keep_last."
            )


@dataclass(frozen=True)
class PruneEntry:
    """One job ``prune`` picked, and why."""

    name: str
    identity: str | None
    attempt: int
    status: str
    finished_at: str | None
    age_seconds: float
    why: str


@dataclass(frozen=True)
class PruneReport:
    """What ``prune`` found and did. ``selected`` is the plan (what a dry run shows);
    ``deleted`` what was deleted; ``skipped`` the picked jobs left alone, with why
    (changed or replaced since listed, already gone); ``kept`` the finished jobs the
    rules did not pick, ``unfinished`` those never picked, and ``over_limit`` the due
    jobs left for a later run by ``limit``."""

    namespace: str
    dry_run: bool
    selected: list[PruneEntry] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    kept: int = 0
    unfinished: int = 0
    over_limit: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (an orchestrator's result, ``-o json``)."""
        data = asdict(self)
        data["skipped"] = [{"name": n, "why": w} for n, w in self.skipped]
        return data

    def summary(self) -> str:
        """One line: what was done."""
        verb = "would delete" if self.dry_run else "deleted"
        count = len(self.selected) if self.dry_run else len(self.deleted)
        parts = [f"{self.namespace}: {verb} {count} finished TrainJob(s)"]
        if self.skipped:
            parts.append(f"{len(self.skipped)} left alone (changed or gone)")
        if self.over_limit:
            parts.append(f"{self.over_limit} more due (over the limit)")
        parts.append(f"kept {self.kept} finished and {self.unfinished} unfinished")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """What a task logs of the report: each picked job (its status, identity and
        why), each picked job left alone and why, then :meth:`summary`."""
        verb = "Would delete" if self.dry_run else "Picked"
        return [
            *(
                f"{verb} {e.name} ({e.status}, identity {e.identity or '-'}): {e.why}"
                for e in self.selected
            ),
            *(f"Left {name} alone: {why}" for name, why in self.skipped),
            self.summary(),
        ]


@dataclass(frozen=True)
class _Seen:
    """What prune needs of a listed job (the rest of the object is dropped per page)."""

    name: str
    uid: str
    identity: str | None
    attempt: int
    created: str
    status: JobState
    finished_at: str | None
    deleting: bool
    suite: bool
    after: int | None
    keep: int | None


def _seen(obj: Mapping[str, Any]) -> _Seen:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    state = job_state(obj)
    cond = condition(obj, state.value) if state.terminal else None
    after, keep = retention.stamped(annotations, f"TrainJob {meta.get('name', '')}")
    ident = annotations.get(IDENTITY_ANNOTATION)
    return _Seen(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        identity=ident if isinstance(ident, str) and ident else None,
        attempt=attempt_of(obj),
        created=str(meta.get("creationTimestamp") or ""),
        status=state,
        finished_at=str((cond or {}).get("lastTransitionTime") or "") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        suite=(meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
        after=after,
        keep=keep,
    )


def _epoch(stamp: str | None) -> float | None:
    moment = untrusted.timestamp(stamp)
    return moment.timestamp() if moment is not None else None


def _ranks(jobs: list[_Seen]) -> dict[str, int]:
    """Each job's place among its identity's attempts, newest first (0 = newest). The
    attempt number decides (it is what submit trusts), then creation time, then name.
    Jobs without an identity are each their own newest."""
    groups: dict[str, list[_Seen]] = {}
    for job in jobs:
        if job.identity is not None:
            groups.setdefault(job.identity, []).append(job)
    ranks: dict[str, int] = {}
    for members in groups.values():
        members.sort(key=lambda j: (j.attempt, j.created, j.name), reverse=True)
        ranks.update({j.name: i for i, j in enumerate(members)})
    return ranks


def _shown(identity: str | None) -> str | None:
    if identity is None:
        return None
    text = "".join(c if c.isprintable() else "?" for c in identity)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _why(rules: PruneRules, job: _Seen, age: float | None, rank: int) -> str | None:
    """Why ``job`` is due, or ``None`` if it is kept."""
    reasons = []
    if rules.older_than is not None or rules.keep_last is not None:
        old = rules.older_than is None or (age is not None and age >= rules.older_than)
        # A job without an identity is no attempt of anything: keep_last never picks it.
        many = rules.keep_last is None or (job.identity is not None and rank >= rules.keep_last)
        if old and many:
            if rules.older_than is not None:
                reasons.append(f"finished more than {rules.older_than:g}s ago")
            if rules.keep_last is not None:
                reasons.append(f"not among the newest {rules.keep_last} of its identity")
    if rules.honour_retention:
        if job.after is not None and age is not None and age >= job.after:
            reasons.append(f"its retention: {job.after}s after it finished")
        if job.keep is not None and job.identity is not None and rank >= job.keep:
            reasons.append(f"its retention: keep the last {job.keep}")
    return "; ".join(reasons) or None


def plan_prune(
    namespace: str, objs: list[Mapping[str, Any]] | list[_Seen], rules: PruneRules, now: float
) -> tuple[PruneReport, list[tuple[_Seen, int]]]:
    """The selection, pure: which of the listed jobs are due (oldest first, each with
    its rank among its identity's attempts), and the report of what was kept."""
    jobs = [o if isinstance(o, _Seen) else _seen(o) for o in objs]
    ranks = _ranks(jobs)
    due: list[tuple[float, _Seen, int, PruneEntry]] = []
    counts = {"kept": 0, "unfinished": 0}
    for job in jobs:
        if job.deleting or not (job.suite or rules.include_foreign):
            continue
        if not job.status.terminal:
            counts["unfinished"] += 1
            continue
        if job.status.value not in rules.statuses or not _prefixed(job, rules.identity_prefix):
            continue
        finished = _epoch(job.finished_at) or _epoch(job.created)
        age = None if finished is None else max(0.0, now - finished)
        rank = ranks.get(job.name, 0)
        why = _why(rules, job, age, rank)
        if why is None:
            counts["kept"] += 1
            continue
        entry = PruneEntry(
            name=job.name,
            identity=_shown(job.identity),
            attempt=job.attempt,
            status=job.status.value,
            finished_at=job.finished_at,
            age_seconds=round(age or 0.0, 3),
            why=why,
        )
        due.append((finished or 0.0, job, rank, entry))
    due.sort(key=lambda d: (d[0], d[1].name))
    going_all = {j.name for _, j, _, _ in due}
    held = _name_holders(jobs, going_all)
    counts["kept"] += sum(1 for _, j, _, _ in due if j.name in held)
    eligible = [d for d in due if d[1].name not in held]
    picked = _within_limit(jobs, eligible, rules.limit)
    report = PruneReport(
        namespace=namespace,
        dry_run=True,
        selected=[e for *_, e in picked],
        kept=counts["kept"],
        unfinished=counts["unfinished"],
        over_limit=len(eligible) - len(picked),
    )
    return report, [(j, r) for _, j, r, _ in picked]


_Due = tuple[float, _Seen, int, PruneEntry]


def _within_limit(jobs: list[_Seen], eligible: list[_Due], limit: int | None) -> list[_Due]:
    """The eligible jobs one run deletes, at most ``limit``, oldest first, the
    identities' locks last. The limit counts what can be deleted now: held locks were
    left out before it applies, and a lock whose identity's other jobs are not all
    deleted in this run waits for a later one (which the oldest-first order reaches),
    so every run with something eligible makes progress."""
    locks = _lock_names(jobs)
    picked: list[_Due] = []
    waiting: list[_Due] = []
    for d in eligible:
        if limit is not None and len(picked) >= limit:
            break
        (waiting if d[1].name in locks else picked).append(d)
    going = {d[1].name for d in picked}
    for d in waiting:
        if limit is not None and len(picked) >= limit:
            break
        job = d[1]
        others = [j for j in jobs if j.identity == job.identity and j.name != job.name]
        if all(j.name in going or j.deleting for j in others):
            picked.append(d)
    return picked


def _lock_names(jobs: list[_Seen]) -> set[str]:
    """Attempt 0 of every identity that has other jobs: the identity's lock."""
    with_others = {j.identity for j in jobs if j.identity is not None and j.attempt > 0}
    return {j.name for j in jobs if j.attempt == 0 and j.identity in with_others}


def _name_holders(jobs: list[_Seen], going: set[str]) -> set[str]:
    """Attempt 0 of every identity that keeps another job after this prune. Submit
    creates attempt 0 first and looks further only when that name is taken, so attempt
    0's name is what tells a rerun that its identity has jobs: with it gone and a later
    attempt left, a rerun would create attempt 0 again — training again beside a finished
    attempt, or beside a running one (two live jobs of one identity)."""
    staying = {
        j.identity
        for j in jobs
        if j.identity is not None and j.attempt > 0 and j.name not in going and not j.deleting
    }
    return {j.name for j in jobs if j.attempt == 0 and j.identity in staying}


def _prefixed(job: _Seen, prefix: str | None) -> bool:
    return prefix is None or (job.identity is not None and job.identity.startswith(prefix))


async def prune(
    api: Api,
    namespace: str,
    rules: PruneRules,
    *,
    dry_run: bool = False,
    page_size: int | None = DEFAULT_PAGE_SIZE,
    now: float | None = None,
) -> PruneReport:
    """List the namespace's TrainJobs a page at a time (each page reduced to what the
    rules need), pick the due ones (:func:`plan_prune`) and, unless ``dry_run``, delete
    them, each under a precondition on what was listed."""
    rules.check()
    selector = ",".join(
        s for s in (None if rules.include_foreign else SUITE_SELECTOR, rules.label_selector) if s
    )
    listing = await list_all(
        api, TRAINJOBS, namespace, label_selector=selector or None, page_size=page_size, slim=_seen
    )
    clock = time.time() if now is None else now
    report, picked = plan_prune(namespace, listing["items"], rules, clock)
    if dry_run:
        return report
    deleted: list[str] = []
    removed: set[tuple[str | None, int]] = set()  # (identity, attempt) deleted so far
    skipped: list[tuple[str, str]] = []
    # The identities' locks last (picked lists them last): each is read again with its
    # identity just before it goes.
    for job, rank in picked:
        why = await remove(
            api,
            namespace,
            job.name,
            guard=_still_due(api, namespace, job, rank, rules, clock, removed),
            checked=bool(deleted),
        )
        if why is None:
            deleted.append(job.name)
            removed.add((job.identity, job.attempt))
        else:
            skipped.append((job.name, why))
    return dataclasses.replace(report, dry_run=False, deleted=deleted, skipped=skipped)


#: How long a rerun's claim on attempt 0 (it is about to create a later attempt) keeps
#: attempt 0 while that attempt is not to be seen. A submit creates the attempt right
#: after claiming it, or within DELETION_WAIT_ROUNDS seconds while an old job of that
#: name is still going; a claim older than this is of an attempt since deleted.
CLAIM_SECONDS = 600.0


def _still_due(
    api: Api,
    namespace: str,
    job: _Seen,
    rank: int,
    rules: PruneRules,
    now: float,
    removed: set[tuple[str | None, int]],
) -> Guard:
    """The guard of one prune delete (see :func:`~kf_trainer_core.programs.cancel.remove`):
    the job as it is now must be the uid that was listed, not being deleted, still
    finished and still due (its ``rank`` among its identity's attempts is the planned
    one: attempts are numbered when created and never renumbered). Attempt 0 must also
    hold no lock: its identity read again has no other job, and no rerun claimed a later
    attempt that is not to be seen (:data:`CLAIM_SECONDS`)."""

    async def guard(obj: Mapping[str, Any]) -> str | None:
        fresh = _seen(obj)
        if fresh.uid != job.uid:
            return "replaced by another job of that name since it was listed"
        if fresh.deleting:
            return "already being deleted"
        if not fresh.status.terminal or fresh.status.value not in rules.statuses:
            return f"changed since it was listed (now {fresh.status.value})"
        finished = _epoch(fresh.finished_at) or _epoch(fresh.created)
        age = None if finished is None else max(0.0, now - finished)
        if _why(rules, fresh, age, rank) is None:
            return "changed since it was listed and no longer due"
        if fresh.attempt != 0 or fresh.identity is None:
            return None
        others = [
            o
            for o in (await jobs_for_identity(api, namespace, fresh.identity))
            if (o.get("metadata") or {}).get("name") != job.name
        ]
        staying = [o for o in others if not (o.get("metadata") or {}).get("deletionTimestamp")]
        if staying:
            return (
                f"its identity has {len(staying)} other job(s) now (attempt 0 is the "
                "identity's lock: a rerun would otherwise create it again)"
            )
        claim = claim_of(obj)
        if claim is not None:
            attempt, when = claim
            made = attempt in {attempt_of(o) for o in others} or (
                (fresh.identity, attempt) in removed
            )
            if not made and time.time() - when < CLAIM_SECONDS:
                return f"a rerun of its identity is creating attempt {attempt}"
        return None

    return guard
