"""Stopping jobs, as programs: delete, suspend and resume one, cancel it with an
action, or stop every unfinished job of a name, identity or selector."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import (
    DeleteConflictError,
    DeleteRefusedError,
    TrainJobNotFoundError,
)
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.base.timeutil import now
from kf_trainer_core.cluster.kueue import (
    JOB_UID_LABEL,
    WORKLOADS,
    KueueProbe,
    holds_suspend,
    lookup,
    owned_workload,
)
from kf_trainer_core.cluster.status import JobState, TrainJob, job_state, to_trainjob
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Delete, Get, ListObjects, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import JOBSETS, TRAINJOBS
from kf_trainer_core.k8s.trainjob import is_finished
from kf_trainer_core.manifest.selectors import identity_selector
from kf_trainer_core.programs.informer import slim_trainjob
from kf_trainer_core.programs.reads import get_object, job_not_found, owned_by

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


#: How many times a delete reads the job again when it changed under it (the Trainer's
#: status write after the suspend is the usual one) before it gives up.
ROUNDS = 8
#: Why a delete removed nothing because the job was no longer there.
GONE = "already gone"
#: Why a delete removed nothing after :data:`ROUNDS` conflicts.
KEPT_CHANGING = "kept changing while it was being deleted"

#: How long a suspend of a job Kueue holds waits for Kueue to make its Workload (made
#: within moments of the job's creation) before it sets ``spec.suspend`` instead, and
#: then for Kueue to suspend the job once its Workload is deactivated.
WORKLOAD_WAIT_SECONDS = 5.0
#: A job younger than this (by its creationTimestamp, the API server's clock) may not
#: have its Workload yet; an older one without one has none coming.
NEW_JOB_SECONDS = 30.0
#: How long a settled suspend (:func:`set_suspended`) waits, at most, for the Trainer to
#: mark the job ``Suspended`` once its ``spec.suspend`` is set.
TRAINER_WAIT_SECONDS = 5.0

Guard = Callable[[Mapping[str, Any]], Awaitable[str | None]]
"""What a caller checks of the job as it is now, before each step that changes it: a
program answering ``None`` to go ahead, else why the job is left alone (prune: it is no
longer the finished, due job it picked; its identity needs it as its lock)."""


async def delete(api: Api, namespace: str, name: str, propagation: str = "Background") -> bool:
    """Delete the TrainJob (Kubernetes removes its JobSet, Jobs and pods); ``False`` if
    it was already gone. :func:`remove` says how; every delete of the suite comes
    there. A job that changed under every one of its rounds is not deleted:
    :class:`~kf_trainer_core.base.errors.DeleteConflictError` says so (``False`` would
    tell the caller it was gone, and the job would run on)."""
    why = await remove(api, namespace, name, propagation=propagation)
    if why == KEPT_CHANGING:
        raise DeleteConflictError(
            f"TrainJob {namespace}/{name} was not deleted: it changed between each read "
            f"and the delete, {ROUNDS} times (another controller keeps writing it). "
            "Nothing else was changed. Fix: try again; if it persists, see which manager "
            "writes it (`kubectl get trainjob "
            f"{name} -n {namespace} --show-managed-fields -o yaml`).",
            namespace=namespace,
            name=name,
        )
    return why is None


async def remove(
    api: Api,
    namespace: str,
    name: str,
    *,
    propagation: str = "Background",
    guard: Guard | None = None,
    checked: bool = False,
) -> str | None:
    """Remove one TrainJob safely, whatever its state; ``None`` once it is removed,
    else why not (:data:`GONE`, or what ``guard`` said).

    Each round reads the job, lets ``guard`` decide on it as it is, then:

    1. asks the API server whether the delete would be allowed (``dryRun: [All]``, with
       the uid and resourceVersion just read as preconditions): a 403 raises
       :class:`~kf_trainer_core.base.errors.DeleteRefusedError` before anything was
       changed (``checked``: the caller already asked, for this namespace);
    2. suspends the job, under a precondition on the version just read: Trainer v2.3
       reconciles a TrainJob being deleted like any other — a Failed one loses its
       condition and gets its JobSet and pods back — and a suspended job's JobSet has
       no pods (a refused patch does not stop the delete that was asked for). Not an
       unfinished job Kueue holds (:func:`~kf_trainer_core.cluster.kueue.holds_suspend`):
       Kueue unsuspends an admitted one at once (the delete would then lose every round
       to it, and its pods be restarted meanwhile), and a queued one is suspended
       already; one the delete leaves in place a while (a ``Foreground`` delete,
       another controller's finalizer) has its Workload deactivated instead. Nor, after
       a round in which another controller undid the suspend, in the rounds that
       follow: the delete is not a tug of war;
    3. deletes it in the background, under the same preconditions: the TrainJob is gone
       at once, the garbage collector removes its JobSet, Jobs and pods in a pass of its
       own. A ``Foreground`` delete (asked for explicitly) keeps the TrainJob until then
       — the Trainer rebuilds its JobSet meanwhile (suspended: no pods).

    A 409 (the job changed since it was read) starts the next round. A delete refused
    after the job was suspended resumes it again and raises, saying so. A background
    delete frees the name before the JobSet is gone, and a job submitted again under
    that name would be run by the Trainer on the old JobSet, so the delete returns only
    once that JobSet is gone (:func:`_until_jobset_collected`)."""
    names.require_job_name(name)
    uid = ""
    suspended_here = False
    undone = False  # a suspend of this delete was undone by another controller
    # A job seen here and gone before this delete did it (a foreground delete that
    # ended, another client's delete) is removed all the same.
    vanished: str | None = GONE
    for _ in range(ROUNDS):
        try:
            obj = await api(Get(TRAINJOBS, namespace, name))
        except ApiError as err:
            if err.not_found:
                return vanished
            raise
        meta = obj.get("metadata") or {}
        why = None if guard is None else await guard(obj)
        if why is not None:
            if suspended_here:
                await _resume_quietly(api, namespace, name, uid)
            return why
        if uid and meta.get("uid") != uid:
            return GONE  # deleted by someone else, and another job made under the name
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        vanished = None
        running = not (obj.get("spec") or {}).get("suspend")
        undone = undone or (suspended_here and running)
        kueues = holds_suspend(obj) and not is_finished(obj)
        suspend = running and not undone and not kueues
        # A job that outlives the delete request (a foreground delete, another
        # controller's finalizer) is reconciled meanwhile: one Kueue holds is stopped
        # the Kueue way, its Workload deactivated.
        lingers = propagation != "Background" or bool(set(meta.get("finalizers") or ()))
        # A job already being deleted is deleted again under its uid alone: the API
        # server refuses a resourceVersion precondition on a job held in a foreground
        # delete (409, "Precondition failed: ResourceVersion in precondition: …, … in
        # object meta: 0"), which this background delete is here to end.
        pinned = not meta.get("deletionTimestamp")
        try:
            # A 404 or a 409 from any of the three requests ends this round below; a 403
            # of either delete is a refusal (the suspend only ever comes after the dry
            # run passed, so a refused dry run has changed nothing).
            if not checked:
                await api(
                    _delete(namespace, name, propagation, uid, version if pinned else "", True)
                )
                checked = True
            if suspend:
                try:
                    obj = await api(_set_suspend(namespace, name, version, True))
                except ApiError as err:
                    if err.not_found or err.conflict or not 400 <= err.code < 500:
                        raise
                    # Refused (no patch right, a webhook): the delete asked for goes ahead.
                else:
                    suspended_here = True
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kueues and running and lingers:
                await _deactivate_quietly(api, namespace, obj)
            answer = await api(
                _delete(namespace, name, propagation, uid, version if pinned else "")
            )
        except ApiError as err:
            if err.code == 403:
                restored = (
                    (await _resume_quietly(api, namespace, name, uid)) if suspended_here else True
                )
                raise _refused(
                    namespace, name, err, changed=suspended_here, restored=restored
                ) from None
            if err.not_found:
                return vanished
            if err.conflict:
                continue
            raise
        # A TrainJob that another finalizer still holds keeps its name (a submit under it
        # waits for it to go) and its JobSet until that finalizer goes: nothing to wait
        # for here.
        if propagation == "Background" and not _held(answer):
            await _until_jobset_collected(api, namespace, name, uid)
        return None
    if suspended_here:
        await _resume_quietly(api, namespace, name, uid)
    return KEPT_CHANGING


def _delete(
    namespace: str, name: str, propagation: str, uid: str, version: str, dry_run: bool = False
) -> Delete:
    """A delete of the job ``uid`` at ``version`` (each precondition only where given)."""
    return Delete(
        TRAINJOBS,
        namespace,
        name,
        propagation=propagation,
        uid=uid or None,
        resource_version=version or None,
        dry_run=dry_run,
    )


def _set_suspend(namespace: str, name: str, version: str, suspend: bool) -> Patch:
    """A patch of ``spec.suspend`` under a precondition on the version just read."""
    return Patch(
        TRAINJOBS,
        namespace,
        name,
        {"metadata": {"resourceVersion": version}, "spec": {"suspend": suspend}},
    )


#: Finalizers of the garbage collector itself: a background delete ends them.
_COLLECTOR = frozenset({"foregroundDeletion", "orphan"})


def _held(answer: object) -> bool:
    """Whether a delete's answer is the object still there, held by another
    controller's finalizers."""
    meta = answer.get("metadata") if isinstance(answer, dict) else None
    found = meta.get("finalizers") if isinstance(meta, dict) else None
    return bool(set(found or ()) - _COLLECTOR)


async def _resume_quietly(api: Api, namespace: str, name: str, uid: str) -> bool:
    """Undo the suspend of a delete that did not happen — on the job ``uid`` only, under
    a precondition on the version read (never on a job made since under the name);
    whether the job is left unsuspended."""
    for _ in range(3):
        try:
            obj = await api(Get(TRAINJOBS, namespace, name))
            meta = obj.get("metadata") or {}
            if meta.get("uid") != uid:
                return True  # gone, or another job now: nothing of ours to undo
            if not (obj.get("spec") or {}).get("suspend"):
                return True
            await api(_set_suspend(namespace, name, str(meta.get("resourceVersion") or ""), False))
        except ApiError as err:
            if err.not_found:
                return True
            if err.conflict:
                continue
            return False
        return True
    return False


def _refused(
    namespace: str, name: str, err: ApiError, *, changed: bool, restored: bool = True
) -> DeleteRefusedError:
    """The error of a delete the API server refused, saying what became of the job."""
    why = untrusted.line(err.message or err.reason, 300)
    if not changed:
        state = "nothing was changed: the job is as it was"
    elif restored:
        state = "it had been suspended for the delete and was resumed again"
    else:
        state = (
            f"it was left suspended (resuming it was refused too): resume it with "
            f"`kf-trainer jobs resume {name} -n {namespace}` or resume_job({name!r})"
        )
    return DeleteRefusedError(
        f"TrainJob {namespace}/{name} may not be deleted ({err.code} {why}); {state}. Fix: "
        f"grant the 'delete' verb on trainjobs.trainer.kubeflow.org in namespace {namespace} "
        "(`kf-trainer rbac` prints the Role the suite needs), or ask whoever may delete it.",
        namespace=namespace,
        name=name,
        restored=restored,
    )


async def _until_jobset_collected(api: Api, namespace: str, name: str, uid: str) -> None:
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
            jobset = await api(Get(JOBSETS, namespace, name))
        except ApiError as err:
            if err.code in (401, 403):
                await api.sleep(UNREADABLE_PAUSE_SECONDS)
            if not err.not_found or confirming or waited >= COLLECT_WAIT_SECONDS:
                return  # collected (or never made); anything else: not knowable here
            confirming = True  # a second look, a moment later (CONFIRM_SECONDS)
            await api.sleep(CONFIRM_SECONDS)
            waited += CONFIRM_SECONDS
            continue
        confirming = False
        if uid and not owned_by(jobset, uid):
            return
        if waited >= COLLECT_WAIT_SECONDS:
            return
        await api.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)


