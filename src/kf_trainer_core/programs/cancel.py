"""Stopping jobs, as programs: delete, suspend and resume one, cancel it with an
action, or stop every unfinished job of a name, identity or selector."""

from __future__ import annotations

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import TrainJob, to_trainjob
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.calls import Delete, Get, Patch, Program, Sleep
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import JOBSETS, TRAINJOBS
from kf_trainer_core.manifest.selectors import identity_selector
from kf_trainer_core.programs.informer import slim_trainjob
from kf_trainer_core.programs.reads import get_object

#: How long a delete waits, at most, for the garbage collector to remove the deleted
#: job's JobSet (measured on a real control plane: 0.3-0.4 s). Past it the delete
#: returns all the same: the job is gone, only the guard below gave up.
COLLECT_WAIT_SECONDS = 30.0

#: Where JobSets cannot be read (no ``get`` on ``jobsets.jobset.x-k8s.io``): a fixed
#: pause after the delete, several times the collector's usual time, in place of the
#: check (docs/troubleshooting.md).
UNREADABLE_PAUSE_SECONDS = 2.0

#: After the first 404, one more read this much later: a reconcile of the Trainer
#: already under way when the job went (its cache still holding the job) may apply the
#: JobSet once more, owned by the deleted uid, just after the collector removed it.
CONFIRM_SECONDS = 0.3


def delete(namespace: str, name: str, propagation: str = "Background") -> Program[bool]:
    """Delete the TrainJob (Kubernetes removes its JobSet, Jobs and pods); ``False`` if
    it was already gone.

    The job is suspended first (:func:`_quiesce`), then deleted in the background: the
    TrainJob is gone at once and the garbage collector removes the rest within a
    second. A ``Foreground`` delete (asked for explicitly) keeps the TrainJob until
    then, but Trainer v2.3 re-applies the JobSet of an unfinished TrainJob that is
    being deleted, so that wait has no bound (docs/safety.md). A background delete
    that meets a job already held by a foreground delete ends that wait too: the
    server drops the ``foregroundDeletion`` finalizer.

    A background delete frees the name before the JobSet is gone, and a job submitted
    again under that name would be run by the Trainer on the old JobSet (it takes the
    JobSet over once the old runtime snapshot is collected). So the delete returns
    only once the old JobSet is gone (:func:`_until_jobset_collected`). Every delete
    of the suite comes here."""
    names.require_job_name(name)
    uid = yield from _quiesce(namespace, name)
    if uid is None:
        return False
    try:
        answer = yield Delete(TRAINJOBS, namespace, name, propagation=propagation)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    if propagation == "Background":
        yield from _until_jobset_collected(namespace, name, uid or _uid_of(answer))
    return True


