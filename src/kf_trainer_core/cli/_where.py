"""Where the command works: one backend configuration built from
``$KF_TRAINER_BACKEND`` (the JSON the examples, Airflow connections and Prefect blocks
hold) and the flags ``--backend``, ``--namespace/-n``, ``--context``, ``--kubeconfig``,
``--state-dir``.

The flags are accepted both before the command group (``kf-trainer -n team-a jobs
list``) and after the command (``kf-trainer jobs list -n team-a``); the later one wins.
The configuration is validated by the core's own models (:mod:`kf_trainer_core.config`),
so a backend added there is usable here without changes: ``--backend NAME`` picks the
model whose ``backend`` is ``NAME`` and the flags fill the fields that model has.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, get_args

import click

from kf_trainer_core.base.documents import load_json
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cli._errors import CliError, Exit
from kf_trainer_core.fields import checks

#: The environment variable holding a backend configuration as JSON.
BACKEND_ENV = "KF_TRAINER_BACKEND"
_KEY = "kf_where"
_CONFIG = "kf_where_config"

#: The flags that set a config field, each named as its field.
FIELDS = ("namespace", "context", "kubeconfig", "state_dir")

F = TypeVar("F", bound=Callable[..., Any])


def backend_models() -> dict[str, type[Any]]:
    """The backend configuration models the core knows, by their ``backend`` name."""
    from kf_trainer_core.config import BackendConfig

    union = get_args(BackendConfig)[0]
    models: dict[str, type[Any]] = {}
    for model in get_args(union):
        default = model.model_fields["backend"].default
        models[str(default)] = model
    return models


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and param.name:
        ctx.find_root().meta.setdefault(_KEY, {})[param.name] = value
    return value


def where_options(func: F) -> F:
    """Add the backend options to a command or group."""
    options = [
        click.option(
            "--backend",
            metavar="|".join(backend_models()),
            help=f"Where jobs run (default: ${BACKEND_ENV}'s, else kubernetes).",
        ),
        click.option("-n", "--namespace", help="Namespace (default: the backend's or context's)."),
        click.option("--context", help="kubeconfig context (kubernetes backend)."),
        click.option(
            "--kubeconfig",
            type=click.Path(exists=True, dir_okay=False),
            help="kubeconfig file (kubernetes backend; default $KUBECONFIG, ~/.kube/config).",
        ),
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False),
            help="Local backend's state directory (default $KF_TRAINER_STATE_DIR, "
            "~/.kf-trainer/local).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    # The values go to the root context (see _store), not to the function's arguments.
    for param in func.__click_params__:  # type: ignore[attr-defined]
        if param.name in ("backend", *FIELDS):
            param.expose_value = False
            param.callback = _store
    return func


def check_namespace(namespace: str) -> str:
    """Refuse a namespace Kubernetes would refuse (RFC 1123 label), before any request:
    the core's check, worded for the flag."""
    problem = checks.namespace_problem(namespace, "--namespace")
    if problem:
        raise CliError(problem)
    return namespace


def backend_config(ctx: click.Context) -> Any:
    """The backend configuration for this invocation."""
    given: dict[str, Any] = dict(ctx.find_root().meta.get(_KEY, {}))
    raw = os.environ.get(BACKEND_ENV, "").strip()
    data: dict[str, Any] = {}
    if raw:
        try:
            loaded = load_json(raw, f"${BACKEND_ENV}")
        except ValueError as exc:
            raise CliError(f'{exc} Fix: e.g. {BACKEND_ENV}=\'{{"backend": "local"}}\'.') from None
        if not isinstance(loaded, dict):
            raise CliError(f'${BACKEND_ENV} must be a JSON object, e.g. {{"backend": "local"}}.')
        data = loaded
    models = backend_models()
    name = given.pop("backend", None)
    if name is not None:
        if name not in models:
            raise CliError(
                f"--backend {shown(name)} is unknown. Fix: use one of {', '.join(models)}."
            )
        if data.get("backend", "kubernetes") != name:
            data = {}  # another backend's settings do not carry over
        data["backend"] = name
    else:
        data.setdefault("backend", "kubernetes")
    if data["backend"] not in models:
        raise CliError(
            f"${BACKEND_ENV} names backend {shown(data['backend'])}. Fix: use one of "
            f"{', '.join(models)}."
        )
    model = models[data["backend"]]
    if "namespace" in given:
        check_namespace(given["namespace"])
    for field in FIELDS:
        if field not in given:
            continue
        if field not in model.model_fields:
            option = "--" + field.replace("_", "-")
            users = [n for n, m in models.items() if field in m.model_fields]
            raise CliError(
                f"{option} does not apply to the {data['backend']} backend. Fix: drop it, "
                f"or add --backend {users[0] if users else '...'}."
            )
        data[field] = given[field]
    config = model.parse(data)
    ctx.find_root().meta[_CONFIG] = config
    _last[:] = [config]
    return config


#: The configuration of the last command of this process (errors are reported after its
#: context has closed, and their fixes name commands with the same flags).
_last: list[Any] = []


def forget_last() -> None:
    """A new command starts: no configuration yet."""
    _last.clear()


def last_hint(*args: str) -> str:
    """``kf-trainer ARGS`` with the flags of the command that just ran."""
    from kf_trainer_core.base.hints import command

    if not _last:
        return "kf-trainer " + " ".join(args)
    return command(_last[0], args)


def hint(ctx: click.Context, *args: str, namespace: str | None = None) -> str:
    """A command line for the user to run next, reaching the same jobs as this one
    (the invocation's backend flags included), runnable as printed."""
    from kf_trainer_core.base.hints import command

    config = ctx.find_root().meta.get(_CONFIG) or backend_config(ctx)
    return command(config, args, namespace=namespace)


def require_state(config: Any) -> None:
    """Refuse a local or container backend's state directory that holds no jobs: a
    command that reads jobs must not create it (a mistyped ``--state-dir`` would
    otherwise answer "No TrainJobs" and leave an empty directory behind). The backend
    refuses such a read too (:class:`~kf_trainer_core.errors.StateDirNotFoundError`);
    this says it in the command's words, before any request."""
    if getattr(config, "backend", "kubernetes") == "kubernetes":
        return
    from kf_trainer_core.backends.local._common import missing_state

    problem = missing_state(config.state_path(), config.backend)
    if problem:
        raise CliError(
            f"{problem}. Fix: check --state-dir (or $KF_TRAINER_STATE_DIR and "
            f"${BACKEND_ENV}'s state_dir), or start a job first with `run`.",
            Exit.NOT_FOUND,
        )


def make_client(ctx: click.Context, *, creates: bool = False) -> Any:
    """A sync client for this invocation (closed when the command ends). Unless the
    command ``creates`` jobs (or reads only runtimes, which need none), a local state
    directory must hold jobs already."""
    from kf_trainer_core.client import TrainerClient

    config = backend_config(ctx)
    if not creates:
        require_state(config)
    namespace = config.resolve_namespace()
    if namespace:
        check_namespace(namespace)
    client = TrainerClient(config)
    ctx.call_on_close(client.close)
    return client


def check_identity(identity: str | None) -> str | None:
    """Refuse an empty ``--identity`` (it would match nothing, or everything)."""
    if identity is not None and not identity.strip():
        raise CliError(
            "--identity is empty. Fix: pass the orchestrator identity, e.g. "
            "--identity my_dag/train/scheduled__2024-01-01, or leave the option out.",
            Exit.BAD_INPUT,
        )
    return identity
