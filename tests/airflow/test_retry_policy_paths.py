"""``exception_retry_policy`` names its exception classes by dotted path (Airflow
imports them when a task fails): every path must resolve, or its rule never matches and
Airflow only logs a warning."""

from __future__ import annotations

from kf_trainer_airflow.failures import exception_retry_policy
from kf_trainer_core.errors import ConfigurationFailure, InfrastructureFailure, UserCodeFailure


def test_every_rule_matches_its_failure_class() -> None:
    policy = exception_retry_policy()
    retry, fail = policy.rules
    assert retry.matches(InfrastructureFailure("node lost"))
    assert not retry.matches(ConfigurationFailure("bad image"))
    assert fail.matches(ConfigurationFailure("bad image"))
    assert fail.matches(UserCodeFailure("traceback"))
    assert not fail.matches(InfrastructureFailure("node lost"))
