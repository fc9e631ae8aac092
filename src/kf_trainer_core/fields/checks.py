"""Checks of values that reach somewhere dangerous: generated code, a shell, pip's
command line, the local backend's paths, or a manifest that anyone who can read the
job can read.

Each ``*_problem`` function returns ``None`` for a good value, or a message in the
spec's ``"<problem> Fix: <fix>"`` form; spec validators raise it as a ``ValueError``
and the client raises it as a :class:`~kf_trainer_core.errors.SpecError`. None of the
messages quotes a value that could be a credential.
"""

from __future__ import annotations

import keyword
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, localcontext
from typing import Any, TypeVar
from urllib.parse import urlsplit

from kf_trainer_core.base.errors import FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.base.secrets import token_kind
from kf_trainer_core.base.timeutil import duration_problem
from kf_trainer_core.fields._model import FIX_MARK, field_problem, fix

#: What separates a problem from its fix in a validator's message.
FIX = FIX_MARK

# ------------------------------------------------------------ spec field helpers

# Kubernetes resource.Quantity (the apiserver's own regular expression, written out).
QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(\d+(\.\d*)?|\.\d+)))?\Z"
)
_SUFFIX_EXPONENT = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def spec_mapping(text: str | bytes, field: str = "") -> dict[str, Any]:
    """The mapping a spec text holds (YAML or JSON, at most 1 MiB, aliases refused), as
    ``TrainJobSpec.parse`` and the Airflow operator read one; else a :class:`SpecError`
    naming ``field`` and the position, never quoting the text."""
    # Here, not at the top: this module is imported where a DAG file is parsed, and
    # PyYAML is needed only where a spec comes as text.
    from kf_trainer_core.base.documents import DocumentError, load_document

    try:
        data = load_document(text, "the spec text")
    except DocumentError as exc:
        raise SpecError.single(
            field, f"cannot be read: {exc}", "pass a dict, a TrainJobSpec, or YAML/JSON text."
        ) from None
    if not isinstance(data, dict):
        raise SpecError.single(
            field,
            f"the spec text holds a {type(data).__name__}, not a mapping.",
            "write the spec's fields (runtime, trainer, …) as a mapping, e.g. "
            "examples/specs/quickstart.yaml.",
        )
    return data


#: The largest quantity Kubernetes keeps (2^63-1); the API server caps a larger one.
QUANTITY_MAX = Decimal(2**63 - 1)


def _quantity_value(qty: int | float | str) -> Decimal | None:
    """The number a quantity stands for (``None``: not a quantity). Beyond what a
    ``Decimal`` holds (``1e1000000``) it is infinite or NaN, never an error: the
    arithmetic runs with no trap set."""
    if isinstance(qty, (int, float)):
        return Decimal(qty)
    m = QUANTITY.match(qty)
    if m is None:
        return None
    with localcontext() as ctx:
        ctx.traps = dict.fromkeys(ctx.traps, False)
        number, suffix = Decimal(m.group(1)), m.group(3) or ""
        if suffix.endswith("i"):
            return number * Decimal(1024) ** (" KMGTPE".index(suffix[0]))
        if suffix in _SUFFIX_EXPONENT:
            return number.scaleb(_SUFFIX_EXPONENT[suffix])
        if suffix:
            return number.scaleb(int(Decimal(suffix[1:])))
        return number


def quantity_in_range(qty: int | float | str) -> bool:
    """Whether a quantity (already checked to be one) is a finite number Kubernetes
    keeps as it is: at most :data:`QUANTITY_MAX` in magnitude."""
    value = _quantity_value(qty)
    return value is not None and value.is_finite() and abs(value) <= QUANTITY_MAX


def whole_quantity(qty: int | float | str) -> bool:
    """Whether a quantity (already checked to be one) is a whole number, as
    Kubernetes requires of extended resources."""
    value = _quantity_value(qty)
    return value is not None and value.is_finite() and value == value.to_integral_value()


def each(values: list[str] | None, problem_of: Callable[[str], str | None]) -> list[str] | None:
    """Check every entry of a list; problems are keyed by index (``[2]``)."""
    problems = [
        field_problem(f"[{i}]", problem)
        for i, value in enumerate(values or [])
        if (problem := problem_of(value))
    ]
    if problems:
        raise SpecError(problems)
    return values


_T = TypeVar("_T")


