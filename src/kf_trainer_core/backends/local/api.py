"""The local backend's API server: what a Kubernetes apiserver, Kubeflow Trainer's
admission webhook and the start of its reconcile loop do for the calls the client
makes (:mod:`kf_trainer_core.k8s.calls`), over the state directory.

* Objects are stored as the apiserver stores them (uid, creationTimestamp,
  resourceVersion, generation) and errors are ``metav1.Status`` bodies with the
  apiserver's codes, reasons and wording (404 NotFound, 409 AlreadyExists, 422 Invalid,
  410 Expired), so the client's adoption, watch and failure logic runs unchanged.
* Creating a TrainJob checks what cannot run here (a ``BuiltinTrainer``, a container
  without a command, resources this machine lacks) and then starts the job's
  supervisor; deleting one stops its processes and removes what it owns; patching
  ``spec.suspend`` suspends or resumes it.
* ClusterTrainingRuntimes are the Trainer's defaults (see
  :mod:`kf_trainer_core.backends.local.runtimes`) plus any created locally.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kf_trainer_core.backends.local import gpus, machine
from kf_trainer_core.backends.local._common import Paths, missing_state
from kf_trainer_core.backends.local.admission import plan_trainjob, validate_trainjob
from kf_trainer_core.backends.local.logs import LogFollower, read_log
from kf_trainer_core.backends.local.procs import JobLock, spawn_supervisor
from kf_trainer_core.backends.local.recovery import check_supervisors
from kf_trainer_core.backends.local.store import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    KINDS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Kind,
    Selector,
    StatusError,
    Store,
    Tx,
)
from kf_trainer_core.backends.local.watch import POLL_SECONDS as POLL_SECONDS  # the transport's
from kf_trainer_core.backends.local.watch import STREAMS, WatchStream
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.emulation.logs import check_started, log_container
from kf_trainer_core.emulation.paging import list_meta, list_request, page, too_large
from kf_trainer_core.emulation.registry import sort_key
from kf_trainer_core.emulation.strategy import (
    check_preconditions,
    check_propagation,
    deleted_status,
    finish_update,
    mark_deleting,
    patched,
    prepare_create,
    prepare_update,
)
from kf_trainer_core.errors import StateDirNotFoundError
from kf_trainer_core.k8s.calls import (
    Create,
    Delete,
    Get,
    ListObjects,
    OpenLogStream,
    OpenWatch,
    Patch,
    ReadLog,
)
from kf_trainer_core.k8s.objects import new_event, object_reference, set_condition
from kf_trainer_core.k8s.trainjob import (
    CREATION_FAILED_PREFIX,
    CREATION_FAILED_REASON,
    SUSPENDED,
    TRAINER_API,
    TRAINER_COMPONENT,
    TRAINJOB_SUSPENDED,
    is_finished,
)

JSON = dict[str, Any]

#: How long a delete waits for the job's supervisor to stop it and clean up before
#: it kills the supervisor.
DELETE_WAIT_SECONDS = 30.0
#: How long a read waits for this process's watches to deliver what it returns.
CATCH_UP_SECONDS = 0.5
#: The source of the Warning events of the local backend's own admission.
LOCAL_COMPONENT = "kf-trainer-local"

# State directories reconciled by this process (orphaned jobs restarted once).
_reconciled: set[str] = set()
#: Kinds a state directory need not exist for (the built-in runtimes answer).
RUNTIME_KINDS = (CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES)


def _kind(resource: Any) -> Kind:
    kind = KINDS.get(str(resource.plural))
    if kind is None:
        raise StatusError(404, "NotFound", "the server could not find the requested resource", {})
    return kind


def _selector(kind: Kind, call: ListObjects | OpenWatch) -> Selector:
    return Selector.parse(call.namespace, call.label_selector, call.field_selector, kind)


class LocalApi:
    """Serves the client's calls from one state directory."""

    def __init__(
        self,
        state_dir: Path,
        *,
        python: str | None = None,
        use_venv: bool = False,
        on_missing_resources: str = "warn",
        container: JSON | None = None,
    ) -> None:
        self.paths = Paths(state_dir)
        #: The container backend's settings (ContainerConfig's fields); None: processes.
        self.container = container
        # The database is opened when it exists, and created only by a write (a submit):
        # reading a state directory never creates it.
        self._store: Store | None = None
        self._opening = threading.Lock()
        self.db_key = str(self.paths.db)
        self.python = python
        self.use_venv = use_venv
        self.on_missing_resources = on_missing_resources
        self._existing_store()

    @property
    def store(self) -> Store:
        """The state directory's database; :class:`StateDirNotFoundError` (naming the
        directory) when no job was ever submitted with it."""
        store = self._existing_store()
        if store is None:
            backend = "local" if self.container is None else "container"
            model = "LocalConfig" if self.container is None else "ContainerConfig"
            problem = missing_state(self.paths.root, backend)
            raise StateDirNotFoundError(
                f"{problem}. Fix: check the state directory ({model}.state_dir, else "
                "$KF_TRAINER_STATE_DIR, else ~/.kf-trainer/local), or submit a job first: "
                "reading a state directory never creates it.",
                str(self.paths.root),
            )
        return store

    def _existing_store(self, create: bool = False) -> Store | None:
        """The database if it exists (opened once; another process may create it
        after this one started), else ``None``; nothing is created but with
        ``create`` (a write: then with its directory if need be)."""
        if self._store is None and (create or self.paths.db.is_file()):
            with self._opening:
                if self._store is None:
                    existed = self.paths.db.is_file()
                    self._store = Store(self.paths.db)
                    key = str(self.paths.root)
                    if key not in _reconciled:
                        _reconciled.add(key)
                        if existed:  # a new database has no job to restart
                            self.reconcile()
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    # ------------------------------------------------------------------ dispatch

    def perform(self, call: Any) -> Any:
        # Each request is served by the method of its call's type, which reads the call
        # itself (no argument list to keep in step with the call's fields).
        served: dict[type, Callable[[Any], Any]] = {
            Get: self.get,
            ListObjects: self.list_objects,
            Create: self.create,
            Patch: self.patch,
            Delete: self.delete,
            ReadLog: self.read_log,
        }
        serve = served.get(type(call))
        if serve is None:
            raise TypeError(f"the local backend cannot perform {shown(call)}")
        return serve(call)

    def open_stream(self, call: OpenWatch | OpenLogStream) -> Any:
        if isinstance(call, OpenWatch):
            kind = _kind(call.resource)
            self.store  # noqa: B018 -- a watch of a state directory that is not there fails
            return WatchStream(
                self.paths.db,
                kind,
                _selector(kind, call),
                call.resource_version,
                call.timeout_seconds,
                call.bookmarks,
            )
        path = self._log_path(call.namespace, call.pod, call.container)
        return LogFollower(
            path,
            self.paths.log_done(call.namespace, call.pod, call.container),
            since_time=call.since_time,
            tail_lines=call.tail_lines,
            timestamps=call.timestamps,
        )

    # ------------------------------------------------------------------ reads

    def _runtime(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        # Runtimes need no state directory: the built-in ones answer without one.
        store = self._existing_store()
        stored = None if store is None else store.get(kind, namespace, name)
        if stored is not None or kind is not CLUSTER_TRAINING_RUNTIMES:
            return stored
        from kf_trainer_core.backends.local.runtimes import default_runtimes

        return default_runtimes().get(name)

    def get(self, call: Get) -> JSON:
        kind, namespace, name = _kind(call.resource), call.namespace, call.name
        if kind in (TRAINJOBS, PODS):
            check_supervisors(self.paths, self.store)  # a dead one's job reads Failed
        if kind in RUNTIME_KINDS:
            obj = self._runtime(kind, namespace, name)
        else:
            obj = self.store.get(kind, namespace, name)
        if obj is None:
            raise StatusError.not_found(kind, name)
        # Read-your-writes for this process's informers: what a read returns, their
        # caches hold before it returns. A wait that found its job by a read therefore
        # finds it in the cache on its next look (and does not take it for deleted).
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv.isdigit():
            STREAMS.catch_up(self.db_key, kind, namespace, int(rv), CATCH_UP_SECONDS)
        return obj

    def list_objects(self, call: ListObjects) -> JSON:
        kind = _kind(call.resource)
        selector = _selector(kind, call)
        asked = list_request(call.resource_version, None, call.continue_token)
        if kind in (TRAINJOBS, PODS):
            check_supervisors(self.paths, self.store)
        store = self.store if kind not in RUNTIME_KINDS else self._existing_store()
        items, rv = ([], 0) if store is None else store.select(kind, selector)
        if kind is CLUSTER_TRAINING_RUNTIMES:
            from kf_trainer_core.backends.local.runtimes import default_runtimes

            have = {str(o["metadata"]["name"]) for o in items}
            items += [
                o
                for name, o in sorted(default_runtimes().items())
                if name not in have and selector.matches(o)
            ]
        if asked.not_older_than is not None and asked.not_older_than > rv:
            raise too_large(asked.not_older_than, rv)
        # No history here: a later page is read from the current state, after the key
        # its token names (what was deleted meanwhile is absent, nothing repeats).
        items, remaining = page(sorted(items, key=sort_key), asked.after, call.limit)
        meta = list_meta(rv, items, remaining)
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": meta,
            "items": items,
        }

    def _log_path(self, namespace: str, pod_name: str, container: str) -> Path:
        pod = self.store.get(PODS, namespace, pod_name)
        if pod is None:
            raise StatusError.not_found(PODS, pod_name)
        container = log_container(pod, container)
        path = self.paths.log(namespace, pod_name, container)
        check_started(pod, container, lambda: path.exists() and path.stat().st_size > 0)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        return path

    def read_log(self, call: ReadLog) -> str:
        path = self._log_path(call.namespace, call.pod, call.container)
        return read_log(
            path,
            tail_lines=call.tail_lines,
            since_time=call.since_time,
            timestamps=call.timestamps,
            limit_bytes=call.limit_bytes,
        )

    # ------------------------------------------------------------------ writes

    def create(self, call: Create) -> JSON:
        kind, namespace = _kind(call.resource), call.namespace
        # Whether the name is taken is asked in the write's transaction (a generated
        # name that is, a one in 14 million chance, answers 409 as the apiserver may).
        ns = namespace if kind.namespaced else None
        obj = prepare_create(kind, call.body, ns, lambda ns, name: False)
        if kind is TRAINJOBS:
            return self.create_trainjob(str(namespace), obj)
        self._existing_store(create=True)
        with self.store.write() as tx:
            return tx.put(kind, _unique(tx, kind, obj), created=True)

    def patch(self, call: Patch) -> JSON:
        kind, name, subresource = _kind(call.resource), call.name, call.subresource
        with self.store.write() as tx:
            current = tx.get(kind, call.namespace, name)
            if current is None:
                raise StatusError.not_found(kind, name)
            updated = prepare_update(
                kind, current, patched(kind, name, current, call.body), subresource
            )
            result = finish_update(kind, current, updated, subresource)
            if result != current:  # a write that changes nothing gets no new version
                result = tx.put(kind, result)
        if kind is TRAINJOBS and subresource != "status":
            before = bool((current.get("spec") or {}).get("suspend"))
            after = bool((result.get("spec") or {}).get("suspend"))
            if before != after:
                self._suspend_changed(result, after)
        return result

    def delete(self, call: Delete) -> JSON:
        kind, namespace, name = _kind(call.resource), call.namespace, call.name
        propagation, preconditions = call.propagation, call.preconditions()
        check_propagation(propagation)
        if call.dry_run:
            # Everything the real delete would check, nothing done: the answer a
            # server gives a dryRun=All delete of an object without finalizers.
            current = check_preconditions(
                kind, name, self.store.get(kind, namespace, name), preconditions
            )
            return deleted_status(kind, name, (current.get("metadata") or {}).get("uid"))
        if kind is TRAINJOBS:
            return self.delete_trainjob(str(namespace), name, propagation, preconditions)
        with self.store.write() as tx:
            if preconditions:
                check_preconditions(kind, name, tx.get(kind, namespace, name), preconditions)
            obj = tx.delete(kind, namespace, name)
        if obj is None:
            raise StatusError.not_found(kind, name)
        if kind is PODS:
            import shutil

            shutil.rmtree(self.paths.log_dir(str(namespace), name), ignore_errors=True)
        return deleted_status(kind, name, (obj.get("metadata") or {}).get("uid"))

    # ------------------------------------------------------------------ TrainJobs

    def create_trainjob(self, namespace: str, obj: JSON) -> JSON:
        meta = obj["metadata"]
        name = str(meta["name"])
        spec = validate_trainjob(obj)
        obj.pop("status", None)
        held = self._held_gpus()
        plan, causes, warnings = plan_trainjob(
            obj,
            runtime=self._runtime,
            python=self.python,
            use_venv=self.use_venv,
            container=self.container,
            on_missing_resources=self.on_missing_resources,
            held_gpus=held,
        )
        if causes:
            raise StatusError.invalid(TRAINJOBS, name, causes)
        self._existing_store(create=True)
        with self.store.write() as tx:
            self._admit_gpus_again(tx, name, plan, held)
            created = tx.put(TRAINJOBS, _unique(tx, TRAINJOBS, obj), created=True)
            uid = str(created["metadata"]["uid"])
            tx.put_plan(uid, namespace, name, plan)
            ref = object_reference(TRAINER_API, "TrainJob", name, str(meta["namespace"]), uid)
            for reason, message in warnings:
                tx.create(
                    EVENTS, new_event(namespace, ref, "Warning", reason, message, LOCAL_COMPONENT)
                )
            if plan["runtime_error"]:
                # The Trainer cannot build the JobSet: the job stays, with this event.
                tx.create(
                    EVENTS,
                    new_event(
                        namespace,
                        ref,
                        "Warning",
                        CREATION_FAILED_REASON,
                        CREATION_FAILED_PREFIX + str(plan["runtime_error"]),
                        TRAINER_COMPONENT,
                    ),
                )
        result: JSON = json.loads(json.dumps(created))
        if plan["runtime_error"]:
            return result
        if spec.get("suspend"):
            self._suspend_changed(created, True)
            return result
        try:
            spawn_supervisor(self.paths, namespace, name, uid, plan.get("cwd"))
        except OSError as exc:
            # Nothing would ever run it (nor notice: no supervisor, no marker), and a
            # retried submit would adopt it and wait for good: the create is undone.
            self.stop_job(namespace, name, uid)
            raise _not_started(name, exc) from exc
        return result

    def _admit_gpus_again(self, tx: Tx, name: str, plan: JSON, held: int) -> None:
        """Refuse (422, as admission does) a job asking for GPUs that another process's
        job was admitted to between this job's admission and its write: writers take
        turns, so this look and the job's row are one step, and two jobs submitted at
        once are not both given the same free GPUs (``on_missing_resources="fail"``;
        with ``"warn"`` they share, as admission warned they may)."""
        asked = plan.get("admitted") or {}
        if not asked.get("gpus") or self.on_missing_resources != "fail":
            return
        now = gpus.held_count(tx.conn)
        if now <= held:
            return
        model = "LocalConfig" if self.container is None else "ContainerConfig"
        causes, _ = machine.admit_resources(
            asked.get("resources"), int(asked.get("nodes") or 1), "fail", model, now
        )
        if causes:
            raise StatusError.invalid(TRAINJOBS, name, causes)

    def _held_gpus(self) -> int:
        """The GPUs of this machine that running jobs hold (admission counts the rest)."""
        store = self._existing_store()
        if store is None or not machine.gpu_devices():
            return 0
        with store.read() as tx:
            return gpus.held_count(tx.conn)

    def _suspend_changed(self, obj: JSON, suspended: bool) -> None:
        meta = obj.get("metadata") or {}
        namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
        if is_finished(obj):
            return
        plan = self.store.get_plan(uid) or {}
        if plan.get("runtime_error"):
            return
        if not suspended:
            try:
                spawn_supervisor(self.paths, namespace, name, uid, plan.get("cwd"))
            except OSError as exc:
                # The resume is undone: left resumed, the job would never run.
                self.patch(Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": True}}))
                raise _not_started(name, exc) from exc
            return
        lock = JobLock(self.paths, uid)
        if not lock.acquire(blocking=False):
            return  # its supervisor runs and suspends it on its next look
        try:
            with self.store.write() as tx:
                current = tx.get(TRAINJOBS, namespace, name)
                if current is None or (current.get("metadata") or {}).get("uid") != uid:
                    return
                if not (current.get("spec") or {}).get("suspend") or is_finished(current):
                    return
                # Suspended=True on a job whose supervisor is not running.
                status = dict(current.get("status") or {})
                conditions = list(status.get("conditions") or [])
                set_condition(conditions, SUSPENDED, "True", *TRAINJOB_SUSPENDED)
                current["status"] = {**status, "conditions": conditions}
                tx.put(TRAINJOBS, current)
        finally:
            lock.release()

    def delete_trainjob(
        self,
        namespace: str,
        name: str,
        propagation: str,
        preconditions: dict[str, str] | None = None,
    ) -> JSON:
        with self.store.write() as tx:
            obj = check_preconditions(
                TRAINJOBS, name, tx.get(TRAINJOBS, namespace, name), preconditions
            )
            meta = obj["metadata"]
            if not meta.get("deletionTimestamp"):
                mark_deleting(meta, foreground=propagation == "Foreground")
                tx.put(TRAINJOBS, obj)
        uid = str(meta["uid"])
        self.stop_job(namespace, name, uid)
        return deleted_status(TRAINJOBS, name, uid)

    def stop_job(self, namespace: str, name: str, uid: str) -> None:
        """Have the job's processes stopped and everything it owns removed, and return
        when that is done: by its supervisor when one runs (nudged with SIGTERM; it
        sees the deletionTimestamp), else here."""
        from kf_trainer_core.backends.local.purge import purge_job

        lock = JobLock(self.paths, uid)
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        nudged = False
        while not lock.acquire(blocking=False):
            pid = lock.holder_pid()
            if pid and not nudged and _is_supervisor(pid, uid):
                nudged = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
            if time.monotonic() > deadline:
                # A supervisor that does not answer (stuck building a venv): stop it.
                if pid and _is_supervisor(pid, uid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
            time.sleep(0.02)
        # No supervisor runs now (it purged and exited, or there was none): finish.
        try:
            purge_job(self.store, self.paths, namespace, name, uid)
        finally:
            lock.release(remove=True)

    # ------------------------------------------------------------------ recovery

    def reconcile(self) -> None:
        """Start a supervisor for every job that should be running and has none
        (its supervisor was killed, the machine restarted). Two supervisors of one job
        never both run it: they take the job's lock in turn, and the later one finds
        the job finished."""
        try:
            jobs, _ = self.store.select(TRAINJOBS)
        except Exception:  # a damaged state must not make every client fail
            return
        for obj in jobs:
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if not uid or is_finished(obj):
                continue
            plan = self.store.get_plan(uid)
            if plan is None or plan.get("runtime_error"):
                continue
            suspended = bool((obj.get("spec") or {}).get("suspend"))
            if suspended and not meta.get("deletionTimestamp"):
                continue
            lock = JobLock(self.paths, uid)
            if lock.acquire(blocking=False):
                lock.release()
                with contextlib.suppress(OSError):  # the next process's reconcile tries again
                    spawn_supervisor(
                        self.paths, str(meta["namespace"]), str(meta["name"]), uid, plan.get("cwd")
                    )


def _is_supervisor(pid: int, uid: str) -> bool:
    """Whether ``pid`` is the supervisor of job ``uid`` (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): trust the lock file
        return True
    return b"kf_trainer_core.backends.local.supervisor" in cmdline and uid.encode() in cmdline


def _not_started(name: str, exc: OSError) -> StatusError:
    """``503``: the job's supervisor could not be started (no process to spare: EAGAIN,
    ENOMEM); the write that needed it was undone, and the call may be retried."""
    return StatusError(
        503,
        "ServiceUnavailable",
        f"the local backend could not start the supervisor of TrainJob {name}: {exc}. "
        "Nothing was changed. Fix: retry once the machine has processes and memory to "
        "spare.",
    )


def _unique(tx: Tx, kind: Kind, obj: JSON) -> JSON:
    """``obj`` if its name is still free in this transaction; 409 otherwise."""
    meta = obj["metadata"]
    if tx.taken(kind, str(meta.get("namespace") or ""), str(meta["name"])):
        raise StatusError.already_exists(kind, str(meta["name"]))
    return obj