def _uid_of(obj: object) -> str:
    """The uid of an API answer that is the object (``""`` for a Status)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("uid") or "") if isinstance(meta, dict) else ""


def _until_jobset_collected(namespace: str, name: str, uid: str) -> Program[None]:
    """Wait until the JobSet of the deleted TrainJob ``uid`` is gone: a 404 seen twice
    (:data:`CONFIRM_SECONDS` apart), or a JobSet of that name that the TrainJob does
    not own (a new job's). One cheap read
    per round, from 50 ms growing to 0.5 s, for at most :data:`COLLECT_WAIT_SECONDS`.

    Without the right to read JobSets (401/403) the check cannot be made: a fixed
    pause of :data:`UNREADABLE_PAUSE_SECONDS` stands in for it. Any other failure of
    the read ends the wait (the delete itself was done; its caller is not told it
    failed)."""
    waited, delay, confirming = 0.0, 0.05, False
    while True:
        try:
            jobset = yield Get(JOBSETS, namespace, name)
        except ApiError as err:
            if err.code in (401, 403):
                yield Sleep(UNREADABLE_PAUSE_SECONDS)
            if not err.not_found or confirming or waited >= COLLECT_WAIT_SECONDS:
                return  # collected (or never made); anything else: not knowable here
            confirming = True  # a second look, a moment later (CONFIRM_SECONDS)
            yield Sleep(CONFIRM_SECONDS)
            waited += CONFIRM_SECONDS
            continue
        confirming = False
        if uid and not _owned_by(jobset, uid):
            return
        if waited >= COLLECT_WAIT_SECONDS:
            return
        yield Sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)


def _owned_by(obj: object, uid: str) -> bool:
    """Whether ``obj`` names ``uid`` among its owner references."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = (meta.get("ownerReferences") if isinstance(meta, dict) else None) or []
    return any(isinstance(r, dict) and r.get("uid") == uid for r in refs)


def _quiesce(namespace: str, name: str) -> Program[str | None]:
    """Set ``spec.suspend`` before the delete; the job's uid (``""`` where the patch
    was refused), ``None`` if the job is gone.

    Trainer v2.3 reconciles a TrainJob that carries a ``deletionTimestamp`` like any
    other: during a foreground delete it re-creates the JobSet the collector deleted,
    and a reconcile already under way when a background delete lands may apply the
    JobSet once more. A suspended job's JobSet is suspended: no pod starts again.

    A finished job is suspended too (one request, no read first): the Trainer leaves
    finished jobs alone, so the flag changes nothing. A refused patch (no ``patch``
    right, an admission webhook) does not stop the delete that was asked for."""
    try:
        obj = yield Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": True}})
    except ApiError as err:
        if err.not_found:
            return None
        if not 400 <= err.code < 500:
            raise
        return ""
    return _uid_of(obj)


def set_suspended(namespace: str, name: str, suspended: bool) -> Program[TrainJob]:
    """Suspend (pods are removed, the job kept) or resume a job."""
    names.require_job_name(name)
    try:
        obj = yield Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": suspended}})
    except ApiError as err:
        if err.not_found:
            raise TrainJobNotFoundError(f"TrainJob {namespace}/{name} not found.") from None
        raise
    return to_trainjob(obj)


def cancel(namespace: str, name: str, action: str) -> Program[bool]:
    """Stop a job by ``action``: ``delete``, ``suspend`` (kept, resumable) or ``keep``
    (leave it running). ``True`` if something was done."""
    names.require_job_name(name)
    if action == "keep":
        return False
    if action == "suspend":
        try:
            yield from set_suspended(namespace, name, True)
        except TrainJobNotFoundError:
            return False
        return True
    if action != "delete":
        raise ValueError(
            f"unknown cancel action {shown(action)}. Fix: use delete, suspend or keep."
        )
    return (yield from delete(namespace, name))


def stop_unfinished(
    namespace: str,
    action: str,
    *,
    name: str | None = None,
    identity: str | None = None,
    label_selector: str | None = None,
) -> Program[list[str]]:
    """Apply ``action`` to the unfinished jobs picked by ``name``, by an orchestrator
    ``identity`` (every attempt it submitted) or by ``label_selector``; return the names
    acted on. Finished jobs and jobs already being deleted are left alone: a finished
    job keeps its result for a retried task to collect."""
    # Checked before the first request: cancel() would only catch a bad action once it
    # met an unfinished job.
    if action not in ("delete", "suspend", "keep"):
        raise ValueError(f"unknown action {shown(action)}. Fix: use delete, suspend or keep.")
    if name is None and identity is None and label_selector is None:
        raise ValueError(
            "stop_unfinished() picks no job. Fix: pass a name, an identity or a label selector."
        )
    # Each way of picking must pick something narrower than "every job": an empty name
    # or selector would select the whole namespace.
    if name is not None:
        names.require_job_name(name)
    if identity is not None and not identity.strip("/ "):
        raise ValueError(
            f"stop_unfinished(identity={shown(identity)}) names no identity. Fix: pass the "
            "identity the job was submitted with, e.g. (dag_id, task_id, run_id)."
        )
    if label_selector is not None and not label_selector.strip():
        raise ValueError(
            "stop_unfinished(label_selector='') would select every TrainJob of the "
            "namespace. Fix: pass a selector naming a label, e.g. 'team=a'."
        )
    if action == "keep":
        return []
    if name is not None:
        try:
            objs = [(yield from get_object(namespace, name))]
        except TrainJobNotFoundError:
            return []
    else:
        # The label holds a digest of the identity, the annotation the identity itself.
        wanted = identity_selector(identity) if identity is not None else None
        selector = ",".join(s for s in (label_selector, wanted) if s)
        listing = yield from list_all(
            TRAINJOBS, namespace, label_selector=selector, slim=slim_trainjob
        )
        objs = listing["items"]
    done = []
    for obj in objs:
        job = to_trainjob(obj)
        if identity is not None and job.identity not in (None, identity):
            continue
        if job.status.terminal or job.deleting:
            continue
        if (yield from cancel(namespace, job.name, action)):
            done.append(job.name)
    return done
