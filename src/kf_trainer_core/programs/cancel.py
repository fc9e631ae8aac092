"""Stopping jobs, as programs: delete, suspend and resume one, cancel it with an
action, or stop every unfinished job of a name, identity or selector."""

from __future__ import annotations

from kf_trainer_core.cluster.status import TrainJob, to_trainjob
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.calls import Delete, Patch, Program
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.selectors import identity_selector
from kf_trainer_core.programs.informer import slim_trainjob
from kf_trainer_core.programs.reads import get_object


def delete(namespace: str, name: str, propagation: str = "Foreground") -> Program[bool]:
    """Delete the TrainJob (the Trainer and Kubernetes remove its JobSet and pods);
    ``False`` if it was already gone.

    A ``Foreground`` delete suspends the job first (:func:`_quiesce`): while the
    TrainJob waits for the garbage collector, Trainer v2.3 keeps re-applying the JobSet
    of a job that has not finished, and a running job's pods would be started again
    each time the collector removed them. Every delete of the suite comes here."""
    names.require_job_name(name)
    if propagation == "Foreground" and not (yield from _quiesce(namespace, name)):
        return False
    try:
        yield Delete(TRAINJOBS, namespace, name, propagation=propagation)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    return True


def _quiesce(namespace: str, name: str) -> Program[bool]:
    """Set ``spec.suspend`` before a foreground delete; ``False`` if the job is gone.

    Trainer v2.3 reconciles a TrainJob that carries a ``deletionTimestamp`` like any
    other: while the TrainJob waits (``foregroundDeletion``) for its JobSet, Jobs and
    pods to be collected, it re-creates the JobSet the collector deleted, the JobSet
    and Job controllers re-create Jobs and pods, and the delete takes from seconds to
    minutes, restarting the training each round. A suspended job's re-created JobSet is
    suspended: no pod starts, and the collector wins within a round or two. Foreground
    (not Background) is kept so that the name stays taken until the old JobSet is gone:
    a job submitted again under that name never meets (and adopts) the old JobSet.

    A finished job is suspended too (one request, no read first): the Trainer leaves
    finished jobs alone, so the flag changes nothing. A refused patch (no ``patch``
    right, an admission webhook) does not stop the delete that was asked for."""
    try:
        yield Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": True}})
    except ApiError as err:
        if err.not_found:
            return False
        if not 400 <= err.code < 500:
            raise
    return True


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
        raise ValueError(f"unknown cancel action {action!r}. Fix: use delete, suspend or keep.")
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
        raise ValueError(f"unknown action {action!r}. Fix: use delete, suspend or keep.")
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
            f"stop_unfinished(identity={identity!r}) names no identity. Fix: pass the "
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
