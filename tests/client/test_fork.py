"""A sync client made before a fork works in the child (Airflow's LocalExecutor forks
its workers; a DAG file or an executor's parent may have made the client): the child
gets a portal and a connection of its own instead of waiting on the parent's portal
thread, which does not exist there."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")


def test_a_client_made_before_a_fork_works_in_the_child(k8s_config: KubernetesConfig) -> None:
    with TrainerClient(k8s_config) as client:
        expected = len(client.list_runtimes())  # the parent's portal and connection in use
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 3
            try:
                signal.alarm(30)  # a call that waits on the parent's portal never ends
                code = 0 if len(client.list_runtimes()) == expected else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child's call did not end (status {status})"
    assert os.WEXITSTATUS(status) == 0
