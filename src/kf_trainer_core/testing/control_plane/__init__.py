"""A real Kubernetes control plane for tests: one per session, beside the test bed.

Two tiers, chosen by what the machine has:

``full``
    ``start.sh --controllers`` of the shared ``control-plane`` folder (``$KF_CONTROL_PLANE``,
    else ``shared/control-plane`` found above this package or the working directory):
    kube-apiserver + etcd, kube-controller-manager (garbage collector, Job and namespace
    controllers), kube-scheduler, kwok fake GPU nodes, the JobSet and Trainer controllers.
    A TrainJob runs to ``Complete`` there. With ``kueue=True`` also the real Kueue
    controller (``start.sh --kueue``: its webhooks and visibility API registered), in an
    instance of its own: Kueue's TrainJob webhooks act on *every* TrainJob, labelled or
    not (they append Kueue's RuntimePatch, refuse a TrainJob whose runtime is missing,
    and refuse a wrongly typed field with their own 400 before the CRD's 422), so the
    control plane without Kueue stays what a cluster without Kueue does.
``api``
    The envtest convention: when ``$KUBEBUILDER_ASSETS`` names a folder holding
    ``kube-apiserver`` and ``etcd``, those two run alone (no controllers) with the
    upstream CRDs and runtimes applied. Objects are stored, validated, listed and watched
    by the real server, but nothing reconciles them: tests that need a controller skip
    (:meth:`ControlPlane.require_controllers`).

Everything a run writes lives under one temporary directory; :meth:`ControlPlane.stop`
stops exactly the processes it started. Needs ``kubectl`` (and for the full tier
``zstd``, ``openssl`` and ``curl``) on ``PATH``: :func:`missing_tools` names what is
absent. The API-only tier makes its certificates in process (:mod:`kf_trainer_core.testing.certs`).

Layout: this module finds and starts a control plane (the full tier through ``start.sh``);
:mod:`.envtest` starts the API-only tier; :mod:`.running` is what both hand back
(:class:`ControlPlane`) and the process and port helpers they share.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

from kf_trainer_core.testing.control_plane.running import (
    ASSETS_ENV,
    ControlPlane,
    ControlPlaneUnavailable,
    Tier,
    port_free,
)
from kf_trainer_core.testing.crd.upstream import find_shared

__all__ = [
    "CONTROL_PLANE_ENV",
    "KUEUE_ENV",
    "PORT_BASE_ENV",
    "ControlPlane",
    "ControlPlaneUnavailable",
    "find_control_plane",
    "kueue_missing",
    "missing_tools",
    "start_control_plane",
]

#: Names the control-plane folder (the one holding ``start.sh``).
CONTROL_PLANE_ENV: Final = "KF_CONTROL_PLANE"
#: Fixes the port base (ports base..base+13 on 127.0.0.1); otherwise a free one is found.
PORT_BASE_ENV: Final = "KF_CONTROL_PLANE_PORT_BASE"
#: ``0``: no control plane with Kueue is started (its tests skip).
KUEUE_ENV: Final = "KF_CONTROL_PLANE_KUEUE"
#: How far above the plain instance's fixed port base (``$KF_CONTROL_PLANE_PORT_BASE``)
#: the instance with Kueue runs.
KUEUE_PORT_OFFSET: Final = 1000
#: ... and the second instance with Kueue (a MultiKueue worker).
SECOND_PORT_OFFSET: Final = 2000
#: Use a control plane already started by ``start.sh --dir DIR``; it is left running.
ATTACH_ENV: Final = "KF_CONTROL_PLANE_ATTACH"

#: Tools each tier runs (start.sh checks the same for the full tier).
TOOLS_FULL: Final = ("kubectl", "zstd", "openssl", "curl")
TOOLS_API: Final = ("kubectl",)


# Where a free port base is looked for when none is given. start.sh uses base..base+9,
# and base+10..base+13 with Kueue; bases are _STRIDE apart (the README asks 20 for two
# instances with Kueue side by side).
_SEARCH_FIRST = 21000
_SEARCH_LAST = 29980
_STRIDE = 20
_PORTS = 14
_START_TIMEOUT = 600.0


def find_control_plane(start: Path | None = None) -> Path | None:
    """The control-plane folder: ``$KF_CONTROL_PLANE`` when set (``None`` when it names
    no folder with ``start.sh``), else ``shared/control-plane`` in an ancestor of this
    package or of the working directory."""
    return find_shared(
        "control-plane", CONTROL_PLANE_ENV, lambda p: (p / "start.sh").is_file(), start
    )


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


def _free_bases(worker: int) -> list[int]:
    """Candidate port bases, all their ports free now; spread by process and worker so
    that sessions started together rarely try the same base first."""
    span = (_SEARCH_LAST - _SEARCH_FIRST) // _STRIDE
    first = (os.getpid() * 7 + worker * 13) % span
    order = [_SEARCH_FIRST + _STRIDE * ((first + i) % span) for i in range(span)]
    return [b for b in order if all(port_free(b + i) for i in range(_PORTS))][:5]


def kueue_missing(source: Path | None) -> str | None:
    """Why no control plane with Kueue can start here (``None``: it can)."""
    if os.environ.get(KUEUE_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"${KUEUE_ENV}=0"
    if envtest_assets() is not None:
        return f"${ASSETS_ENV} chose the API-only tier (no controllers, no Kueue)"
    if source is not None and not (source / "bin" / "kueue.zst").is_file():
        return f"{source} has no Kueue (bin/kueue.zst)"
    return None


def start_control_plane(
    directory: Path, *, worker: int = 0, kueue: bool = False, second: bool = False
) -> ControlPlane:
    """Start a control plane under ``directory``: the full tier when the control-plane
    folder is found, else the API-only tier when ``$KUBEBUILDER_ASSETS`` is usable.
    ``$KUBEBUILDER_ASSETS`` wins when both are present, as envtest users expect.
    ``kueue``: the full tier with the real Kueue (``start.sh --kueue``), or nothing.
    ``second``: a second instance with Kueue beside the first (a MultiKueue worker): a
    fixed port base (``$KF_CONTROL_PLANE_PORT_BASE``) puts it :data:`SECOND_PORT_OFFSET`
    above the plain instance's; an attached control plane has none.

    Raises :class:`ControlPlaneUnavailable` when neither can run here (a missing folder
    or tool) and :class:`RuntimeError` when a start fails.
    """
    attach = os.environ.get(ATTACH_ENV)
    if attach and second:
        raise ControlPlaneUnavailable(f"${ATTACH_ENV}={attach}: no second control plane to attach")
    if attach:
        cp = attach_control_plane(Path(attach))
        if kueue and not cp.kueue:
            raise ControlPlaneUnavailable(f"${ATTACH_ENV}={attach}: no Kueue runs there")
        return cp
    if kueue:
        why = kueue_missing(find_control_plane())
        if why is not None:
            raise ControlPlaneUnavailable(f"real Kueue unavailable: {why}")
    assets = envtest_assets()
    if assets is not None:
        missing = missing_tools("api")
        if missing:
            raise ControlPlaneUnavailable(
                f"{', '.join(missing)} not on PATH (needed with {ASSETS_ENV})"
            )
        # Lazily: the API-only tier's launcher (certificates, CRDs) is only needed here.
        from kf_trainer_core.testing.control_plane.envtest import start_api_tier

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
    for base in _bases(worker, kueue, second):
        cmd = [str(source / "start.sh"), "--dir", str(directory), "--port-base", str(base)]
        proc = subprocess.run(
            [*cmd, "--kueue" if kueue else "--controllers"],
            capture_output=True,
            text=True,
            timeout=_START_TIMEOUT,
            check=False,
        )
        if proc.returncode == 0:
            return ControlPlane(
                directory, base, "full", directory / "kubeconfig", source, kueue=kueue
            )
        out = proc.stdout + proc.stderr
        errors.append(f"port base {base}: {out[-3000:]}")
        if "already in use" not in out:
            break  # not a port race: trying another base would fail the same way
    raise RuntimeError("control plane did not start:\n" + "\n".join(errors))


def attach_control_plane(directory: Path) -> ControlPlane:
    """The control plane ``start.sh`` runs in ``directory`` (never stopped by us; its
    tier is ``full`` when its Trainer controller runs, with Kueue when kueue runs)."""
    directory = directory.expanduser().resolve()
    try:
        base = int((directory / "port-base").read_text())
    except (OSError, ValueError):
        raise ControlPlaneUnavailable(f"${ATTACH_ENV}={directory}: no start.sh run there") from None
    tier: Tier = (
        "full" if (directory / "run" / "trainer-controller-manager.pid").is_file() else "api"
    )
    kueue = (directory / "run" / "kueue.pid").is_file()
    cp = ControlPlane(directory, base, tier, directory / "kubeconfig", None, kueue=kueue)
    cp._stopped = True  # someone else's: stop() leaves it running
    if not cp.ready():
        raise ControlPlaneUnavailable(f"${ATTACH_ENV}={directory}: kube-apiserver not ready")
    return cp


def _bases(worker: int, kueue: bool = False, second: bool = False) -> list[int]:
    env = os.environ.get(PORT_BASE_ENV)
    if env:
        offset = SECOND_PORT_OFFSET if second else KUEUE_PORT_OFFSET if kueue else 0
        try:
            return [int(env) + _STRIDE * worker + offset]
        except ValueError:
            raise ControlPlaneUnavailable(
                f"${PORT_BASE_ENV} must be a number, got {env!r}"
            ) from None
    return _free_bases(worker) or [_SEARCH_FIRST]
