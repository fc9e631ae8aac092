"""The client's API errors carry the fix the CLI prints (issue 35, item 5): a 401 from
``TrainerClient`` said a bare ``ApiError: 401 Unauthorized: Unauthorized`` where the
command said ``Fix: check the credentials of --kubeconfig/--context``. The knowledge
lives in ``ApiError`` once; each names the settings its user chose (the client's
configuration, the command's flags), and a message has one ``Fix:``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kf_trainer_core.cli import main
from kf_trainer_core.cli._errors import classify
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.errors import CLIENT_SETTINGS, ApiError
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.testing.server import KubeTestServer

ONCE = RetryPolicy(attempts=1)


@pytest.mark.parametrize(
    ("error", "fixed"),
    [
        (ApiError(401, "Unauthorized", "Unauthorized"), "check the credentials of"),
        (ApiError(403, "Forbidden", 'cannot list resource "trainjobs"'), "may do this"),
        (ApiError(0, "MaxRetryError", "Connection refused"), "is reachable"),
    ],
)
def test_the_errors_whose_fix_is_known_carry_it(error: ApiError, fixed: str) -> None:
    text = str(error)
    assert text.count(" Fix: ") == 1, text
    assert fixed in text.split(" Fix: ")[1]
    assert CLIENT_SETTINGS in text
    # The command names its flags instead, from the same knowledge, once.
    _, message = classify(error)
    assert message.count(" Fix: ") == 1, message
    assert "--kubeconfig/--context" in message
    assert CLIENT_SETTINGS not in message


def test_an_unreachable_server_is_said_so() -> None:
    error = ApiError(0, "MaxRetryError", "Connection refused")
    assert str(error).startswith("cannot reach the API server: MaxRetryError: Connection refused.")
    assert error.detail == "cannot reach the API server: MaxRetryError: Connection refused"


@pytest.mark.parametrize(
    "error",
    [ApiError(404, "NotFound", "x not found"), ApiError(0, "BadWatchLine", "junk"), ApiError(500)],
)
def test_errors_whose_fix_depends_on_the_request_carry_none(error: ApiError) -> None:
    assert " Fix: " not in str(error)
    assert error.fix() is None


def test_a_refused_token_says_the_fix_from_the_client_and_the_command(
    kube: KubeTestServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.require_token({"the-right-token"})
    kubeconfig = kube.kubeconfig(tmp_path / "kc", token="a-wrong-token")
    with (
        TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig)), retry=ONCE) as client,
        pytest.raises(ApiError) as caught,
    ):
        client.list_jobs()
    text = str(caught.value)
    assert text.startswith("401 Unauthorized")
    assert f"Fix: check the credentials of {CLIENT_SETTINGS}" in text
    assert "a-wrong-token" not in text
    capsys.readouterr()
    assert main(["--kubeconfig", str(kubeconfig), "jobs", "list"]) == 6
    err = capsys.readouterr().err
    assert "Fix: check the credentials of --kubeconfig/--context" in err
    assert err.count("Fix:") == 1, err


def test_a_server_that_does_not_answer_says_the_fix(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = KubernetesConfig(host=f"http://127.0.0.1:{port}", token="t", request_timeout=5)
    with TrainerClient(config, retry=ONCE) as client, pytest.raises(ApiError) as caught:
        client.list_jobs()
    text = str(caught.value)
    assert caught.value.unreachable
    assert text.startswith("cannot reach the API server: ")
    assert "is reachable" in text
    assert text.count(" Fix: ") == 1


def test_a_log_the_node_cannot_serve_says_so_with_a_fix() -> None:
    """A node whose kubelet the API server cannot reach (gone, firewalled; kwok's fake
    nodes) answered a log read with the raw 500 and no fix; it is the node, not the
    backend, that cannot be reached."""
    error = ApiError(
        500,
        "Internal Server Error",
        'Get "https://10.0.0.7:10250/containerLogs/team-a/job-node-0-0-x/node": dial tcp '
        "10.0.0.7:10250: connect: connection refused",
    )
    assert error.kubelet_unreachable
    text = str(error)
    assert text.count(" Fix: ") == 1, text
    assert "could not reach the kubelet of the pod's node" in text.split(" Fix: ")[1]
    _, message = classify(error)
    assert message.count(" Fix: ") == 1, message
    other = ApiError(500, "Internal Server Error", "etcdserver: request timed out")
    assert not other.kubelet_unreachable
    assert " Fix: " not in str(other)
