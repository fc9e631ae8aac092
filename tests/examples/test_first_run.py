"""First runs on a small machine: the Prefect example sets what Prefect's temporary
server needs (start-up timeout, no telemetry) before Prefect reads its settings, and
leaves a user's own settings alone."""

from __future__ import annotations

import os
import subprocess
import sys

from examples_support import EXAMPLES

PROBE = (
    "import sys; sys.path.insert(0, {here!r}); import prefect_retraining; "
    "from prefect.settings import get_current_settings as s; c = s(); "
    "print(c.server.ephemeral.startup_timeout_seconds, c.server.analytics_enabled)"
)


def probe(**env: str) -> str:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "DO_NOT_TRACK"
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(here=str(EXAMPLES))],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_prefect_example_sets_the_local_server_settings_before_prefect_reads_them() -> None:
    assert probe() == "120 False"
    assert probe(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300") == "300 False"
