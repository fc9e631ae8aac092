"""The local dataset and model initializers: fetch ``STORAGE_URI`` into the job's
workspace (``<workspace>/dataset`` or ``<workspace>/model``), as the Trainer's
initializer containers fill ``/workspace/dataset`` and ``/workspace/model``.

Run by the supervisor as ``python -m kf_trainer_core.backends.local.initializer`` in an
initializer pod, so its output is that step's log and a failure is that step's
failure (exit code and termination message).

* a local path or ``file://`` URI: copied (a directory's content, or one file);
* ``hf://org/name[/path]``: ``huggingface_hub.snapshot_download`` (token from
  ``ACCESS_TOKEN``, the key of the initializer's Secret, or ``HF_TOKEN``);
* ``s3://bucket/prefix``: ``boto3`` (``ENDPOINT``, ``REGION``, ``ACCESS_KEY_ID``,
  ``SECRET_ACCESS_KEY`` / the ``AWS_*`` variables).

A missing optional package fails the step with a message naming it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from kf_trainer_core.backends.local._common import TERMINATION_LOG_ENV, TERMINATION_MESSAGE_LIMIT

KIND_ENV = "KF_TRAINER_INIT_KIND"
DEST_ENV = "KF_TRAINER_INIT_DEST"


class InitializerError(Exception):
    """A failure worth one clear line (the step's termination message)."""


def _ignored(rel: str, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def copy_local(source: Path, dest: Path, patterns: list[str]) -> tuple[int, int]:
    """Copy a file or a directory's content into ``dest``: ``(files, bytes)``."""
    if not source.exists():
        raise InitializerError(f"{source} does not exist on this machine")
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        shutil.copy2(source, dest / source.name)
        return 1, source.stat().st_size
    files = size = 0
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source).as_posix()
        if path.is_dir() or _ignored(rel, patterns):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        files += 1
        size += path.stat().st_size
    return files, size


def fetch_hf(uri: str, dest: Path, kind: str, patterns: list[str]) -> None:
    try:
        from huggingface_hub import snapshot_download  # type: ignore[import-not-found]
    except ImportError:
        raise InitializerError(
            f"{uri}: hf:// needs the huggingface_hub package in this environment. "
            "Fix: pip install huggingface_hub"
        ) from None
    parts = uri[len("hf://") :].strip("/").split("/")
    if len(parts) < 2:
        raise InitializerError(f"{uri}: expected hf://<org>/<name>[/<path>]")
    repo = "/".join(parts[:2])
    sub = "/".join(parts[2:])
    token = os.environ.get("ACCESS_TOKEN") or os.environ.get("HF_TOKEN") or None
    print(f"kf-trainer: downloading {repo} ({kind}) from the Hugging Face Hub", flush=True)
    snapshot_download(
        repo_id=repo,
        repo_type="dataset" if kind == "dataset" else "model",
        local_dir=str(dest),
        token=token,
        allow_patterns=[sub, f"{sub}/*"] if sub else None,
        ignore_patterns=patterns or None,
    )


def fetch_s3(uri: str, dest: Path, patterns: list[str]) -> tuple[int, int]:
    try:
        import boto3  # type: ignore[import-not-found]
    except ImportError:
        raise InitializerError(
            f"{uri}: s3:// needs the boto3 package in this environment. Fix: pip install boto3"
        ) from None
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    env = os.environ
    client = boto3.client(
        "s3",
        endpoint_url=env.get("ENDPOINT") or None,
        region_name=env.get("REGION") or None,
        aws_access_key_id=env.get("ACCESS_KEY_ID") or env.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=(
            env.get("SECRET_ACCESS_KEY") or env.get("AWS_SECRET_ACCESS_KEY") or None
        ),
    )
    files = size = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents") or []:
            key = str(item["Key"])
            rel = key[len(prefix) :].lstrip("/") or key.rsplit("/", 1)[-1]
            if key.endswith("/") or _ignored(rel, patterns):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(target))
            files += 1
            size += int(item.get("Size") or 0)
    return files, size


def initialize(uri: str, dest: Path, kind: str, patterns: list[str]) -> None:
    """Fetch ``uri`` into ``dest``; :class:`InitializerError` on any trouble."""
    dest.mkdir(parents=True, exist_ok=True)
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        path = Path(unquote(urlparse(uri).path) if scheme else uri).expanduser()
        print(f"kf-trainer: copying {path} to {dest}", flush=True)
        files, size = copy_local(path.resolve(), dest, patterns)
        print(f"kf-trainer: copied {files} file(s), {size} bytes", flush=True)
    elif scheme == "hf":
        fetch_hf(uri, dest, kind, patterns)
    elif scheme == "s3":
        files, size = fetch_s3(uri, dest, patterns)
        print(f"kf-trainer: downloaded {files} object(s), {size} bytes", flush=True)
    else:
        raise InitializerError(
            f"{uri}: the local backend cannot fetch {scheme}:// URIs. Fix: use a local path, "
            "file://, hf:// or s3://, or run the job on a cluster."
        )
    print(f"kf-trainer: {kind} ready in {dest}", flush=True)


def main() -> int:
    uri = os.environ.get("STORAGE_URI", "")
    kind = os.environ.get(KIND_ENV, "dataset")
    dest = Path(os.environ.get(DEST_ENV) or f"./{kind}")
    patterns = [p for p in (os.environ.get("IGNORE_PATTERNS") or "").split(",") if p.strip()]
    try:
        if not uri:
            raise InitializerError("STORAGE_URI is not set")
        initialize(uri, dest, kind, patterns)
    except InitializerError as exc:
        message = str(exc)
    except Exception as exc:  # any library failure: one line for the step's message
        message = f"{uri}: {type(exc).__name__}: {exc}"
    else:
        return 0
    print(f"kf-trainer: {kind} initializer failed: {message}", file=sys.stderr, flush=True)
    log = os.environ.get(TERMINATION_LOG_ENV)
    if log:
        with open(log, "w") as fh:
            fh.write(message.encode()[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore"))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
