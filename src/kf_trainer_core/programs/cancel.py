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
    ``False`` if it was already gone."""
    names.require_job_name(name)
    try:
        yield Delete(TRAINJOBS, namespace, name, propagation=propagation)
    except ApiError as err:
        if err.not_found:
            return False
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
