"""A real Kubernetes control plane for tests: one per session, beside the test bed.

Two tiers, chosen by what the machine has:

``full``
    ``start.sh --controllers`` of the shared ``control-plane`` folder (``$KF_CONTROL_PLANE``,
    else ``shared/control-plane`` found above this package or the working directory):
    kube-apiserver + etcd, kube-controller-manager (garbage collector, Job and namespace
    controllers), kube-scheduler, kwok fake GPU nodes, the JobSet and Trainer controllers.
    A TrainJob runs to ``Complete`` there.
``api``
    The envtest convention: when ``$KUBEBUILDER_ASSETS`` names a folder holding
    ``kube-apiserver`` and ``etcd``, those two run alone (no controllers) with the
    upstream CRDs and runtimes applied. Objects are stored, validated, listed and watched
    by the real server, but nothing reconciles them: tests that need a controller skip
    (:meth:`ControlPlane.require_controllers`).

Everything a run writes lives under one temporary directory; :meth:`ControlPlane.stop`
stops exactly the processes it started. Needs ``kubectl``, ``openssl`` (and for the full
tier ``zstd`` and ``curl``) on ``PATH``: :func:`missing_tools` names what is absent.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

__all__ = [
    "CONTROL_PLANE_ENV",
    "PORT_BASE_ENV",
    "ControlPlane",
    "ControlPlaneUnavailable",
    "find_control_plane",
    "missing_tools",
    "start_control_plane",
]

#: Names the control-plane folder (the one holding ``start.sh``).
CONTROL_PLANE_ENV: Final = "KF_CONTROL_PLANE"
#: Fixes the port base (ports base..base+9 on 127.0.0.1); otherwise a free one is found.
PORT_BASE_ENV: Final = "KF_CONTROL_PLANE_PORT_BASE"
#: Use a control plane already started by ``start.sh --dir DIR``; it is left running.
ATTACH_ENV: Final = "KF_CONTROL_PLANE_ATTACH"
#: The envtest convention: a folder with ``kube-apiserver`` and ``etcd`` binaries.
ASSETS_ENV: Final = "KUBEBUILDER_ASSETS"

#: Tools each tier runs (start.sh checks the same for the full tier).
TOOLS_FULL: Final = ("kubectl", "zstd", "openssl", "curl")
TOOLS_API: Final = ("kubectl", "openssl")

Tier = Literal["full", "api"]

# Where a free port base is looked for when none is given (10 ports each).
_SEARCH_FIRST = 21000
_SEARCH_LAST = 29990
_START_TIMEOUT = 600.0


class ControlPlaneUnavailable(RuntimeError):
    """No control plane can run here; the message says what is missing (tests skip)."""


def find_control_plane(start: Path | None = None) -> Path | None:
    """The control-plane folder: ``$KF_CONTROL_PLANE`` when set (``None`` when it names
    no folder with ``start.sh``), else ``shared/control-plane`` in an ancestor of this
    package or of the working directory."""
    env = os.environ.get(CONTROL_PLANE_ENV)
    if env:
        path = Path(env).expanduser()
        return path if (path / "start.sh").is_file() else None
    bases = [start] if start is not None else [Path(__file__), Path.cwd()]
    for base in bases:
        for folder in (base.resolve(), *base.resolve().parents):
            candidate = folder / "shared" / "control-plane"
            if (candidate / "start.sh").is_file():
                return candidate
    return None


def envtest_assets() -> Path | None:
    """``$KUBEBUILDER_ASSETS`` when it names a folder with ``kube-apiserver`` and ``etcd``."""
    env = os.environ.get(ASSETS_ENV)
    if not env:
        return None
    path = Path(env).expanduser()
    if all(os.access(path / b, os.X_OK) for b in ("kube-apiserver", "etcd")):
        return path
    return None


def missing_tools(tier: Tier = "full") -> list[str]:
    """The command-line tools the tier needs that are not on ``PATH``."""
    return [t for t in (TOOLS_FULL if tier == "full" else TOOLS_API) if shutil.which(t) is None]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_bases(worker: int) -> list[int]:
    """Candidate port bases, all ten ports free now; spread by process and worker so
    that sessions started together rarely try the same base first."""
    span = (_SEARCH_LAST - _SEARCH_FIRST) // 10
    first = (os.getpid() * 7 + worker * 13) % span
    order = [_SEARCH_FIRST + 10 * ((first + i) % span) for i in range(span)]
    return [b for b in order if all(_port_free(b + i) for i in range(10))][:5]


@dataclass
class ControlPlane:
    """A running control plane: where its files are and how to reach it."""

    dir: Path
    port_base: int
    tier: Tier
    kubeconfig: Path
    source: Path | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    _stopped: bool = field(default=False, repr=False)

    # ---- addresses -------------------------------------------------------------
    @property
    def controllers(self) -> bool:
        """Whether controllers reconcile objects (the full tier)."""
        return self.tier == "full"

    @property
    def server(self) -> str:
        """The kube-apiserver URL."""
        return f"https://127.0.0.1:{self.port_base}"

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (plain HTTP, port base + 1)."""
        return f"http://127.0.0.1:{self.port_base + 1}"

    def require_controllers(self) -> None:
        """Skip the calling test on the API-only tier."""
        if not self.controllers:
            import pytest

            pytest.skip(f"needs controllers; the {ASSETS_ENV} tier runs kube-apiserver + etcd only")

    # ---- namespaces ------------------------------------------------------------
    def new_namespace(self, prefix: str = "t") -> str:
        """Create a fresh namespace (with its ``default`` ServiceAccount on the full
        tier, where the ServiceAccount controller makes it) and return its name."""
        name = f"{prefix}-{next(self._counter)}-{uuid.uuid4().hex[:6]}"[:63]
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self._request("POST", "/api/v1/namespaces", body)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace in the background (its objects are collected by the
        namespace controller on the full tier); a missing one is fine."""
        with contextlib.suppress(urllib.error.HTTPError, OSError):
            self._request("DELETE", f"/api/v1/namespaces/{name}")

    def kubeconfig_for(self, namespace: str, path: Path) -> Path:
        """Write a copy of the admin kubeconfig whose context namespace is ``namespace``."""
        import yaml

        cfg = yaml.safe_load(self.kubeconfig.read_text())
        for ctx in cfg.get("contexts", []):
            ctx["context"]["namespace"] = namespace
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    # ---- raw access ------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane."""
        cmd = ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def _ssl(self) -> ssl.SSLContext:
        pki = self.dir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self._ssl(), timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def ready(self) -> bool:
        """Whether kube-apiserver answers ``/readyz`` with ``ok``."""
        req = urllib.request.Request(self.server + "/readyz")
        with urllib.request.urlopen(req, context=self._ssl(), timeout=10) as resp:
            return bool(resp.read().strip() == b"ok")

    def etcd_revision(self) -> int:
        """etcd's current revision (through its v3 HTTP gateway)."""
        out = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"\0").decode(), "limit": 1})
        return int(out["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        """Compact etcd up to ``revision`` (default: the current one), physically, so
        that a watch or list from an older resourceVersion gets 410 Gone. Returns the
        revision compacted to."""
        rev = self.etcd_revision() if revision is None else revision
        self._etcd("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def restart_apiserver(self, *, compact: bool = True, timeout: float = 180) -> None:
        """Kill kube-apiserver (SIGKILL: a crash, every open connection reset), compact
        etcd while it is down (``compact``), start it again with the same command line
        and wait until it is ready. Watches then resume from versions its fresh watch
        cache (and etcd) no longer hold: the server answers 410 ``too old resource
        version``, as after a real control-plane upgrade or crash. Only for a control
        plane ``start.sh`` runs (its pid file and log are reused)."""
        pidfile = self.dir / "run" / "kube-apiserver.pid"
        try:
            pid = int(pidfile.read_text())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except (OSError, ValueError):
            raise ControlPlaneUnavailable("kube-apiserver's pid file is missing here") from None
        # A write first, so that the compaction passes every version handed out so far.
        self.new_namespace("restart")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, "kube-apiserver's exit")
        if compact:
            self.compact()
        log = self.dir / "logs" / "kube-apiserver.log"
        with log.open("ab") as out:
            # The same launch as start.sh: its own session, the pid file written by the
            # shell that execs the server (stop.sh reads it).
            proc = subprocess.Popen(
                ["bash", "-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *map(os.fsdecode, argv)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)  # reaped by stop()
        wait_until(self.ready, timeout, "kube-apiserver after its restart", log)

    def _etcd(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    # ---- lifecycle -------------------------------------------------------------
    def stop(self) -> None:
        """Stop what this run started (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.tier == "full" and self.source is not None:
            subprocess.run(
                [str(self.source / "stop.sh"), "--dir", str(self.dir)],
                capture_output=True,
                timeout=120,
                check=False,
            )
            for proc in self._procs:  # a restarted apiserver, stopped by stop.sh
                proc.poll()
            return
        for proc in reversed(self._procs):
            _stop_process(proc)


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def start_control_plane(directory: Path, *, worker: int = 0) -> ControlPlane:
    """Start a control plane under ``directory``: the full tier when the control-plane
    folder is found, else the API-only tier when ``$KUBEBUILDER_ASSETS`` is usable.
    ``$KUBEBUILDER_ASSETS`` wins when both are present, as envtest users expect.

    Raises :class:`ControlPlaneUnavailable` when neither can run here (a missing folder
    or tool) and :class:`RuntimeError` when a start fails.
    """
    attach = os.environ.get(ATTACH_ENV)
    if attach:
        return attach_control_plane(Path(attach))
    assets = envtest_assets()
    if assets is not None:
        missing = missing_tools("api")
        if missing:
            raise ControlPlaneUnavailable(
                f"{', '.join(missing)} not on PATH (needed with {ASSETS_ENV})"
            )
        from kf_trainer_core.testing._envtest import start_api_tier

        return start_api_tier(directory, assets, _bases(worker), source=find_control_plane())
    source = find_control_plane()
    if source is None:
        env = os.environ.get(CONTROL_PLANE_ENV)
        where = (
            f"${CONTROL_PLANE_ENV}={env} has no start.sh"
            if env
            else (f"no shared/control-plane folder found and ${CONTROL_PLANE_ENV} is not set")
        )
        raise ControlPlaneUnavailable(f"real control plane unavailable: {where}")
    missing = missing_tools("full")
    if missing:
        raise ControlPlaneUnavailable(
            f"real control plane unavailable: {', '.join(missing)} not on PATH"
        )
    errors: list[str] = []
    for base in _bases(worker):
        cmd = [str(source / "start.sh"), "--dir", str(directory), "--port-base", str(base)]
        proc = subprocess.run(
            [*cmd, "--controllers"],
            capture_output=True,
            text=True,
            timeout=_START_TIMEOUT,
            check=False,
        )
        if proc.returncode == 0:
            return ControlPlane(directory, base, "full", directory / "kubeconfig", source)
        out = proc.stdout + proc.stderr
        errors.append(f"port base {base}: {out[-3000:]}")
        if "already in use" not in out:
            break  # not a port race: trying another base would fail the same way
    raise RuntimeError("control plane did not start:\n" + "\n".join(errors))


def attach_control_plane(directory: Path) -> ControlPlane:
    """The control plane ``start.sh`` runs in ``directory`` (never stopped by us; its
    tier is ``full`` when its Trainer controller runs)."""
    directory = directory.expanduser().resolve()
    try:
        base = int((directory / "port-base").read_text())
    except (OSError, ValueError):
        raise ControlPlaneUnavailable(f"${ATTACH_ENV}={directory}: no start.sh run there") from None
    tier: Tier = (
        "full" if (directory / "run" / "trainer-controller-manager.pid").is_file() else "api"
    )
    cp = ControlPlane(directory, base, tier, directory / "kubeconfig", None)
    cp._stopped = True  # someone else's: stop() leaves it running
    if not cp.ready():
        raise ControlPlaneUnavailable(f"${ATTACH_ENV}={directory}: kube-apiserver not ready")
    return cp


def _bases(worker: int) -> list[int]:
    env = os.environ.get(PORT_BASE_ENV)
    if env:
        try:
            return [int(env) + 10 * worker]
        except ValueError:
            raise ControlPlaneUnavailable(
                f"${PORT_BASE_ENV} must be a number, got {env!r}"
            ) from None
    return _free_bases(worker) or [_SEARCH_FIRST]


def wait_until(check: Any, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``check()`` until it is true; raise naming ``what`` (and the tail of its
    ``log``) after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > end:
            tail = ""
            if log is not None and log.is_file():
                tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{what} not ready after {timeout:.0f} s{tail}")
        time.sleep(0.25)
