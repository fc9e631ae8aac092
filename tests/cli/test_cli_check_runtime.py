"""``kf-trainer check`` looks the spec's runtime up where the backend can be reached
(issue 35, item 5: it said ``ok`` for ``torch-distibuted``, which ``run`` then refused);
where none can be reached it checks the spec alone and says so, exit 0 — a spec
linter in CI keeps working without a cluster. (The cluster cases, test bed and real
control plane: tests/conformance/test_missing_names.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from cli_support import run_script


def _spec(tmp_path: Path, runtime: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "runtime": runtime,
                "trainer": {"type": "CustomTrainerContainer", "image": "busybox"},
            }
        )
    )
    return str(path)


def _closed_port_kubeconfig(tmp_path: Path) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def test_an_unreachable_cluster_leaves_the_runtime_unchecked_and_says_so(tmp_path: Path) -> None:
    done = run_script(
        "--kubeconfig",
        _closed_port_kubeconfig(tmp_path),
        "check",
        _spec(tmp_path, "torch-distibuted"),
    )
    assert done.code == 0, done.err
    assert done.out.startswith("ok: ")
    assert "runtime not looked up (see stderr)" in done.out
    assert "the runtime was not looked up on the backend: cannot reach the API server" in done.err
    assert done.err.count("Fix:") == 1, done.err


def test_no_kubeconfig_at_all_checks_the_spec_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_script("check", _spec(tmp_path, "torch-distributed"), HOME=str(home), KUBECONFIG="")
    assert done.code == 0, done.err
    assert "runtime not looked up (see stderr)" in done.out
    assert "kubeconfig" in done.err


@pytest.mark.parametrize(("runtime", "code"), [("torch-distributed", 0), ("torch-distibuted", 3)])
def test_the_local_backend_has_the_builtin_runtimes(
    tmp_path: Path, runtime: str, code: int
) -> None:
    state = tmp_path / "state"
    done = run_script(
        "--backend", "local", "--state-dir", str(state), "check", _spec(tmp_path, runtime)
    )
    assert done.code == code, done.err
    if code == 0:
        assert "runtime found on the local backend" in done.out
    else:
        assert "did you mean 'torch-distributed'?" in done.err
    assert not state.exists()  # checking creates nothing
