"""How a training node's container command becomes local processes.

A ``CustomTrainer`` arrives as ``bash -c <script> kf-trainer <program>`` (see
:func:`kf_trainer_core.manifest.builder.custom_trainer_command`). Locally the program is run
directly — not through the script, whose ``pip install`` would change the user's
environment — by ``torchrun`` (one per node, configured by the ``PET_*`` variables
the Trainer sets) when the runtime's ML policy is torch and torch is importable, else
by ``python``, one process per rank with the variables ``torchrun`` would have set.
Any other command (``CustomTrainerContainer``, ``TrainerCommand``) runs as it is,
once per node.

Standard library only (imported by the supervisor).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Any, Literal

from kf_trainer_core.backends.local._common import CLUSTER_WORKSPACE, LAUNCHER_ENV
from kf_trainer_core.base import pysource
from kf_trainer_core.base.untrusted import whole_number

#: Variables a launcher sets per process: never inherited from the submitter.
RANK_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "JOB_COMPLETION_INDEX",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
)
MASTER_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class TrainerProgram:
    """What the trainer container runs."""

    kind: Literal["function", "command"]
    #: ``function``: the generated Python program.
    program: str = ""
    func_name: str = "program"
    packages: tuple[str, ...] = ()
    index_urls: tuple[str, ...] = ()
    #: ``command``: the argv, run once per node.
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    """One process to start for a node: argv, the environment it adds, and the prefix
    of its log lines."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    prefix: str = ""


def parse_trainer(command: list[str], args: list[str]) -> TrainerProgram:
    """Recognise the suite's generated function command, else keep the argv.

    The command is ``bash -c <script> kf-trainer <program> [<pip arguments>]``; pip's
    arguments are index options, ``--`` and the requirements (see
    :func:`kf_trainer_core.fields.checks.pip_arguments`)."""
    for i in range(len(command) - 4):
        if command[i : i + 2] == ["bash", "-c"] and command[i + 3] == "kf-trainer":
            script, program = command[i + 2], command[i + 4]
            found = re.search(r"kf_trainer_(\w+)\.py", script, re.ASCII)
            packages, index_urls = _pip_arguments([*command[i + 5 :], *args])
            return TrainerProgram(
                "function",
                program=program,
                func_name=found.group(1) if found else "program",
                packages=tuple(packages),
                index_urls=tuple(index_urls),
            )
    return TrainerProgram("command", argv=(*command, *args))


def _pip_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(requirements, index URLs)`` of pip's arguments: only what follows ``--`` is a
    requirement, so nothing of a manifest's reaches pip as an option."""
    if "--" not in argv:
        return [], []
    split = argv.index("--")
    opts = argv[:split]
    urls = [
        opts[i + 1] for i, o in enumerate(opts[:-1]) if o in ("--index-url", "--extra-index-url")
    ]
    return argv[split + 1 :], urls


def map_workspace(value: Any, workspace: str) -> Any:
    """``/workspace/...`` strings (what a cluster job reads) → this job's workspace."""
    if isinstance(value, str):
        if value == CLUSTER_WORKSPACE or value.startswith(CLUSTER_WORKSPACE + "/"):
            return workspace + value[len(CLUSTER_WORKSPACE) :]
        return value
    if isinstance(value, list):
        return [map_workspace(v, workspace) for v in value]
    if isinstance(value, dict):
        return {k: map_workspace(v, workspace) for k, v in value.items()}
    return value


def map_program_args(program: str, workspace: str) -> str:
    """Rewrite the ``/workspace`` paths in the program's ``func_args``.

    The generated program calls ``<func>(**json.loads('<args>'))`` inside
    ``_kf_trainer_main``; that one string literal is found with :mod:`ast` and
    replaced in place, so the user's code is left byte for byte as written.
    """
    try:
        tree = pysource.parse(program)
    except SyntaxError:
        return program
    main = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_kf_trainer_main"),
        None,
    )
    if main is None:
        return program
    for node in ast.walk(main):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "loads"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            literal = node.args[0]
            try:
                args = json.loads(str(literal.value))
            except ValueError:
                return program
            mapped = map_workspace(args, workspace)
            if mapped == args:
                return program
            text = repr(json.dumps(mapped, sort_keys=True, separators=(",", ":")))
            lines = program.splitlines(keepends=True)
            if literal.end_lineno != literal.lineno or literal.end_col_offset is None:
                return program
            row = lines[literal.lineno - 1].encode()
            # ast offsets count UTF-8 bytes.
            row = row[: literal.col_offset] + text.encode() + row[literal.end_col_offset :]
            lines[literal.lineno - 1] = row.decode()
            return "".join(lines)
    return program


