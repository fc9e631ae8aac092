"""Users test their DAGs and flows with the client mocked: ``create_autospec`` and
``mock.patch(..., autospec=True)`` must see each client's methods as methods (``self``
dropped from their signatures), with the operation's own parameters checked."""

from __future__ import annotations

import inspect
from unittest import mock

import pytest

from kf_trainer_core import client as client_module
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient

OPERATIONS = ["wait", "get_job", "submit", "run", "prune_jobs", "delete_job", "list_jobs"]


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_client_has_its_methods_as_functions_of_its_own(name: str) -> None:
    assert inspect.isfunction(vars(TrainerClient)[name])
    assert inspect.iscoroutinefunction(vars(AsyncTrainerClient)[name])


def test_an_autospec_client_takes_the_operations_arguments() -> None:
    fake = mock.create_autospec(TrainerClient, instance=True)
    fake.wait("job", timeout=5)
    fake.get_job("job")
    fake.prune_jobs(older_than="7d", keep_last=3)
    fake.wait.assert_called_once_with("job", timeout=5)
    with pytest.raises(TypeError):
        fake.get_job()  # the name is required, as on the real client
    with pytest.raises(TypeError):
        fake.wait("job", no_such_option=1)


async def test_an_autospec_async_client_is_awaited() -> None:
    fake = mock.create_autospec(AsyncTrainerClient, instance=True)
    fake.get_job.return_value = "job"
    assert await fake.get_job("job") == "job"


def test_patching_the_class_with_autospec() -> None:
    with mock.patch.object(client_module, "TrainerClient", autospec=True) as cls:
        client_module.TrainerClient().get_job("job")
    cls.return_value.get_job.assert_called_once_with("job")