async def set_suspended(
    api: Api, namespace: str, name: str, suspended: bool, *, settle: bool = False
) -> TrainJob:
    """Suspend (pods are removed, the job kept) or resume a job. A job Kueue holds is
    suspended and resumed through its Workload (:func:`_set_active`).

    ``settle``: a suspend returns once the Trainer has marked the job ``Suspended``
    (30-100 ms measured on a real control plane), so the job returned, and every read
    after it, says so; at most :data:`TRAINER_WAIT_SECONDS`, then as it is. Without it
    the job comes back as the API server answered the change, still ``Running``."""
    names.require_job_name(name)
    obj = await get_object(api, namespace, name)
    changed = await _set_active(api, namespace, obj, not suspended)
    if changed is None:
        changed = await _patch_suspend(api, namespace, name, suspended)
    if settle and suspended:
        changed, _ = await _read_until(
            api, namespace, name, changed, _marked_suspended, TRAINER_WAIT_SECONDS
        )
    return to_trainjob(changed)


def _marked_suspended(obj: Mapping[str, Any]) -> bool:
    """Whether there is nothing more to wait for after a suspend: the Trainer marked
    the job ``Suspended``, it finished, or its ``spec.suspend`` was undone meanwhile
    (another controller's say; the job is returned as it is)."""
    return (
        job_state(obj) is JobState.SUSPENDED
        or is_finished(obj)
        or not (obj.get("spec") or {}).get("suspend")
    )


