"""Running a pod's container for real: a local subprocess (``executor="exec"``) or a
custom executor function, with the container's environment resolved as the kubelet
would (``env``, ``envFrom``, ``$(VAR)`` expansion, field references, the status
server's projected files)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from kf_trainer_core.emulation.kubelet import (
    CONFIG_MAP,
    SECRET,
    START_ERROR_EXIT,
    exit_status,
    expand,
    read_lines,
    read_termination_log,
    resolve_env,
    spawn,
    start_error,
)
from kf_trainer_core.report import URL_ENV
from kf_trainer_core.spec.function import TERMINATION_LOG_ENV
from kf_trainer_core.testing.controller.jobset import container
from kf_trainer_core.testing.controller.parts import ClusterParts
from kf_trainer_core.testing.controller.state import PodSim, Run
from kf_trainer_core.testing.controller.vocab import JSON, LAUNCHER_ENV
from kf_trainer_core.testing.scenarios import Executor, PodContext, PodResult
from kf_trainer_core.testing.store import CONFIGMAPS, PODS, SECRETS, Resource

_log = logging.getLogger(__name__)


class Runner:
    """Starts, reads and stops real runs; their ends go back to the worker."""

    def __init__(self, cx: ClusterParts) -> None:
        self.cx = cx
        self._runs: set[Run] = set()
        self._pool: ThreadPoolExecutor | None = None

    def start(self, pod: PodSim, executor: Executor | None) -> None:
        """Run ``pod``'s main container: ``executor`` in a thread, or (None) its command
        as a subprocess (trainer pods only)."""
        sim, rjob = pod.job.sim, pod.job.rjob
        if executor is None and rjob.kind != "trainer":
            return
        workdir = Path(tempfile.mkdtemp(prefix=f"kf-sim-{pod.name}-"))
        run = Run(pod=pod, workdir=workdir, termination_log=workdir / "termination-log")
        pod.run = run
        self._runs.add(run)
        ctx = self._pod_context(pod, run)
        self.cx.worker.run_started()
        if executor is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=32, thread_name_prefix="kf-sim-executor"
                )
            self._pool.submit(self._executor_thread, run, ctx, executor)
            return
        argv = [*ctx.command, *ctx.args]
        if not ctx.command:
            self._log(
                run,
                "kf-trainer-suite simulator: exec mode needs the container's "
                "command; the image's entrypoint cannot run here",
            )
            message = "exec mode: the container has no command"
            self._finished(run, START_ERROR_EXIT, "StartError", message)
            return
        try:
            proc = spawn(argv, {**os.environ, **ctx.env}, workdir)
        except OSError as exc:
            message = start_error(argv, exc)
            self._log(run, message)
            self._finished(run, START_ERROR_EXIT, "StartError", message)
            return
        run.proc = proc
        threading.Thread(
            target=self._exec_reader, args=(run,), daemon=True, name=f"kf-sim-exec-{pod.name}"
        ).start()
        _log.debug("exec %s/%s: %s", sim.namespace, pod.name, argv)

    def stop(self, run: Run) -> None:
        """Cancel a run (its late log lines are dropped) and kill its process group."""
        with run.lock:
            run.cancelled.set()
        proc = run.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._runs.discard(run)

    def stop_all(self) -> None:
        for run in list(self._runs):
            self.stop(run)
        self._runs.clear()

    def shutdown(self) -> None:
        """Stop the executor threads' pool (running executors are not waited for)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # ------------------------------------------------------------------ run threads

    def _finished(self, run: Run, code: int, reason: str | None, message: str | None) -> None:
        self.cx.worker.run_finished(partial(self._done, run, code, reason, message))

    def _exec_reader(self, run: Run) -> None:
        proc = run.proc
        code, message = 1, None
        try:
            assert proc is not None
            read_lines(proc, partial(self._log, run))
            code, _ = exit_status(proc.wait())
            message = read_termination_log(run.termination_log)
        except Exception:
            _log.exception("exec run of %s failed", run.pod.name)
        finally:
            self._finished(run, code, None, message)

    def _executor_thread(self, run: Run, ctx: PodContext, executor: Executor) -> None:
        code: int = 1
        reason: str | None = "Error"
        message: str | None = None
        try:
            result: Any = executor(ctx)
            if not isinstance(result, PodResult):
                result = PodResult(exit_code=int(result) if isinstance(result, int) else 0)
            code, reason, message = result.exit_code, result.reason, result.termination_message
            if message is None:
                message = read_termination_log(run.termination_log)
        except Exception as exc:
            for line in traceback.format_exc().rstrip().split("\n"):
                self._log(run, line)
            code, reason, message = 1, "Error", f"{type(exc).__name__}: {exc}"
        finally:
            self._finished(run, code, reason, message)

    def _log(self, run: Run, text: str) -> None:
        # Called from reader/executor threads: the lock orders it against the kill.
        with run.lock:
            if not run.cancelled.is_set():
                self.cx.kubelet.log(run.pod, text)

    def _done(self, run: Run, code: int, reason: str | None, message: str | None) -> None:
        already_cancelled = run.cancelled.is_set()
        with run.lock:
            run.cancelled.set()  # late ctx.log() calls from stray threads are dropped
        self._runs.discard(run)
        shutil.rmtree(run.workdir, ignore_errors=True)
        pod = run.pod
        if already_cancelled or pod.run is not run or not pod.active:
            return
        pod.run = None
        reason = reason or ("Completed" if code == 0 else "Error")
        self.cx.kubelet.finish(pod, code, reason, message)

    # ------------------------------------------------------------------ the environment

    def _pod_context(self, pod: PodSim, run: Run) -> PodContext:
        sim, job, rjob = pod.job.sim, pod.job, pod.job.rjob
        main = container(pod.containers, pod.main) or pod.containers[0]
        store = self.cx.store

        def reader(res: Resource) -> Callable[[str], JSON | None]:
            return lambda name: store.try_get(res, sim.namespace, name)

        # A missing Secret or ConfigMap is left out here (the scripted kubelet starts the
        # container anyway); what the kubelet would refuse, the local backend refuses.
        env, _ = resolve_env(
            main,
            sim.namespace,
            {SECRET: reader(SECRETS), CONFIG_MAP: reader(CONFIGMAPS)},
            store.try_get(PODS, sim.namespace, pod.name),
        )
        status_server = self.cx.status_server
        if status_server is not None and rjob.kind == "trainer" and URL_ENV in env:
            # The projected token and CA certificate, where a local process finds them.
            env.update(status_server.exec_env(run.workdir, sim.namespace, sim.name))
        env["JOB_COMPLETION_INDEX"] = str(pod.index)
        # The interpreter running the tests (its packages are the function's), unless its
        # path would be split by the launch script's unquoted expansion.
        env[LAUNCHER_ENV] = "python" if any(c.isspace() for c in sys.executable) else sys.executable
        env[TERMINATION_LOG_ENV] = str(run.termination_log)
        env.setdefault("PYTHONUNBUFFERED", "1")
        command = [expand(str(a), env) for a in main.get("command") or []]
        args = [expand(str(a), env) for a in main.get("args") or []]
        return PodContext(
            namespace=sim.namespace,
            pod=pod.name,
            container=pod.main,
            trainjob=sim.name,
            replicated_job=rjob.name,
            step=rjob.ancestor or rjob.name,
            kind=rjob.kind,
            job_index=job.index,
            completion_index=pod.index,
            image=str(main.get("image") or ""),
            command=command,
            args=args,
            env=env,
            workdir=run.workdir,
            termination_log=run.termination_log,
            cancelled=run.cancelled,
            _emit=partial(self._log, run),
        )
