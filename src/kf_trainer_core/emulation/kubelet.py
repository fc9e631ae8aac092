"""What a kubelet does to a container whatever runs it: the environment it resolves
(``envFrom``, ``env``, ``$(VAR)`` expansion, Secret and ConfigMap keys, field
references), how it reads a container's end (the exit code of a signal, the
termination-message file), and a container run as processes of this machine.

One set of rules for the test bed's kubelet (scripted runs, ``executor="exec"``) and
the local backend's (processes, containers), so that a pod's environment, its output
and its terminated state read the same wherever it ran. Standard library only, like the rest
of :mod:`kf_trainer_core.emulation`: the local backend's supervisor imports it.
"""

from __future__ import annotations

import base64
import re
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

#: The object kinds a container's environment reads from.
SECRET = "Secret"
CONFIG_MAP = "ConfigMap"
#: The kubelet's cap on a termination message (bytes).
TERMINATION_MESSAGE_LIMIT = 4096
#: The exit code of a container whose command could not start (reason ``StartError``).
START_ERROR_EXIT = 128

#: Reads an object of one kind by name in the pod's namespace (``None``: not there).
Lookup = Callable[[str], "JSON | None"]

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL_REF = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, ``$$`` escapes,
    unknown references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(sub, text)


def object_data(kind: str, obj: JSON) -> dict[str, str]:
    """A Secret's values, decoded (``stringData`` over ``data``; a value that is not
    base64 is left out, as the API server would have refused it), or a ConfigMap's."""
    if kind != SECRET:
        return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
    out: dict[str, str] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value)).decode(errors="replace")
        except ValueError:
            continue
    out.update({str(k): str(v) for k, v in (obj.get("stringData") or {}).items()})
    return out


def field_value(pod: JSON, path: str) -> str | None:
    """A ``fieldRef``'s value from the pod object (``None``: a field not offered)."""
    meta = pod.get("metadata") or {}
    m = _LABEL_REF.fullmatch(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    value = simple.get(path)
    return None if value is None else str(value)


def resolve_env(
    container: JSON, namespace: str, sources: Mapping[str, Lookup], pod: JSON | None = None
) -> tuple[dict[str, str], str | None]:
    """The container's environment as the kubelet builds it, and the kubelet's error
    for the first Secret, ConfigMap or key that is missing and not ``optional`` (the
    container cannot start: ``CreateContainerConfigError``). ``sources`` reads the
    kinds this kubelet serves (a reference to another kind is left out); ``pod``, the
    pod object, answers ``fieldRef``s. What can be resolved is resolved, error or not."""
    env: dict[str, str] = {}
    error: str | None = None

    def read(kind: str, ref: JSON) -> dict[str, str] | None:
        nonlocal error
        lookup = sources.get(kind)
        if lookup is None:
            return None
        obj = lookup(str(ref.get("name")))
        if obj is None:
            if not ref.get("optional") and error is None:
                error = f'{kind.lower()} "{ref.get("name")}" not found'
            return None
        return object_data(kind, obj)

    for src in container.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        for key, kind in (("secretRef", SECRET), ("configMapRef", CONFIG_MAP)):
            ref = src.get(key)
            data = read(kind, ref) if isinstance(ref, dict) else None
            env.update({prefix + k: v for k, v in (data or {}).items()})
    for entry in container.get("env") or []:
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        name = str(entry["name"])
        if "value" in entry:
            env[name] = expand(str(entry.get("value") or ""), env)
            continue
        source = entry.get("valueFrom")
        if not isinstance(source, dict):
            continue
        if isinstance(source.get("fieldRef"), dict):
            path = str(source["fieldRef"].get("fieldPath") or "")
            value = field_value(pod, path) if pod is not None else None
            if value is not None:
                env[name] = value
            continue
        for key, kind in (("secretKeyRef", SECRET), ("configMapKeyRef", CONFIG_MAP)):
            ref = source.get(key)
            if not isinstance(ref, dict):
                continue
            data = read(kind, ref)
            if data is not None and str(ref.get("key")) in data:
                env[name] = data[str(ref.get("key"))]
            elif data is not None and not ref.get("optional") and error is None:
                error = (
                    f"couldn't find key {ref.get('key')} in {kind} {namespace}/{ref.get('name')}"
                )
        # resourceFieldRef, fileKeyRef: not emulated
    return env, error


def exit_status(returncode: int) -> tuple[int, str | None]:
    """A process's return code as a container's ``exitCode`` (a signal N reads 128+N,
    as the runtime reports it) and the signal's name (``None``: it exited)."""
    if returncode >= 0:
        return returncode, None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return 128 - returncode, name


def read_termination_log(path: Path | None) -> str | None:
    """The container's termination message (``terminationMessagePath``), capped as
    the kubelet caps it; ``None`` when it wrote none."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore") or None


# ---------------------------------------------------------------------- processes


def spawn(
    argv: list[str],
    env: Mapping[str, str],
    cwd: str | Path,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one process of a container in a session of its own (its process group is
    the container's to kill: ``killpg`` takes its whole tree), stdout and stderr as one
    stream, as a runtime gives them to the kubelet. ``OSError`` when it cannot start
    (see :func:`start_error`)."""
    return subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        preexec_fn=preexec_fn,
    )


def read_lines(proc: subprocess.Popen[bytes], line: Callable[[str], None]) -> None:
    """Hand each line of the process's output to ``line`` until it closes (run on a
    thread of its own); undecodable bytes are replaced, line ends dropped."""
    assert proc.stdout is not None
    with proc.stdout:
        for raw in iter(proc.stdout.readline, b""):
            line(raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r"))


def start_error(argv: list[str], exc: OSError) -> str:
    """The runtime's message for a command that could not start (exit
    :data:`START_ERROR_EXIT`, reason ``StartError``)."""
    return f'exec: "{argv[0] if argv else "?"}": {exc.strerror or exc}'
