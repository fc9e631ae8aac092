"""``kf-trainer jobs delete A B C``: a job that cannot be deleted (another controller
keeps writing it; the credentials may not delete) is reported, and the other jobs are
deleted all the same; and no error of the core reaches a user as an "unexpected error,
please report it" (exit 10)."""

from __future__ import annotations

import inspect

import pytest
from cli_support import run_main, spec

from kf_trainer_core import errors
from kf_trainer_core.cli import Exit
from kf_trainer_core.cli._errors import classify
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.programs.cancel import ROUNDS
from kf_trainer_core.testing.server import KubeTestServer


def test_a_job_that_keeps_changing_is_reported_and_the_others_are_deleted(
    kube: KubeTestServer,
    client: TrainerClient,
    where: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second = (client.submit(spec(), name=n).job.name for n in ("first", "second"))
    # Each of the first job's rounds meets a 409 (the job changed since it was read):
    # the API server's answer when another controller writes it between read and delete.
    kube.faults.fail_next(ROUNDS, code=409, retry_after=None, verb="delete", resource="trainjobs")
    got = run_main(capsys, "jobs", "delete", first, second, "missing-one", *where)
    assert got.code == Exit.CONFLICT, got.err
    assert got.out == f"default/{second}: deleted\n"
    lines = got.err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"kf-trainer: error: TrainJob default/{first} was not deleted")
    assert "Fix: try again" in lines[0]
    assert lines[1] == "kf-trainer: error: not found in namespace default: missing-one"
    assert [j.name for j in client.list_jobs()] == [first]

    # The exit code is that of the first job named that was not deleted.
    kube.faults.fail_next(ROUNDS, code=409, retry_after=None, verb="delete", resource="trainjobs")
    got = run_main(capsys, "jobs", "delete", "missing-one", first, *where)
    assert got.code == Exit.NOT_FOUND, got.err
    assert got.err.splitlines()[-1].endswith("not found in namespace default: missing-one")


def _unset(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` without its constructor's arguments (only its class and a
    message count for the exit code)."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, "what happened. Fix: the fix.")
    for attribute in ("lines", "namespace", "name"):
        if not hasattr(exc, attribute):
            setattr(exc, attribute, None)
    return exc


PUBLIC_ERRORS = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.KFTrainerError)
    # Built from what the API server or the kubeconfig said: their own tests.
    and not issubclass(cls, (ApiError, errors.ClusterConfigError))
]


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_no_error_of_the_core_is_unexpected(cls: type[BaseException]) -> None:
    code, message = classify(_unset(cls))
    assert code is not Exit.INTERNAL
    assert "Fix: the fix." in message
