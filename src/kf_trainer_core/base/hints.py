"""The ``kf-trainer`` commands the suite prints for a user to run, written so that they
run as printed: from where the user is (``uv run --frozen kf-trainer`` inside a uv
project, ``kf-trainer`` where it is on ``PATH``, the script's path otherwise) and with
the flags that reach the same jobs (``--backend local --state-dir …``, ``-n``,
``--context``, ``--kubeconfig``).

A hint that names a state directory or kubeconfig the user never typed is still right:
the flags come from the configuration the job was run with, not from a guess.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The command's name on PATH (the ``[project.scripts]`` entry).
SCRIPT = "kf-trainer"


def _run_by_uv() -> bool:
    """Whether ``uv run`` started this process (``$UV`` set) inside a uv project."""
    here = Path.cwd()
    return bool(os.environ.get("UV")) and any(
        (folder / "uv.lock").is_file() and (folder / "pyproject.toml").is_file()
        for folder in (here, *here.parents)
    )


def program() -> str:
    """How the user starts ``kf-trainer`` from the current directory.

    ``uv run`` puts the project's ``.venv/bin`` on the ``PATH`` of what it runs, not on
    the user's: a process it started (``$UV`` set) inside a uv project prints
    ``uv run --frozen kf-trainer``."""
    here = Path.cwd()
    if _run_by_uv():
        return f"uv run --frozen {SCRIPT}"
    bindir = Path(sys.executable).parent
    found = shutil.which(SCRIPT)
    if found is not None and Path(found).parent == bindir:
        return SCRIPT
    script = bindir / SCRIPT
    if script.is_file():
        try:
            shown = str(script.relative_to(here))
        except ValueError:
            shown = str(script)
        return shlex.quote(shown)
    return f"{shlex.quote(sys.executable)} -m kf_trainer_core.cli"


def where_flags(config: Any, namespace: str | None = None) -> list[str]:
    """The global flags that reach the jobs of backend ``config`` (a ``BackendConfig``),
    in ``namespace`` (default: the configuration's own)."""
    backend = str(getattr(config, "backend", "kubernetes"))
    flags: list[str] = []
    if backend != "kubernetes":
        flags += ["--backend", backend]
        state_dir = config.state_path()
        if config.state_dir or os.environ.get("KF_TRAINER_STATE_DIR"):
            flags += ["--state-dir", str(state_dir)]
        ns = namespace or config.namespace
        if ns and ns != "local":
            flags += ["-n", ns]
        return flags
    if os.environ.get("KF_TRAINER_BACKEND", "").strip():
        # $KF_TRAINER_BACKEND chooses kubernetes by default; --backend says so explicitly
        flags += ["--backend", "kubernetes"]
    if getattr(config, "kubeconfig", None):
        flags += ["--kubeconfig", str(config.kubeconfig)]
    if getattr(config, "context", None):
        flags += ["--context", str(config.context)]
    ns = namespace or getattr(config, "namespace", None)
    if ns:
        flags += ["-n", ns]
    return flags


def command(config: Any, args: Iterable[str], *, namespace: str | None = None) -> str:
    """The full command line running ``kf-trainer ARGS`` against ``config``'s jobs,
    shell-quoted: e.g. ``uv run --frozen kf-trainer --backend local --state-dir
    .kf-trainer/state jobs logs train-x``."""
    words = [*where_flags(config, namespace), *args]
    return " ".join([program(), *(shlex.quote(w) for w in words)])


def python_command(args: Iterable[str]) -> str:
    """``python ARGS`` as the user starts this interpreter from the current directory
    (``uv run --frozen python`` inside a uv project run by uv)."""
    head = "uv run --frozen python" if _run_by_uv() else shlex.quote(sys.executable)
    return " ".join([head, *(shlex.quote(a) for a in args)])


def keeps_running(namespace: str, name: str, stop: str, again: str) -> str:
    """What an interrupted wait says, whoever waited (the CLI, the client): the job
    keeps running, and how to stop it (``stop``) or follow it again (``again``)."""
    return (
        f"interrupted; the TrainJob {namespace}/{name} keeps running. Stop it with: {stop} "
        f"— or follow it again with: {again}"
    )