async def _patch_suspend(api: Api, namespace: str, name: str, suspended: bool) -> Mapping[str, Any]:
    """Set ``spec.suspend`` (the Trainer removes or recreates the pods)."""
    try:
        changed: Mapping[str, Any] = await api(
            Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": suspended}})
        )
    except ApiError as err:
        if err.not_found:
            raise await job_not_found(api, namespace, name) from None
        raise
    return changed


async def _read_until(
    api: Api,
    namespace: str,
    name: str,
    obj: Mapping[str, Any],
    done: Callable[[Mapping[str, Any]], bool],
    seconds: float,
) -> tuple[Mapping[str, Any], bool]:
    """Read the job ``name`` (``obj``, as last read) again until ``done`` holds of it:
    one read per round, from 50 ms growing to 0.5 s, for at most ``seconds``. The job as
    last read, and whether ``done`` held."""
    waited, delay = 0.0, 0.05
    while not done(obj):
        if waited >= seconds:
            return obj, False
        await api.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)
        obj = await get_object(api, namespace, name)
    return obj, True


async def _set_active(
    api: Api, namespace: str, obj: Mapping[str, Any], active: bool
) -> Mapping[str, Any] | None:
    """Suspend (``active`` false) or resume the job ``obj`` if Kueue holds it (labelled
    for a queue, or dispatched by MultiKueue), the Kueue way: its Workload's
    ``spec.active``; the job as it is then. A ``spec.suspend`` set on an admitted job is
    undone by Kueue within a moment, its pods restarted meanwhile (measured on Kueue
    v0.19.2), and a queued job's would be lifted when Kueue admits it. A deactivated
    Workload is evicted (the job suspended, its quota freed; MultiKueue's copy on the
    worker removed) and stays so until it is active again, when it queues anew.

    ``None`` where ``spec.suspend`` is the way: a job Kueue does not hold, a finished
    one (Kueue leaves it alone), or one without a Workload to be seen (no Kueue here,
    Kueue does not manage the namespace, or Workloads may not be read)."""
    workload = await _workload_of(api, namespace, obj)
    if workload is None:
        return None
    await _switch(api, namespace, workload, active)
    name = str((obj.get("metadata") or {}).get("name") or "")
    job: Mapping[str, Any] = await get_object(api, namespace, name)
    if active:
        return job
    # Kueue suspends the job of a deactivated Workload a moment later (0.1-0.2 s
    # measured): a suspend returns the job suspended, as a spec.suspend would.
    job, taken = await _read_until(
        api,
        namespace,
        name,
        job,
        lambda j: bool((j.get("spec") or {}).get("suspend")) or is_finished(j),
        WORKLOAD_WAIT_SECONDS,
    )
    if taken:
        return job
    # Kueue did not act (its controller down or behind): the suspend is set here.
    # Kueue keeps the job of an inactive Workload suspended, so it stays.
    return await _patch_suspend(api, namespace, name, True)