def procs_per_node(value: Any, runtime_value: Any) -> int | None:
    """``numProcPerNode``: an int, ``None`` for ``auto``/``gpu`` (one process per GPU
    the node is given: :mod:`~kf_trainer_core.backends.local.gpus`), else one."""
    for candidate in (value, runtime_value):
        if isinstance(candidate, int) and candidate > 0:
            return candidate
        number = whole_number(candidate, 1) if isinstance(candidate, str) else None
        if number is not None:
            return number
        if isinstance(candidate, str) and candidate in ("auto", "gpu"):
            return None
    return 1


def free_port() -> int:
    """A TCP port free on the loopback interface now (the rendezvous port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((MASTER_ADDR, 0))
        return int(sock.getsockname()[1])


def torch_importable(python: str, current: str) -> bool:
    """Whether ``python`` can import torch (the launcher choice)."""
    # Not realpath: a virtualenv's python is a symlink to its base interpreter, and
    # the unresolved path is what selects the environment.
    if os.path.abspath(python) == os.path.abspath(current):
        return importlib.util.find_spec("torch") is not None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('torch') else 1)"
        return subprocess.run([python, "-c", probe], timeout=60, check=False).returncode == 0
    return False


@dataclass(frozen=True)
class NodeShape:
    """The distributed layout a node sees."""

    node_rank: int
    nnodes: int
    nproc: int
    master_port: int
    completion_index: int
    mpi: bool = False


def node_env(shape: NodeShape) -> dict[str, str]:
    """What the Trainer puts in every node container (the torch ML policy's ``PET_*``
    variables; ``JOB_COMPLETION_INDEX`` from the Job controller)."""
    return {
        "PET_NNODES": str(shape.nnodes),
        "PET_NPROC_PER_NODE": str(shape.nproc),
        "PET_NODE_RANK": str(shape.node_rank),
        "PET_MASTER_ADDR": MASTER_ADDR,
        "PET_MASTER_PORT": str(shape.master_port),
        "JOB_COMPLETION_INDEX": str(shape.completion_index),
    }


def node_launches(
    trainer: TrainerProgram,
    program_file: str | None,
    python: str,
    shape: NodeShape,
    use_torchrun: bool,
) -> list[Launch]:
    """The processes of one node."""
    if trainer.kind == "command":
        return [Launch(list(trainer.argv), {LAUNCHER_ENV: "command"})]
    assert program_file is not None
    if use_torchrun:
        # torchrun reads PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_*.
        return [
            Launch(
                [python, "-m", "torch.distributed.run", program_file], {LAUNCHER_ENV: "torchrun"}
            )
        ]
    world = shape.nnodes * shape.nproc
    launches = []
    for local in range(shape.nproc):
        rank = shape.node_rank * shape.nproc + local
        env = {
            LAUNCHER_ENV: "python",
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(shape.nproc),
            "GROUP_RANK": str(shape.node_rank),
            "GROUP_WORLD_SIZE": str(shape.nnodes),
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": MASTER_ADDR,
            "MASTER_PORT": str(shape.master_port),
        }
        if shape.mpi:
            env.update(
                {
                    "OMPI_COMM_WORLD_RANK": str(rank),
                    "OMPI_COMM_WORLD_SIZE": str(world),
                    "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                }
            )
        # torchrun's --tee prefix for the other local ranks; rank 0 reads as it is.
        prefix = f"[default{local}]:" if local else ""
        launches.append(Launch([python, program_file], env, prefix))
    return launches
