"""Which finished TrainJobs ``prune`` picks (issue 27, section 1): the selection rules
on their own, over objects shaped as the API server returns them, including every
never-delete case. The same rules against the test server and the real control
plane: ``tests/client/test_prune.py``, ``tests/client/test_prune_control_plane.py``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kf_trainer_core.errors import SpecError
from kf_trainer_core.fields import retention
from kf_trainer_core.fields.retention import Retention, parse_age
from kf_trainer_core.manifest.builder import (
    ATTEMPT_ANNOTATION,
    IDENTITY_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    build_trainjob,
)
from kf_trainer_core.programs.prune import PruneRules, plan_prune
from kf_trainer_core.spec import CustomTrainerContainer, TrainerCommand, TrainJobSpec

NOW = 1_900_000_000.0  # 2030-03-17
DAY = 86400.0


def _stamp(seconds_ago: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(NOW - seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(
    name: str,
    *,
    state: str | None = "Complete",
    finished_ago: float = 10 * DAY,
    identity: str | None = None,
    attempt: int = 0,
    suite: bool = True,
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if identity is not None:
        ann[IDENTITY_ANNOTATION] = identity
        if attempt:
            ann[ATTEMPT_ANNOTATION] = str(attempt)
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": _stamp(finished_ago + 60),
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE} if suite else {},
        "annotations": ann,
    }
    if deleting:
        meta["deletionTimestamp"] = _stamp(1)
    status: dict[str, Any] = {}
    if state in ("Complete", "Failed"):
        status["conditions"] = [
            {"type": state, "status": "True", "lastTransitionTime": _stamp(finished_ago)}
        ]
    elif state == "Suspended":
        status["conditions"] = [{"type": "Suspended", "status": "True"}]
    elif state == "Running":
        status["jobsStatus"] = [{"name": "node", "ready": 1}]
    return {"metadata": meta, "status": status}


def picked(objs: list[dict[str, Any]], **rules: Any) -> list[str]:
    report, _ = plan_prune("ns", objs, PruneRules(**rules), NOW)
    return [e.name for e in report.selected]


def test_older_than_measures_from_when_the_job_finished() -> None:
    objs = [job("old", finished_ago=8 * DAY), job("young", finished_ago=6 * DAY)]
    assert picked(objs, older_than=7 * DAY) == ["old"]


def test_unfinished_jobs_are_never_picked_whatever_the_rules() -> None:
    objs = [
        job("created", state=None, identity="d/t/r"),
        job("running", state="Running", identity="d/t/r", attempt=1),
        job("suspended", state="Suspended", identity="d/t/r", attempt=2),
        job("done", identity="d/t/r", attempt=3),
    ]
    everything = {"older_than": 0.0, "keep_last": 0, "include_foreign": True}
    assert picked(objs, **everything) == ["done"]
    report, _ = plan_prune("ns", objs, PruneRules(**everything), NOW)
    assert report.unfinished == 3


def test_jobs_being_deleted_and_foreign_jobs_are_left_alone() -> None:
    objs = [
        job("going", deleting=True),
        job("theirs", suite=False),
        job("ours"),
    ]
    assert picked(objs, older_than=0.0) == ["ours"]
    assert sorted(picked(objs, older_than=0.0, include_foreign=True)) == ["ours", "theirs"]


def test_keep_last_keeps_the_newest_attempts_of_each_identity() -> None:
    objs = [
        # Attempt numbers decide, not names nor creation times.
        job("a-z", identity="dag/a/run", attempt=0, finished_ago=1 * DAY),
        job("a-y", identity="dag/a/run", attempt=1, finished_ago=3 * DAY),
        job("a-x", identity="dag/a/run", attempt=2, finished_ago=2 * DAY),
        job("b-0", identity="dag/b/run"),
        job("no-identity"),
    ]
    # Attempt 0 ("a-z") holds the identity's name while a later attempt stays.
    assert sorted(picked(objs, keep_last=2)) == []
    assert sorted(picked(objs, keep_last=1)) == ["a-y"]
    assert sorted(picked(objs, keep_last=0)) == ["a-x", "a-y", "a-z", "b-0"]
    # A job without an identity is no attempt of anything: keep_last never picks it.
    assert "no-identity" not in picked(objs, keep_last=0)


def test_an_unfinished_newest_attempt_counts_among_the_kept() -> None:
    objs = [
        job("old", identity="i", attempt=0, state="Failed"),
        job("new", identity="i", attempt=1, state="Running"),
    ]
    # The failed attempt 0 would be due, but it holds the identity's name while attempt
    # 1 runs: with it gone, a rerun would create attempt 0 beside the running attempt.
    assert picked(objs, keep_last=1) == []
    assert picked(objs, keep_last=2) == []


def test_attempt_zero_holds_the_identity_while_a_later_attempt_stays() -> None:
    """Submit creates attempt 0 first and looks further only when that name is taken:
    pruning attempt 0 and keeping attempt 1 would make a rerun train again."""
    objs = [
        job("i-0", identity="i", attempt=0, state="Failed", finished_ago=30 * DAY),
        job("i-1", identity="i", attempt=1, finished_ago=20 * DAY),
        job("i-2", identity="i", attempt=2, finished_ago=1 * DAY),
    ]
    assert picked(objs, keep_last=1) == ["i-1"]
    assert picked(objs, older_than=7 * DAY) == ["i-1"]  # i-2 stays: i-0 is held
    # Nothing of it stays: the lock goes too, last.
    assert picked(objs, older_than=0) == ["i-1", "i-2", "i-0"]
    # The limit counts what can go: the held i-0 is left out before it applies (it used
    # to take the one place, and be dropped as held: a run that never deleted anything).
    assert picked(objs, older_than=7 * DAY, limit=1) == ["i-1"]
    report, _ = plan_prune("ns", objs, PruneRules(keep_last=1), NOW)
    assert report.kept == 2


def test_older_than_and_keep_last_together_must_both_hold() -> None:
    objs = [
        job("old-1", identity="i", attempt=1, finished_ago=30 * DAY),
        job("young-2", identity="i", attempt=2, finished_ago=1 * DAY),
        job("young-3", identity="i", attempt=3, finished_ago=1 * DAY),
    ]
    assert picked(objs, older_than=7 * DAY, keep_last=1) == ["old-1"]


def test_status_identity_prefix_and_limit_narrow_the_selection() -> None:
    objs = [
        job("f1", state="Failed", identity="etl/a/1", finished_ago=9 * DAY),
        job("c1", identity="etl/a/2", finished_ago=8 * DAY),
        job("f2", state="Failed", identity="ml/b/1", finished_ago=7 * DAY),
    ]
    assert picked(objs, older_than=0.0, statuses=("Failed",)) == ["f1", "f2"]
    assert picked(objs, older_than=0.0, identity_prefix="etl/") == ["f1", "c1"]
    # Oldest first, and the rest left for a later run.
    report, _ = plan_prune("ns", objs, PruneRules(older_than=0.0, limit=2), NOW)
    assert [e.name for e in report.selected] == ["f1", "c1"]
    assert report.over_limit == 1


def test_the_retention_a_job_was_stamped_with_is_honoured() -> None:
    hour = retention.Retention(after_finished_seconds=3600).annotations()
    two = retention.Retention(keep_last=2).annotations()
    objs = [
        job("due", annotations=hour, finished_ago=7200),
        job("not-yet", annotations=hour, finished_ago=60),
        job("unstamped", finished_ago=100 * DAY),
        *(job(f"k{a}", identity="i", attempt=a, annotations=two) for a in range(4)),
    ]
    # k0 would be due too, but attempt 0 holds the identity's name while k2, k3 stay.
    assert sorted(picked(objs)) == ["due", "k1"]
    # The caller's rules add to the stamps; ignoring the stamps leaves only the rules.
    assert "unstamped" in picked(objs, older_than=30 * DAY)
    assert picked(objs, older_than=30 * DAY, honour_retention=False) == ["unstamped"]


def test_a_stamp_that_is_not_a_number_never_makes_a_job_due() -> None:
    for bad in ("-1", "soon", "1e9", "", "9" * 40, " 3600x"):
        obj = job(
            "x", finished_ago=100 * DAY, annotations={retention.AFTER_FINISHED_ANNOTATION: bad}
        )
        assert picked([obj]) == [], bad


def test_rules_that_pick_nothing_in_particular_are_refused() -> None:
    with pytest.raises(ValueError, match="no rule"):
        PruneRules(honour_retention=False).check()
    with pytest.raises(ValueError, match="never deleted"):
        PruneRules(older_than=0, statuses=("Running",)).check()
    with pytest.raises(ValueError, match="label_selector"):
        PruneRules(older_than=0, label_selector=" ").check()
    with pytest.raises(ValueError, match="identity_prefix"):
        PruneRules(older_than=0, identity_prefix="/").check()


def test_the_options_every_caller_passes_become_checked_rules() -> None:
    """``PruneRules.of`` reads the options as ``prune_jobs``, the command and the
    adapters pass them: an age as text, one status or several, ``dry_run`` not a rule."""
    assert PruneRules.of({}) == PruneRules()
    rules = PruneRules.of({"older_than": "7d", "statuses": "Failed", "dry_run": True})
    assert rules == PruneRules(older_than=7 * DAY, statuses=("Failed",))
    assert retention.PRUNE_OPTIONS[-1] == "dry_run"
    with pytest.raises(ValueError, match="no rule"):
        PruneRules.of({"honour_retention": False})
    with pytest.raises(TypeError, match="keep_lastt"):
        PruneRules.of({"keep_lastt": 1})  # type: ignore[typeddict-unknown-key]


def test_a_tasks_log_lines_name_each_job_and_end_with_the_summary() -> None:
    objs = [job("old", identity="nightly/a"), job("young", finished_ago=60)]
    plan, _ = plan_prune("ns", objs, PruneRules(older_than=DAY), NOW)
    assert plan.lines() == [
        "Would delete old (Complete, identity nightly/a): finished more than 86400s ago",
        plan.summary(),
    ]
    done = dataclasses.replace(plan, dry_run=False, deleted=["old"], skipped=[("x", "gone")])
    assert done.lines()[0].startswith("Picked old ")
    assert done.lines()[1:] == ["Left x alone: gone", done.summary()]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 7 * DAY), ("12h", 43200), ("30m", 1800), ("90s", 90), ("2w", 14 * DAY), (60, 60)],
)
def test_ages(text: str | int, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    "text",
    # 10**400: float() of it raises OverflowError; "٣d": \d matches an Arabic-Indic three.
    ["7 days", "-1d", "d", "", "1y", True, 10**400, -(10**400), float("nan"), "\u0663d"],
    ids=["words", "negative", "unit", "empty", "year", "bool", "huge", "huge-neg", "nan", "ar-3"],
)
def test_bad_ages_are_refused_with_the_fix(text: Any) -> None:
    with pytest.raises(ValueError, match="Fix"):
        parse_age(text)


def _spec(*options: Any) -> TrainJobSpec:
    trainer = CustomTrainerContainer(image="busybox")
    return TrainJobSpec(trainer=trainer, options=[TrainerCommand(["true"]), *options])


def test_retention_is_stamped_by_the_spec_or_else_the_backend_and_leaves_the_hash() -> None:
    plain = build_trainjob(_spec(), identity="i")
    default = Retention(keep_last=3)
    from_backend = build_trainjob(_spec(), identity="i", retention=default)
    own = build_trainjob(
        _spec(Retention(after_finished_seconds=60)), identity="i", retention=default
    )
    assert retention.stamped(from_backend.manifest["metadata"]["annotations"]) == (None, 3)
    assert retention.stamped(own.manifest["metadata"]["annotations"]) == (60, None)
    assert retention.stamped(plain.manifest["metadata"]["annotations"]) == (None, None)
    # The same job whatever its retention: a rerun with another setting adopts it.
    assert plain.spec_hash == from_backend.spec_hash == own.spec_hash
    assert plain.name == from_backend.name == own.name


def test_a_retention_without_a_setting_is_refused() -> None:
    with pytest.raises(SpecError, match="after_finished_seconds"):
        Retention()
    with pytest.raises(SpecError, match="keep_last"):
        TrainJobSpec.parse(
            {
                "trainer": {"image": "busybox"},
                "options": [{"type": "Retention", "keep_last": 0}],
            }
        )


def test_retention_from_flat_fields() -> None:
    """A block's or form's ``retention`` field reaches every backend's config (as a
    mapping or its JSON text); a bad value names the field and the fix."""
    from kf_trainer_core.tasks.backend_fields import config_from_fields

    local = config_from_fields({"backend": "local", "retention": {"keep_last": 2}})
    assert local.retention == Retention(keep_last=2)
    cluster = config_from_fields(
        {"host": "https://k:6443", "retention": '{"after_finished_seconds": 3600}'}
    )
    assert cluster.retention == Retention(after_finished_seconds=3600)
    container = config_from_fields({"backend": "container", "retention": {"keep_last": 1}})
    assert container.retention == Retention(keep_last=1)
    assert config_from_fields({"backend": "local", "retention": " "}).retention is None
    with pytest.raises(ValueError, match=r"retention 'soon' is not JSON\. Fix"):
        config_from_fields({"backend": "local", "retention": "soon"})
    with pytest.raises(ValueError, match=r"retention\.after_finished_seconds"):
        config_from_fields({"backend": "local", "retention": {"after_finished_seconds": -1}})


@pytest.mark.parametrize(
    ("action", "status", "succeeded", "deletes"),
    [
        ("keep", "Complete", True, False),
        ("delete-succeeded", "Complete", True, True),
        ("delete-succeeded", "Complete", False, False),  # result unreadable: a retry reads
        ("delete-succeeded", "Failed", False, False),
        ("delete", "Failed", False, True),
        ("delete", "Running", True, False),  # never an unfinished job
        ("delete", "Suspended", False, False),
    ],
)
def test_finish_action_deletes_only_finished_jobs(
    action: str, status: str, succeeded: bool, deletes: bool
) -> None:
    assert retention.finish_deletes(action, status, succeeded=succeeded) is deletes


def test_finish_action_is_checked() -> None:
    assert retention.check_finish_action("delete") == "delete"
    with pytest.raises(ValueError, match=r"on_finish: 'remove' is not an action\. Fix: use one of"):
        retention.check_finish_action("remove")


def test_a_limit_filled_with_held_locks_still_makes_progress() -> None:
    """Issue 33, finding 7: the N oldest due jobs were attempt 0s held by their
    identities' later attempts, so a run with ``limit=N`` took them, dropped them as held
    and deleted nothing, for ever (without a limit all 6 went). The limit counts what can
    go now; the locks follow in a later run, once their identities' other jobs are gone."""
    objs = [
        *(
            job(f"i{n}-0", identity=f"i{n}", attempt=0, state="Failed", finished_ago=30 * DAY)
            for n in range(3)
        ),
        *(job(f"i{n}-1", identity=f"i{n}", attempt=1, finished_ago=20 * DAY) for n in range(3)),
    ]
    assert sorted(picked(objs, older_than=7 * DAY)) == sorted(o["metadata"]["name"] for o in objs)
    first = picked(objs, older_than=7 * DAY, limit=3)
    assert first == ["i0-1", "i1-1", "i2-1"]
    report, _ = plan_prune("ns", objs, PruneRules(older_than=7 * DAY, limit=3), NOW)
    assert report.over_limit == 3
    rest = [o for o in objs if o["metadata"]["name"] not in first]
    assert picked(rest, older_than=7 * DAY, limit=3) == ["i0-0", "i1-0", "i2-0"]


@pytest.mark.parametrize("value", ["²", "١٢", "𝟳", "12abc", "-3", " ", "1e3", "9" * 40])
def test_a_retention_annotation_that_is_no_ascii_number_is_ignored(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33, finding 6: ``'²'`` passed ``str.isdigit`` and failed ``int()``, which
    failed every prune of the namespace; Arabic-Indic and mathematical digits were read
    as 12 and 7.
    A bad value counts as absent, with one warning; the other jobs are pruned."""
    objs = [
        job("odd", annotations={retention.AFTER_FINISHED_ANNOTATION: value}, finished_ago=DAY),
        job("old", finished_ago=30 * DAY),
    ]
    assert picked(objs, older_than=7 * DAY) == ["old"]
    assert retention.stamped({retention.AFTER_FINISHED_ANNOTATION: value}) == (None, None)
    report, _ = plan_prune("ns", objs, PruneRules(older_than=None, keep_last=None), NOW)
    assert [e.name for e in report.selected] == []  # "odd" is not due by its stamp
