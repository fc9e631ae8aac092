"""The API-only tier of :mod:`kf_trainer_core.testing.control_plane`: etcd and
kube-apiserver from ``$KUBEBUILDER_ASSETS`` (the envtest convention), with the upstream
Trainer, JobSet and Kueue CRDs and the default runtimes applied. No controllers run."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import yaml

from kf_trainer_core.testing.control_plane.running import (
    ControlPlane,
    ControlPlaneUnavailable,
    port_free,
    stop_process,
    wait_until,
)

__all__ = ["start_api_tier"]


def _pki(pki: Path) -> None:
    """The CA, the apiserver's serving certificate, the admin's client certificate (group
    ``system:masters``) and the service-account signing key, as kube-apiserver reads them."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from kf_trainer_core.testing.certs import issue, key_pair

    pki.mkdir(parents=True, exist_ok=True)
    ca = issue("kf-envtest-ca", days=30)
    leaves = {
        "apiserver": issue(
            "kube-apiserver",
            hosts=("127.0.0.1", "10.96.0.1", "localhost", "kubernetes.default.svc"),
            signer=ca,
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            days=30,
        ),
        "admin": issue(
            "kf-admin",
            organization="system:masters",
            signer=ca,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            days=30,
        ),
    }
    private, public = key_pair()
    files = {"ca.crt": ca.cert, "sa.key": private, "sa.pub": public}
    for name, issued in leaves.items():
        files.update({f"{name}.crt": issued.cert, f"{name}.key": issued.key})
    for name, data in files.items():
        (pki / name).write_bytes(data)
        if name.endswith(".key"):
            (pki / name).chmod(0o600)


def _kubeconfig(directory: Path, base: int) -> Path:
    pki = directory / "pki"

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kf-envtest",
                "cluster": {
                    "server": f"https://127.0.0.1:{base}",
                    "certificate-authority-data": b64("ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": "kf-admin",
                "user": {
                    "client-certificate-data": b64("admin.crt"),
                    "client-key-data": b64("admin.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "kf-envtest",
                "context": {"cluster": "kf-envtest", "user": "kf-admin", "namespace": "default"},
            }
        ],
        "current-context": "kf-envtest",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def _manifests(directory: Path, source: Path | None) -> tuple[list[Path], Path]:
    """The CRD files and one file of runtimes + namespace ``team-a`` to apply."""
    from kf_trainer_core.testing.crd.upstream import find_upstream
    from kf_trainer_core.testing.runtimes import load_upstream_runtimes

    upstream = (source / ".." / "upstream").resolve() if source is not None else None
    if upstream is None or not upstream.is_dir():
        upstream = find_upstream()
    if upstream is None:
        raise ControlPlaneUnavailable(
            "the API-only tier needs the upstream CRDs: set KF_TRAINER_UPSTREAM to the "
            "shared/upstream folder"
        )
    crds = [
        *sorted((upstream / "kubeflow-trainer" / "crds").glob("trainer.kubeflow.org_*.yaml")),
        upstream / "jobset" / "jobset.x-k8s.io_jobsets.yaml",
        *sorted((upstream / "kueue" / "crds").glob("kueue.x-k8s.io_*.yaml")),
    ]
    objects = directory / "objects.yaml"
    rendered = source / "manifests" / "runtimes-rendered.yaml" if source is not None else None
    docs: list[object] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}]
    if rendered is not None and rendered.is_file():
        docs.extend(d for d in yaml.safe_load_all(rendered.read_text()) if d)
    else:
        docs.extend(load_upstream_runtimes(upstream))
    objects.write_text(yaml.safe_dump_all(docs))
    return crds, objects


def start_api_tier(
    directory: Path, assets: Path, bases: list[int], *, source: Path | None
) -> ControlPlane:
    """Start etcd + kube-apiserver from ``assets`` under ``directory``; apply the CRDs."""
    base = next((b for b in bases if all(port_free(b + i) for i in range(3))), None)
    if base is None:
        raise RuntimeError(f"ports busy at every candidate base {bases}")
    for sub in ("logs", "data"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    pki = directory / "pki"
    _pki(pki)
    kubeconfig = _kubeconfig(directory, base)
    cp = ControlPlane(directory, base, "api", kubeconfig, source)

    def spawn(name: str, *args: str) -> None:
        log = (directory / "logs" / f"{name}.log").open("ab")
        cp._procs.append(
            subprocess.Popen(
                [str(assets / name), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stopped as a group, never by name
            )
        )

    # Upstream etcd insists on --advertise-client-urls beside --listen-client-urls; the
    # control-plane folder's embedded etcd does not know the flag.
    help_text = subprocess.run(
        [str(assets / "etcd"), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    advertise = (
        ["--advertise-client-urls", cp.etcd_url]
        if "advertise-client-urls" in help_text.stdout + help_text.stderr
        else []
    )
    try:
        spawn(
            "etcd",
            "--name",
            "kf-envtest",
            "--data-dir",
            str(directory / "data" / "etcd"),
            "--listen-client-urls",
            cp.etcd_url,
            *advertise,
            "--listen-peer-urls",
            f"http://127.0.0.1:{base + 2}",
            "--unsafe-no-fsync=true",
            "--log-level",
            "warn",
        )
        wait_until(lambda: cp.etcd_revision() >= 0, 60, "etcd", directory / "logs" / "etcd.log")
        spawn(
            "kube-apiserver",
            f"--etcd-servers={cp.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={base}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        )
        wait_until(cp.ready, 180, "kube-apiserver", directory / "logs" / "kube-apiserver.log")
        crds, objects = _manifests(directory, source)
        files = [a for f in crds for a in ("-f", str(f))]
        cp.kubectl("apply", "--server-side", "--force-conflicts", *files)
        cp.kubectl("wait", "--for", "condition=established", "--timeout=120s", *files)
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(objects))
    except BaseException:
        for proc in reversed(cp._procs):
            stop_process(proc)
        raise
    return cp
