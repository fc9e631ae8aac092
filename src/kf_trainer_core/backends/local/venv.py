"""Virtual environments for ``LocalConfig(use_venv=True)``: one per interpreter,
package set and index list, built once and reused by every later job (the Kubeflow
SDK's local backend builds one per job).

``uv`` builds them when it is on PATH (seconds), else ``python -m venv`` and pip. A
file lock keeps two jobs from building the same one; a marker file says it is complete,
so a build that was killed halfway is redone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kf_trainer_core.backends.local.liveness import die_with_parent

READY = ".kf-trainer-ready"
#: How often a build looks whether it was cancelled.
CANCEL_POLL_SECONDS = 0.1


def venv_key(python: str, packages: Sequence[str], index_urls: Sequence[str]) -> str:
    payload = json.dumps([os.path.realpath(python), sorted(packages), list(index_urls)])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def venv_python(root: Path) -> Path:
    return root / "bin" / "python"


def _run(
    argv: list[str],
    log: Callable[[str], None],
    env: Mapping[str, str] | None,
    cancel: threading.Event | None = None,
) -> None:
    # The build dies with the supervisor that runs it, as its pods do: orphaned, it
    # went on installing into the virtualenv that the next job, let in by the lock
    # the kernel dropped, removes and builds again. A session of its own: a cancel
    # stops what it started too (which holds its output open).
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=None if env is None else dict(env),
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )
    assert proc.stdout is not None
    done = threading.Event()
    if cancel is not None:
        threading.Thread(target=_cancel_when, args=(cancel, done, proc), daemon=True).start()
    try:
        for raw in proc.stdout:
            log(raw.decode("utf-8", errors="replace").rstrip("\n"))
        code = proc.wait()
    finally:
        done.set()
    if cancel is not None and cancel.is_set():
        raise BuildCancelled(f"{' '.join(argv[:3])} ... was stopped")
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... exited with {code}")


def _lock(fd: int, cancel: threading.Event | None) -> None:
    """Take the build's lock, waiting while another job builds the same virtualenv —
    unless ``cancel`` is set meanwhile (:class:`BuildCancelled`)."""
    if cancel is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if cancel.wait(CANCEL_POLL_SECONDS):
                raise BuildCancelled("waiting for another job's build was stopped") from None


class BuildCancelled(RuntimeError):
    """The build was stopped (its job is being deleted, or its supervisor stopped)."""


def _cancel_when(
    cancel: threading.Event, done: threading.Event, proc: subprocess.Popen[bytes]
) -> None:
    """Stop the build's process group once ``cancel`` is set, unless it ended first."""
    while not done.wait(CANCEL_POLL_SECONDS):
        if cancel.is_set():
            # Its leader is not reaped until the reader's wait (after EOF): the group
            # id is still the build's.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return


def ensure_venv(
    venvs: Path,
    python: str,
    packages: Sequence[str],
    index_urls: Sequence[str],
    log: Callable[[str], None],
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """The interpreter of a venv with ``packages`` installed (built if needed);
    ``env`` is the environment of the build's processes; setting ``cancel`` stops the
    build (:class:`BuildCancelled`), which a later job redoes."""
    key = venv_key(python, packages, index_urls)
    root = venvs / key
    if (root / READY).exists():
        log(f"kf-trainer: using the cached virtualenv {root}")
        return str(venv_python(root))
    venvs.mkdir(parents=True, exist_ok=True)
    with (venvs / f"{key}.lock").open("w") as lock:
        _lock(lock.fileno(), cancel)
        if (root / READY).exists():
            return str(venv_python(root))
        shutil.rmtree(root, ignore_errors=True)
        log(f"kf-trainer: building a virtualenv with {' '.join(packages) or 'no packages'}")
        index: list[str] = []
        if index_urls:
            index = ["--index-url", index_urls[0]]
            for url in index_urls[1:]:
                index += ["--extra-index-url", url]
        uv = shutil.which("uv")
        inside = str(venv_python(root))
        if uv is not None:
            _run([uv, "venv", "--quiet", "--python", python, str(root)], log, env, cancel)
            install = [uv, "pip", "install", "--python", inside]
        else:
            _run([python, "-m", "venv", str(root)], log, env, cancel)
            install = [inside, "-m", "pip", "install", "--disable-pip-version-check"]
        if packages:
            # "--": every package is a requirement, never an option.
            _run([*install, *index, "--", *packages], log, env, cancel)
        (root / READY).touch()
        log(f"kf-trainer: installed {' '.join(packages)}" if packages else "kf-trainer: venv ready")
    return str(venv_python(root))
