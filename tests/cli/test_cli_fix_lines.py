"""Every ``Fix:`` the CLI adds follows one full stop, whether or not the core's message
ended with one (a wait timeout printed ``... (it is Running) Fix: wait longer``)."""

from __future__ import annotations

import re

import pytest

from kf_trainer_core.cli._errors import classify
from kf_trainer_core.errors import TrainJobNotFoundError, TrainJobTimeoutError
from kf_trainer_core.k8s.errors import ApiError

ERRORS = [
    TrainJobTimeoutError("TrainJob local/slow-1 did not reach Complete within 3s (it is Running)"),
    TrainJobTimeoutError("TrainJob local/slow-1 did not reach Complete within 3s."),
    TrainJobNotFoundError("TrainJob local/nope not found"),
    TrainJobNotFoundError("TrainJob local/nope not found."),
    ApiError(404, "Not Found"),
    ApiError(403, "Forbidden"),
    ApiError(0, "connection refused"),
    FileNotFoundError(2, "No such file or directory", "spec.yaml"),
]


@pytest.mark.parametrize("exc", ERRORS, ids=lambda e: type(e).__name__)
def test_fix_follows_one_full_stop(exc: BaseException) -> None:
    _, message = classify(exc)
    assert "Fix:" in message
    assert re.search(r"[^.!?] Fix:", message) is None, message
    assert ".. Fix:" not in message, message
