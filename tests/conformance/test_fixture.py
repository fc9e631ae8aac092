"""The real-control-plane fixture itself: its namespaces, kubeconfigs and etcd access."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kf_trainer_core.testing import control_plane as cp_module
from kf_trainer_core.testing.control_plane import (
    ControlPlane,
    ControlPlaneUnavailable,
    find_control_plane,
    start_control_plane,
)


def test_namespace_and_kubeconfig(
    control_plane: ControlPlane, control_plane_namespace: str, control_plane_kubeconfig: Path
) -> None:
    out = control_plane.kubectl("get", "namespace", control_plane_namespace, "-o", "name")
    assert out.stdout.strip() == f"namespace/{control_plane_namespace}"
    cfg = yaml.safe_load(control_plane_kubeconfig.read_text())
    assert {c["context"]["namespace"] for c in cfg["contexts"]} == {control_plane_namespace}
    assert control_plane_kubeconfig.stat().st_mode & 0o077 == 0
    assert control_plane.new_namespace() != control_plane_namespace


def test_compaction_advances(control_plane: ControlPlane) -> None:
    before = control_plane.etcd_revision()
    control_plane.new_namespace("compact")
    assert control_plane.compact() > before


def test_marker_added(request: pytest.FixtureRequest, control_plane: ControlPlane) -> None:
    assert request.node.get_closest_marker("control_plane") is not None


def test_missing_folder_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("KF_CONTROL_PLANE_ATTACH", raising=False)
    monkeypatch.setenv("KF_CONTROL_PLANE", str(tmp_path / "absent"))
    assert find_control_plane() is None
    with pytest.raises(
        ControlPlaneUnavailable, match=r"KF_CONTROL_PLANE=.*absent has no start\.sh"
    ):
        start_control_plane(tmp_path / "d")


def test_missing_tool_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("KF_CONTROL_PLANE_ATTACH", raising=False)
    (tmp_path / "start.sh").write_text("#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("KF_CONTROL_PLANE", str(tmp_path))
    monkeypatch.setattr(cp_module, "TOOLS_FULL", ("kubectl", "no-such-tool-here"))
    with pytest.raises(ControlPlaneUnavailable, match="no-such-tool-here not on PATH"):
        start_control_plane(tmp_path / "d")


def test_kueue_runs_in_an_instance_of_its_own(
    control_plane: ControlPlane, kueue_control_plane: ControlPlane
) -> None:
    kueue_control_plane.require_kueue()
    assert not control_plane.kueue
    assert kueue_control_plane.kueue
    apart = abs(kueue_control_plane.port_base - control_plane.port_base)
    assert apart >= 14  # start.sh --kueue uses base..base+13
    served = kueue_control_plane.kubectl(
        "get", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", "-o", "name"
    )
    assert (
        served.stdout.strip()
        == "apiservice.apiregistration.k8s.io/v1beta2.visibility.kueue.x-k8s.io"
    )
    plain = control_plane.kubectl(
        "get", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", check=False
    )
    assert plain.returncode != 0  # no Kueue: nothing touches the plain one's TrainJobs


def test_a_folder_without_kueue_is_unavailable_for_kueue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("KF_CONTROL_PLANE_ATTACH", raising=False)
    (tmp_path / "start.sh").write_text("#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("KF_CONTROL_PLANE", str(tmp_path))
    with pytest.raises(ControlPlaneUnavailable, match=r"has no Kueue \(bin/kueue\.zst\)"):
        start_control_plane(tmp_path / "d", kueue=True)
    monkeypatch.setenv("KF_CONTROL_PLANE_KUEUE", "0")
    with pytest.raises(ControlPlaneUnavailable, match="KF_CONTROL_PLANE_KUEUE=0"):
        start_control_plane(tmp_path / "d", kueue=True)