def refuse_problem(value: _T | None, problem: Callable[[_T], str | None]) -> _T | None:
    """``value``, unless ``problem`` finds one in it (``ValueError`` with its text);
    ``None`` passes unchecked."""
    found = problem(value) if value is not None else None
    if found:
        raise ValueError(found)
    return value


def refuse_tokens(value: _T, what: str) -> _T:
    """``value``, unless a string in it looks like a credential (``ValueError``)."""
    problem = token_problem(value, what)
    if problem:
        raise ValueError(problem)
    return value


# ------------------------------------------------------------ generated Python code


def identifier_problem(text: str, what: str) -> str | None:
    """Why ``text`` cannot be a Python identifier in generated code, or ``None``."""
    if isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text):
        return None
    suggestion = re.sub(r"\W", "_", str(text)).strip("_") or "train"
    if suggestion[0].isdigit() or keyword.iskeyword(suggestion):
        suggestion = f"fn_{suggestion}"
    return fix(
        f"{what} {shown(text)} is not a Python identifier; it becomes a name in the program "
        "that the training pods run.",
        f"use letters, digits and '_' only, e.g. {shown(suggestion)}.",
    )


def module_path_problem(text: str, what: str) -> str | None:
    """Why ``text`` cannot be a dotted module path in an ``import``, or ``None``."""
    parts = text.split(".") if isinstance(text, str) else [""]
    if all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return None
    return fix(
        f"{what} {shown(text)} is not a dotted module path of Python identifiers.",
        "name an importable module, e.g. 'my_package.training'.",
    )


# ------------------------------------------------------------------------------ pip


def requirement_problem(text: str) -> str | None:
    """Why ``text`` is not a requirement specifier pip may install, or ``None``.

    Only PEP 508 specifiers pass: anything else (``-r file``, ``--index-url=...``)
    would reach pip as an option."""
    if not isinstance(text, str) or text.startswith("-"):
        return fix(
            f"{shown(text)} is a pip option, not a requirement; options are not passed to pip.",
            "list requirement specifiers such as 'numpy>=1.26'; give indexes with pip_index_urls.",
        )
    # packaging's grammar costs ~20 ms to import: paid by specs that install packages,
    # not by every module that imports the checks (an Airflow DAG file among them).
    from packaging.requirements import InvalidRequirement, Requirement

    kind = token_kind(text)
    if kind:
        # Never quoted: the requirement holds the credential.
        return fix(
            f"a requirement holds {kind}; it would be stored in clear text in the TrainJob.",
            "install from an index or URL without credentials in it, or give pip the "
            "credentials through the trainer's env from a Secret (e.g. PIP_INDEX_URL as a "
            "SecretKeyRef).",
        )
    try:
        Requirement(text)
    except InvalidRequirement:
        return fix(
            f"{shown(text)} is not a requirement specifier (PEP 508).",
            "write e.g. 'numpy>=1.26', 'torch[cpu]==2.5.1', or 'name @ https://host/x.whl' "
            "for a direct URL.",
        )
    return None