async def _deactivate_quietly(api: Api, namespace: str, obj: Mapping[str, Any]) -> None:
    """Deactivate the Workload of a job Kueue holds that a delete leaves in place for a
    while; a failure only leaves it as it was (the delete asked for goes ahead)."""
    try:
        workload = await _workload_of(api, namespace, obj)
        if workload is not None:
            await _switch(api, namespace, workload, False)
    except ApiError:
        pass


async def _switch(api: Api, namespace: str, workload: Mapping[str, Any], active: bool) -> None:
    """Set the Workload's ``spec.active`` (unset reads true), unless it already is."""
    if ((workload.get("spec") or {}).get("active") is not False) != active:
        wl_name = str((workload.get("metadata") or {}).get("name"))
        await api(Patch(WORKLOADS, namespace, wl_name, {"spec": {"active": active}}))


async def _workload_of(
    api: Api, namespace: str, obj: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The Workload of the unfinished job ``obj`` if Kueue holds it, else ``None`` (also
    where Workloads may not be read: 401/403, as :func:`~kf_trainer_core.cluster.kueue.
    lookup` takes it). A job created a moment ago, which Kueue's webhook suspended, gets
    its Workload within moments: it is waited for, up to :data:`WORKLOAD_WAIT_SECONDS`
    (an older job without one has none coming). So a resume right after the submit
    leaves the job to Kueue too (a ``spec.suspend: false`` would start its pods, and
    Kueue suspend it again: not admitted)."""
    if not holds_suspend(obj) or is_finished(obj):
        return None
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    created = untrusted.timestamp(meta.get("creationTimestamp"))
    young = created is not None and (now() - created).total_seconds() < NEW_JOB_SECONDS
    patient = young and bool((obj.get("spec") or {}).get("suspend"))
    waited, delay = 0.0, 0.1
    while True:
        try:
            listing = await api(
                ListObjects(WORKLOADS, namespace, label_selector=f"{JOB_UID_LABEL}={uid}")
            )
        except ApiError as err:
            if err.not_found or err.code in (401, 403):
                return None
            raise
        workload = owned_workload(listing.get("items") or [], uid or None)
        if workload is not None or not patient or waited >= WORKLOAD_WAIT_SECONDS:
            return workload
        await api.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)


async def resume(api: Api, namespace: str, name: str, kueue: KueueProbe | None = None) -> TrainJob:
    """Resume a suspended job. A job Kueue holds has its Workload made active again
    (:func:`_set_active`) and runs when Kueue admits it: resumed by ``spec.suspend``,
    Kueue would suspend it again at once ("Not admitted by cluster queue"), after the
    Trainer had begun to unsuspend its JobSet. With a ``kueue`` probe, such a job still
    suspended is returned with its queue status."""
    names.require_job_name(name)
    obj = await _set_active(api, namespace, await get_object(api, namespace, name), True)
    if obj is None:
        return to_trainjob(await _patch_suspend(api, namespace, name, False))
    queue = None
    if kueue is not None and (obj.get("spec") or {}).get("suspend"):
        queue = await lookup(api, namespace, obj, kueue, positions=False)
    return to_trainjob(obj, queue=queue)


async def cancel(api: Api, namespace: str, name: str, action: str) -> bool:
    """Stop a job by ``action``: ``delete``, ``suspend`` (kept, resumable) or ``keep``
    (leave it running). ``True`` if something was done."""
    names.require_job_name(name)
    if action == "keep":
        return False
    if action == "suspend":
        try:
            await set_suspended(api, namespace, name, True)
        except TrainJobNotFoundError:
            return False
        return True
    if action != "delete":
        raise ValueError(
            f"unknown cancel action {shown(action)}. Fix: use delete, suspend or keep."
        )
    return await delete(api, namespace, name)


async def stop_unfinished(
    api: Api,
    namespace: str,
    action: str,
    *,
    name: str | None = None,
    identity: str | None = None,
    label_selector: str | None = None,
) -> list[str]:
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
            objs = [(await get_object(api, namespace, name))]
        except TrainJobNotFoundError:
            return []
    else:
        # The label holds a digest of the identity, the annotation the identity itself.
        wanted = identity_selector(identity) if identity is not None else None
        selector = ",".join(s for s in (label_selector, wanted) if s)
        listing = await list_all(
            api, TRAINJOBS, namespace, label_selector=selector, slim=slim_trainjob
        )
        objs = listing["items"]
    done, stuck = [], []
    for obj in objs:
        job = to_trainjob(obj)
        if identity is not None and job.identity not in (None, identity):
            continue
        if job.status.terminal or job.deleting:
            continue
        # One job another controller keeps writing does not leave the others running.
        try:
            if await cancel(api, namespace, job.name, action):
                done.append(job.name)
        except DeleteConflictError:
            stuck.append(job.name)
    if stuck:
        raise DeleteConflictError(
            f"TrainJob(s) {', '.join(stuck)} in namespace {namespace} were not deleted: "
            f"each changed between each read and the delete, {ROUNDS} times (another "
            f"controller keeps writing them); {len(done)} other job(s) were stopped"
            f"{': ' + ', '.join(done) if done else ''}. Fix: try again.",
            namespace=namespace,
            name=stuck[0],
        )
    return done
