"""Checkpoints from inside a training function: where they go, the latest one, and
writes that never leave half a checkpoint behind.

    def train(steps: int = 100):
        from kf_trainer_core.checkpoints import latest, load_json, save_json, step_of

        last = latest()                                  # None on the first attempt
        state = load_json(last) if last else {"w": 0.0}
        start = step_of(last) + 1 if last else 0
        for step in range(start, steps):
            state["w"] += 0.1
            if step % 10 == 9:
                save_json(step, state)                   # <dir>/step-0000000009.json

Every attempt of one job identity (a retried Airflow task, a Prefect task retry, a
resubmit with the same identity) sees the **same** directory, named by
``$KF_TRAINER_CHECKPOINT_DIR``; a retry after a lost node resumes from the last
checkpoint instead of starting over. Where the directory lives (a PVC on a cluster, the
local backend's state directory) and how it is cleaned: ``docs/checkpoints.md``.

The naming convention: a checkpoint is one entry (file or directory) of the checkpoint
directory named ``step-<N>`` with ``N`` zero-padded to 10 digits, optionally followed by
one suffix (``step-0000000042.pt``). :func:`latest` picks the highest ``N``; entries
being written (``.tmp-*``) and other names are ignored. :func:`save` writes into a
temporary name and renames it into place, so a process killed mid-write leaves no
partial ``step-*`` entry.

This module imports only the standard library and runs on Python 3.8+: the generated
program carries its source into pods whose image does not have kf-trainer-suite.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DIR_ENV",
    "URI_ENV",
    "checkpoint_dir",
    "checkpoint_uri",
    "checkpoints",
    "latest",
    "load_json",
    "remove_tree",
    "save",
    "save_json",
    "step_of",
]

#: The directory shared by every attempt of the job's identity (a path in the pod).
DIR_ENV = "KF_TRAINER_CHECKPOINT_DIR"
#: The storage URI shared by every attempt, when the job was given one
#: (``Checkpoints(uri="s3://...")``): ``<uri>/<namespace>/<identity key>/``.
URI_ENV = "KF_TRAINER_CHECKPOINT_URI"
#: Where a cluster pod (and a container of the container backend) sees the checkpoint
#: volume; the identity's directory is ``<mount>/<namespace>/<identity key>``.
DEFAULT_MOUNT = "/mnt/kf-trainer-checkpoints"
#: Under a local state directory: ``<state>/checkpoints/<namespace>/<identity key>``.
LOCAL_SUBDIR = "checkpoints"

_STEP = re.compile(r"step-(\d{1,19})(\.[A-Za-z0-9][A-Za-z0-9._-]*)?")
#: The highest step ``save`` writes: ten digits, so that the names sort by step both
#: numerically (``latest``) and as text (``ls``, a bucket's listing).
MAX_STEP = 10**10 - 1
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


# ------------------------------------------------------------ inside the function


def checkpoint_dir() -> Path | None:
    """The identity's checkpoint directory (created if missing), or ``None`` when the
    job has none (``$KF_TRAINER_CHECKPOINT_DIR`` unset: checkpoints are off, or only a
    URI was configured - see :func:`checkpoint_uri`)."""
    value = os.environ.get(DIR_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _shown(value: object) -> str:
    """``repr(value)`` cut to 200 characters, as ``kf_trainer_core.base.quoting.shown``
    quotes a value in an error (this module imports nothing of the suite)."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:160]}… [{len(text):,} characters]"


def checkpoint_uri() -> str | None:
    """The identity's storage URI (``Checkpoints(uri=...)``), or ``None``."""
    return os.environ.get(URI_ENV, "").strip() or None


def step_of(path: str | os.PathLike[str]) -> int:
    """The step number in a checkpoint's name (``step-0000000042.pt`` -> 42)."""
    match = _STEP.fullmatch(Path(path).name)
    if match is None:
        raise ValueError(
            f"{_shown(Path(path).name)} is not a checkpoint name. "
            "Fix: name checkpoints step-<N>[.suffix] (save() does)."
        )
    return int(match.group(1))