def index_url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) package index URL, or ``None``."""
    ok = isinstance(url, str) and not any(c.isspace() or ord(c) < 32 for c in url)
    if ok:
        try:
            parts = urlsplit(url)
        except ValueError:
            ok = False
        else:
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    if ok and token_kind(url):
        return fix(
            "carries a password in its user info, which would be stored in clear text in "
            "the TrainJob.",
            "drop it from the URL and give pip the index through the trainer's env from a "
            "Secret (PIP_INDEX_URL or PIP_EXTRA_INDEX_URL as a SecretKeyRef).",
        )
    if ok:
        return None
    # An index URL may carry basic-auth credentials: name the field, not the value.
    return fix(
        "is not an http(s) URL of a package index.",
        "write the full URL with its scheme, e.g. 'https://pypi.org/simple'.",
    )


#: Query parameters that carry a credential or a pre-signed grant (S3, GCS, Azure SAS,
#: OAuth): a URI with one would hand that grant to anyone who can read the TrainJob.
_CREDENTIAL_PARAMS = re.compile(
    r"^(x-amz-(signature|credential|security-token)|x-goog-(signature|credential)|sig|"
    r"signature|token|access_token|api_?key|key|password|secret)\Z",
    re.IGNORECASE,
)


def uri_credentials_problem(uri: str, field: str) -> str | None:
    """Why ``uri`` would put a credential into the manifest (a password in its user info,
    a signature or token in its query), or ``None``. Never quotes the URI."""
    try:
        parts = urlsplit(uri)
        has_password = parts.password is not None
    except ValueError:
        return None  # not a URI: the field's own checks say so
    names = [item.split("=", 1)[0] for item in parts.query.split("&") if item]
    if not has_password and not any(_CREDENTIAL_PARAMS.match(n) for n in names):
        return None
    where = "a password in its user info" if has_password else "a credential in its query"
    return fix(
        f"{field} carries {where}, which would be stored in clear text in the TrainJob.",
        "write the URI without it and give the credential through secret_ref='<secret>' "
        "(or the initializer's env from a Secret).",
    )


def pip_arguments(packages: Iterable[str], index_urls: Iterable[str]) -> list[str]:
    """pip's arguments for installing ``packages``: index options, then ``--`` so that
    pip reads every later argument as a requirement, never as an option."""
    urls = list(index_urls)
    args: list[str] = []
    if urls:
        args += ["--index-url", urls[0]]
        for url in urls[1:]:
            args += ["--extra-index-url", url]
    return [*args, "--", *packages]


# ---------------------------------------------------------------------- credentials


class ClearTextSecretWarning(UserWarning):
    """An environment variable whose name suggests a secret holds a clear-text value."""


#: Variables that hold credentials by convention: a clear-text value is refused.
CREDENTIAL_NAMES = frozenset(
    {
        "ACCESS_TOKEN",
        "ACCESS_KEY_ID",
        "SECRET_ACCESS_KEY",
        "HF_TOKEN",
        "HF_HUB_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACE_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_CLIENT_SECRET",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GITLAB_TOKEN",
        "WANDB_API_KEY",
        "COMET_API_KEY",
        "NEPTUNE_API_TOKEN",
        "MLFLOW_TRACKING_TOKEN",
        "MLFLOW_TRACKING_PASSWORD",
        "DATABRICKS_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "KAGGLE_KEY",
        "PIP_INDEX_URL_PASSWORD",
    }
)

_SECRET_LIKE = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)",
    re.IGNORECASE,
)


def _secret_fix(name: str) -> str:
    return (
        f"store it in a Secret (kubectl create secret generic <secret> "
        f"--from-literal={name}=...) and pass SecretKeyRef(name='<secret>', key='{name}') "
        "as the value; an initializer takes secret_ref='<secret>' instead."
    )


def env_value_problem(name: str, value: Any) -> str | None:
    """Why the clear-text ``value`` of variable ``name`` must not go into a manifest,
    or ``None``. Warns (:class:`ClearTextSecretWarning`) when only the name suggests a
    secret. Never quotes the value."""
    if not isinstance(value, str) or not value:
        return None
    kind = token_kind(value)
    if name.upper() in CREDENTIAL_NAMES or kind is not None:
        what = f"holds {kind}" if kind else "is a credential variable"
        return fix(
            f"{name} {what} in clear text; the TrainJob would store it where anyone who can "
            "read the job (or the pipeline) can read it.",
            _secret_fix(name),
        )
    if _SECRET_LIKE.search(name):
        warnings.warn(
            f"environment variable {name} looks like a secret but is given in clear text; "
            f"it will be stored in the TrainJob. Fix: {_secret_fix(name)}",
            ClearTextSecretWarning,
            stacklevel=2,
        )
    return None


def env_values(env: Mapping[Any, Any], *, allow_refs: bool) -> dict[Any, Any]:
    """An ``env`` mapping with numbers and booleans as strings (as the SDK writes them).
    Any other value is refused here, keyed by its variable, so that the error names
    ``<field>.env.<NAME>`` (a union's per-member errors would not). Secret references
    (``SecretKeyRef`` or its dict form) pass on when ``allow_refs``."""
    out: dict[Any, Any] = {}
    problems: list[FieldProblem] = []
    for name, value in env.items():
        if isinstance(value, (int, float, bool)):
            value = str(value)
        is_ref = isinstance(value, Mapping) or type(value).__name__ == "SecretKeyRef"
        if not (isinstance(value, str) or (allow_refs and is_ref)):
            # Only the type is named: the value might be a credential.
            problems.append(
                FieldProblem(
                    str(name),
                    f"a {type(value).__name__} is not an environment variable value.",
                    "give a string"
                    + (" or SecretKeyRef(name=..., key=...)." if allow_refs else "."),
                )
            )
        out[name] = value
    if problems:
        raise SpecError(problems)
    return out


def check_env(env: Mapping[str, Any] | None) -> None:
    """Refuse clear-text credentials among ``env`` values (plain strings; references
    pass). Raises :class:`SpecError` whose problems are keyed by variable name, so the
    error names ``<field>.env.<NAME>``."""
    problems = [
        field_problem(str(name), problem)
        for name, value in (env or {}).items()
        if (problem := env_value_problem(str(name), value))
    ]
    if problems:
        raise SpecError(problems)


def token_problem(values: Any, what: str) -> str | None:
    """Why the strings inside ``values`` (nested lists and dicts too) must not go into
    a manifest because one looks like a credential, or ``None``."""
    stack = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            kind = token_kind(item)
            if kind:
                return fix(
                    f"{what} holds {kind} in clear text; it would be stored in the TrainJob.",
                    "read it in the pod from an environment variable set with SecretKeyRef "
                    "(trainer env) instead of passing it as a value.",
                )
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


# --------------------------------------------------------------- Kubernetes names

_RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
#: A Kubernetes object's name (RFC 1123 subdomain; at most 253 characters, checked apart).
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def namespace_problem(namespace: Any, what: str = "namespace") -> str | None:
    """Why ``namespace`` cannot name a Kubernetes namespace (an RFC 1123 label, at most
    63 characters), or ``None``."""
    if isinstance(namespace, str) and len(namespace) <= 63 and _RFC1123_LABEL.match(namespace):
        return None
    example = re.sub(r"[^a-z0-9-]+", "-", str(namespace).lower()).strip("-")[:63] or "team-a"
    return fix(
        f"{what} {shown(namespace)} is not a valid namespace name (RFC 1123 label: at most 63 "
        "lowercase letters, digits and '-', starting and ending alphanumeric).",
        f"use e.g. {shown(example)}.",
    )


def check_namespace(namespace: Any, field: str = "namespace") -> str:
    """``namespace`` if valid, else :class:`SpecError` naming ``field``."""
    problem = namespace_problem(namespace)
    if problem:
        raise SpecError(field_problem(field, problem))
    return str(namespace)


# An image reference: [registry[:port]/]path[:tag][@digest], no whitespace.
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z"
)


def image_problem(image: str) -> str | None:
    """Why ``image`` is not a container image reference, or ``None``."""
    if _IMAGE.match(image):
        return None
    return fix(
        f"{shown(image)} is not a container image reference.",
        "write [registry/]repository[:tag][@digest] without spaces, with a lowercase "
        "repository, e.g. 'ghcr.io/team/trainer:1.2'.",
    )


# ----------------------------------------------------------------- client arguments


def check_seconds(**durations: Any) -> None:
    """Refuse durations that are not positive numbers of seconds (``None`` passes:
    no limit), naming the argument, before any request: ``timeout="60"`` would
    otherwise fail deep inside a wait, and ``timeout=-5`` would time out at once."""
    problems = [
        problem
        for field, value in durations.items()
        if (problem := duration_problem(value, field)) is not None
    ]
    if problems:
        raise SpecError(problems, title="Invalid arguments")


def check_count(**counts: Any) -> None:
    """Refuse counts (``tail``, ``log_tail``) that are not whole numbers >= 0 (``None``
    passes), naming the argument."""
    for field, value in counts.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise SpecError.single(
                field,
                f"{shown(value)} is not a number of lines.",
                f"give a whole number >= 0, e.g. {field}=100, or leave it out.",
                title="Invalid arguments",
            )


#: The SDK's step names: the initializers, and ``node-<index>`` (``node-0`` is the
#: first training node, or the MPI launcher).
STEP_NAME = re.compile(r"^(dataset-initializer|model-initializer|node-\d+)\Z")


def step_problem(step: Any) -> str | None:
    """Why ``step`` can name no step of any TrainJob, or ``None``."""
    if isinstance(step, str) and STEP_NAME.match(step):
        return None
    return fix(
        f"{shown(step)} is not a step of a TrainJob.",
        "use dataset-initializer, model-initializer or node-<index> (node-0 is the first "
        "training node, or the MPI launcher); TrainerClient.get_job(name).steps lists a "
        "job's steps.",
    )


def check_step(step: Any, field: str = "step") -> None:
    """:func:`step_problem` as a :class:`SpecError` naming ``field``."""
    problem = step_problem(step)
    if problem:
        raise SpecError(field_problem(field, problem), title="Invalid arguments")
