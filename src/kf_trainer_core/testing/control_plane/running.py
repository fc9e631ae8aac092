"""A running control plane (:class:`ControlPlane`) and the process and port helpers both
tiers' launchers use: the part of :mod:`kf_trainer_core.testing.control_plane` that the
launchers of the full tier (``__init__``) and the API-only tier (:mod:`.envtest`) share."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
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
    "ASSETS_ENV",
    "ControlPlane",
    "ControlPlaneUnavailable",
    "Tier",
    "port_free",
    "stop_process",
    "wait_until",
]

#: The envtest convention: a folder with ``kube-apiserver`` and ``etcd`` binaries.
ASSETS_ENV: Final = "KUBEBUILDER_ASSETS"

Tier = Literal["full", "api"]


class ControlPlaneUnavailable(RuntimeError):
    """No control plane can run here; the message says what is missing (tests skip)."""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class ControlPlane:
    """A running control plane: where its files are and how to reach it."""

    dir: Path
    port_base: int
    tier: Tier
    kubeconfig: Path
    source: Path | None = None
    #: The real Kueue controller runs (``start.sh --kueue``).
    kueue: bool = False
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

    def require_kueue(self) -> None:
        """Skip the calling test where no Kueue controller runs."""
        self.require_controllers()
        if not self.kueue:
            import pytest

            pytest.skip("needs the real Kueue (start.sh --kueue; KF_CONTROL_PLANE_KUEUE=0 here)")

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

    def kubeconfig_for(self, namespace: str, path: Path, *, token: str | None = None) -> Path:
        """Write a copy of the admin kubeconfig whose context namespace is ``namespace``
        (authenticated by ``token`` instead of the admin's certificate when given)."""
        import yaml

        cfg = yaml.safe_load(self.kubeconfig.read_text())
        for ctx in cfg.get("contexts", []):
            ctx["context"]["namespace"] = namespace
        if token is not None:
            for user in cfg.get("users", []):
                user["user"] = {"token": token}
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    def user_kubeconfig(
        self,
        namespace: str,
        rules: list[dict[str, Any]],
        path: Path,
        *,
        cluster_rules: list[dict[str, Any]] | None = None,
        name: str = "kf-user",
    ) -> Path:
        """Write a kubeconfig for a least-privilege user: a ServiceAccount ``name`` in
        ``namespace`` bound to a Role of ``rules`` there (and to a ClusterRole of
        ``cluster_rules``), authenticated by a token the API server issued for it (an
        hour). Requests the rules do not allow are refused by the real RBAC."""
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        self._request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
        self._request(
            "POST",
            f"{rbac}/namespaces/{namespace}/roles",
            {"kind": "Role", "metadata": {"name": name}, "rules": rules},
        )
        role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        self._request(
            "POST",
            f"{rbac}/namespaces/{namespace}/rolebindings",
            {"kind": "RoleBinding", "metadata": {"name": name}, "subjects": subject,
             "roleRef": role_ref},
        )  # fmt: skip
        if cluster_rules:
            cluster_name = f"{namespace}-{name}"
            self._request(
                "POST",
                f"{rbac}/clusterroles",
                {"kind": "ClusterRole", "metadata": {"name": cluster_name}, "rules": cluster_rules},
            )
            self._request(
                "POST",
                f"{rbac}/clusterrolebindings",
                {"kind": "ClusterRoleBinding", "metadata": {"name": cluster_name},
                 "subjects": subject,
                 "roleRef": {**role_ref, "kind": "ClusterRole", "name": cluster_name}},
            )  # fmt: skip
        issued = self._request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        return self.kubeconfig_for(namespace, path, token=issued["status"]["token"])

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

    def _request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
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
            stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
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