def checkpoints(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The checkpoints in ``directory`` (default: :func:`checkpoint_dir`), oldest step
    first."""
    root = Path(directory) if directory is not None else checkpoint_dir()
    if root is None or not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _STEP.fullmatch(p.name)]
    return sorted(found, key=lambda p: (step_of(p), p.name))


def latest(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """The checkpoint with the highest step, or ``None`` (no directory, or nothing
    saved yet: the first attempt)."""
    found = checkpoints(directory)
    return found[-1] if found else None


def save(
    step: int,
    write: Callable[[Path], Any],
    *,
    suffix: str = "",
    keep: int | None = None,
    directory: str | os.PathLike[str] | None = None,
    all_ranks: bool = False,
) -> Path | None:
    """Write checkpoint ``step`` atomically: ``write(path)`` fills a temporary path (a
    file, or a directory it creates), which is then renamed to ``step-<N><suffix>``.

    ``keep=N`` removes all but ``N`` checkpoints after the write (only when asked:
    nothing is deleted otherwise): the one just written is always kept, and the others
    kept are those with the highest steps ("newest" is the step, as for :func:`latest`).
    A checkpoint of an earlier attempt with a higher step than the one just written is
    therefore kept, and :func:`latest` still returns it: an attempt that means to start
    over below it cleans the identity's checkpoints first (``docs/checkpoints.md``).
    Only rank 0 of node 0 writes unless ``all_ranks``; other ranks get ``None``, as
    does a job without a checkpoint directory.
    """
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError(
            f"step must be an integer from 0 to {MAX_STEP} (got {_shown(step)}): checkpoint "
            "names carry the step in 10 digits. Fix: pass the step or epoch number."
        )
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep must be an integer >= 1 (got {_shown(keep)}).")
    if suffix and not _STEP.fullmatch("step-0" + suffix):
        raise ValueError(f"suffix {_shown(suffix)} is not a plain file suffix. Fix: e.g. '.pt'.")
    if not all_ranks and not _rank_zero():
        return None
    root = Path(directory) if directory is not None else checkpoint_dir()
    if root is None:
        return None
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:010d}{suffix}"
    tmp = root / f".tmp-{uuid.uuid4().hex[:12]}-{final.name}"
    try:
        write(tmp)
        if tmp.is_file():
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        elif not tmp.exists():
            raise FileNotFoundError(
                f"write(path) created nothing at {tmp}. Fix: write the checkpoint to the path "
                "it is given."
            )
        _replace(tmp, final)
    finally:
        _remove(tmp)
    _fsync_dir(root)
    if keep is not None:
        # Never the one just written, whatever steps an earlier attempt left.
        others = [p for p in checkpoints(root) if p.name != final.name]
        for old in others[: max(0, len(others) - (keep - 1))]:
            _remove(old)
    return final


def save_json(step: int, value: Any, **options: Any) -> Path | None:
    """:func:`save` of a JSON value as ``step-<N>.json``."""

    def write(path: Path) -> None:
        path.write_text(json.dumps(value, sort_keys=True))

    return save(step, write, suffix=".json", **options)


def load_json(path: str | os.PathLike[str]) -> Any:
    """Read a checkpoint written by :func:`save_json`."""
    return json.loads(Path(path).read_text())


def _rank_zero() -> bool:
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    node = os.environ.get("PET_NODE_RANK") or os.environ.get("JOB_COMPLETION_INDEX") or "0"
    return rank == "0" and node == "0"


def _replace(tmp: Path, final: Path) -> None:
    if tmp.is_dir() and final.exists():
        # A directory cannot replace another in one rename: move the old one aside
        # first (a rerun of a step after a resume writes it again).
        aside = final.with_name(f".tmp-old-{uuid.uuid4().hex[:12]}-{final.name}")
        os.replace(final, aside)
        os.replace(tmp, final)
        _remove(aside)
    else:
        os.replace(tmp, final)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_tree(path: str | os.PathLike[str], root: str | os.PathLike[str], depth: int) -> bool:
    """Remove the directory ``path``, which must lie exactly ``depth`` levels under
    ``root``: the one way the suite deletes an identity's checkpoints (the local clean,
    and the cleaning job's pod on a cluster). Whether it existed.

    Refused (``ValueError``, nothing removed) when ``path`` or any directory between
    ``root`` and it is a symbolic link: a link would make one identity's clean remove
    what it points to. Raises ``OSError`` naming what is left when some of it could not
    be removed (e.g. files a root container wrote): a clean never reports success for a
    directory that is still there.
    """
    base = os.path.realpath(os.fspath(root))  # the root itself (a mount) may be a link
    target = os.path.normpath(os.path.join(base, os.path.relpath(os.path.abspath(path), root)))
    parts = os.path.relpath(target, base).split(os.sep)
    if len(parts) != depth or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{target} is not a directory {depth} levels under {base}; refused.")
    step = base
    for part in parts:
        step = os.path.join(step, part)
        if os.path.islink(step):
            raise ValueError(
                f"{step} is a symbolic link; refused to remove checkpoints through it. "
                "Fix: remove the link by hand, and what it points to if that is yours."
            )
    if not os.path.lexists(target):
        return False
    failed: list[str] = []

    def note(*args: Any) -> None:
        failed.append(str(args[1]))

    if sys.version_info >= (3, 12):
        shutil.rmtree(target, onexc=note)
    else:  # pragma: no cover - pods on older Pythons
        shutil.rmtree(target, onerror=note)
    if os.path.lexists(target):
        shown = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        raise OSError(
            f"{target} was not removed: {shown or 'entries'} could not be deleted (not "
            "writable by this user?). Fix: remove what is left as the user that wrote it, "
            "e.g. root for files a container wrote."
        )
    return True


# ------------------------------------------------------- where the location is


def identity_key(identity: str) -> str:
    """The directory name of an identity's checkpoints: readable, one path segment,
    the same for every attempt (it depends on the identity only), and distinct for
    distinct identities (a digest of the whole identity ends it)."""
    readable = _UNSAFE.sub("-", identity.lower()).strip("-.")[:60].strip("-.")
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{readable}-{digest}" if readable else digest


def local_dir(state_dir: str | os.PathLike[str], namespace: str, identity: str) -> Path:
    """The identity's checkpoint directory under a local backend's state directory."""
    if not namespace or "/" in namespace or namespace in (".", ".."):
        raise ValueError(f"{_shown(namespace)} is not a namespace.")
    return Path(state_dir) / LOCAL_SUBDIR / namespace / identity_key(identity)


def job_identity(job: dict[str, Any]) -> str:
    """What names a TrainJob's checkpoint location: its identity annotation (shared by
    every attempt), else its name."""
    meta = job.get("metadata") or {}
    ident = (meta.get("annotations") or {}).get(IDENTITY_ANNOTATION)
    return str(ident) if ident else str(meta.get("name") or "")


def local_setting(job: dict[str, Any]) -> bool:
    """Whether a local or container job gets a checkpoint directory: on unless the
    job says ``Checkpoints(enabled=False)`` (annotation ``off``)."""
    meta = job.get("metadata") or {}
    return (meta.get("annotations") or {}).get(ANNOTATION) != "off"


#: The builder's annotations (duplicated from :mod:`kf_trainer_core.manifest.builder` so that
#: the supervisor need not import it; a test keeps them in step).
IDENTITY_ANNOTATION = "kf-trainer-suite/identity"
#: The identity key of a job's checkpoints, or ``off``.
ANNOTATION = "kf-trainer-suite/checkpoints"
