"""The report's section on one shared Airflow triggerer holding many deferred TrainJob
tasks (:mod:`bench.triggerer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import JSON
from bench.report import count, skipped, table, times, verdict

TITLE = "Shared triggerer at 200 deferred tasks"
#: Issue 25's goals.
SCALE_GOAL = 200
RSS_GOAL_MIB = 100.0
KILL_GOAL_S = 3.0
BLOCK_GOAL_S = 0.2
P95_MARGIN_S = 5.0


def _s(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _dist(stats: JSON) -> str:
    if not stats or not stats.get("n"):
        return "n/a"
    return f"{_s(stats['p50'])} / {_s(stats['p95'])} / {_s(stats['max'])} (n={stats['n']})"


def _watch(arm: JSON) -> str:
    watch = arm.get("loopwatch")
    if not watch:
        return "not recorded"
    return (
        f"{len(watch['ours_over_0_2s'])} / {watch['airflow_over_0_2s']} "
        f"(of {watch['callbacks']} callbacks)"
    )


def _row(label: str, arms: JSON, pick: Any) -> list[str]:
    return [label] + [pick(arms[a]) if a in arms else "n/a" for a in ("ours", "poll")]


def section_triggerer(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    """Markdown and summary targets."""
    broke = skipped(section)
    if broke:
        return broke, []
    arms: JSON = section.get("arms") or {}
    ours: JSON = arms.get("ours") or {}
    ratios: JSON = section.get("ratios_ours_over_poll") or {}
    opts: JSON = section.get("options") or {}
    n = opts.get("tasks")
    load = section.get("load_before") or []
    load_after = section.get("load_after") or []
    rows = [
        _row("tasks deferred at once", arms, lambda a: count(a["tasks"])),
        _row(
            "task states at the end",
            arms,
            lambda a: ", ".join(f"{k} {v}" for k, v in sorted(a["states"].items())),
        ),
        _row("tasks retried", arms, lambda a: count(a["retried"])),
        _row("time to all deferred", arms, lambda a: _s(a["time_to_all_deferred_s"])),
        _row(
            "Airflow 'async thread was blocked' warnings (over 0.2 s)",
            arms,
            lambda a: f"{a['log']['blocked_warnings']} ({a['log']['blocked_over_0_2s']})",
        ),
        _row("worst block", arms, lambda a: _s(a["log"]["blocked_worst_s"])),
        _row("'appears deadlocked'", arms, lambda a: str(len(a["log"]["deadlocked"]))),
        _row(
            "triggerer RSS idle → peak (growth), MiB",
            arms,
            lambda a: (
                f"{a['triggerer_rss_mib']['idle']:.0f} → {a['triggerer_rss_mib']['peak']:.0f} "
                f"(+{a['triggerer_rss_mib']['growth_peak']:.0f})"
            ),
        ),
        _row("triggerer CPU over the run", arms, lambda a: _s(a["triggerer_cpu_s"])),
        _row("API requests to the server (run)", arms, lambda a: count(a["requests"])),
        _row(
            "job end → task resumed (trigger fired, task scheduled), p50 / p95 / max",
            arms,
            lambda a: _dist(a.get("end_to_resumed_s") or {}),
        ),
        _row(
            "job end → task success, p50 / p95 / max", arms, lambda a: _dist(a["end_to_success_s"])
        ),
        _row(
            "trigger runner callbacks blocked over 0.2 s: the triggers' / Airflow's", arms, _watch
        ),
        _row(
            "kill → TrainJob delete (each)",
            arms,
            lambda a: (
                ", ".join(_s(k) for k in a["kill_to_delete_s"])
                or "not done (the baseline deletes nothing)"
            ),
        ),
        _row(
            "scheduler: deferral → worker exit processed, p50 / p95 / max",
            arms,
            lambda a: _dist(a["scheduler_defer_exit_delay_s"]),
        ),
    ]
    text = [
        f"One Airflow 3 triggerer (with the real api-server, scheduler, dag-processor and "
        f"LocalExecutor, parallelism {opts.get('parallelism')}, SQLite) holding **{n}** "
        "deferred `TrainJobOperator` tasks at once; the same tasks with a polling trigger "
        "written like `KubernetesJobOperator`'s (a fresh `kubernetes_asyncio` client and "
        f"kubeconfig load per GET, every {opts.get('poll_interval')} s; "
        "`bench/triggerer_poll.py`) as the baseline, each arm with a fresh triggerer, in "
        "the same run. Jobs on the test bed run until every task is deferred and claimed "
        f"by the triggerer; then {opts.get('kills')} deferred tasks of ours are marked "
        f"failed through the REST API, and the other jobs end over "
        f"{opts.get('release_over')} s. `resume_grace` {opts.get('grace')} s. Load average "
        f"{' / '.join(str(x) for x in load)} before and "
        f"{' / '.join(str(x) for x in load_after)} after, on {section.get('cpus')} cores "
        "shared with other engineers' work: times are noisy. Re-run with "
        "`uv run --frozen python -m bench.triggerer --tasks N`.",
        "",
        table(["", "ours", "polling baseline"], rows),
        "",
    ]
    if ratios:
        text += [
            "Ours / baseline: requests "
            + times(ratios.get("requests"))
            + ", triggerer CPU "
            + times(ratios.get("triggerer_cpu_s"))
            + ", RSS growth "
            + times(ratios.get("rss_growth"))
            + ", end → success p50 "
            + times(ratios.get("end_to_success_p50"))
            + ", p95 "
            + times(ratios.get("end_to_success_p95"))
            + ".",
            "",
        ]
    note = section.get("note")
    if note:
        text += [str(note), ""]
    targets: list[list[str]] = []
    if ours:
        log = ours["log"]
        e2s = ours["end_to_success_s"]
        grace = float(opts.get("grace") or 0)
        kills = ours["kill_to_delete_s"]
        targets = [
            [
                "shared triggerer: deferred tasks held at once (goal 200)",
                count(n),
                verdict(bool(n and n >= SCALE_GOAL)),
            ],
            [
                "shared triggerer: blocked-loop warnings over 0.2 s (goal 0)",
                count(log["blocked_over_0_2s"]),
                verdict(log["blocked_over_0_2s"] == 0),
            ],
            [
                "shared triggerer: 'appears deadlocked' (goal none)",
                count(len(log["deadlocked"])),
                verdict(not log["deadlocked"]),
            ],
            [
                "shared triggerer: RSS growth (goal ≤ 100 MiB)",
                f"{ours['triggerer_rss_mib']['growth_peak']:.0f} MiB",
                verdict(ours["triggerer_rss_mib"]["growth_peak"] <= RSS_GOAL_MIB),
            ],
            [
                f"shared triggerer: job end → success p95 (goal ≤ grace + 5 = {grace + 5:.0f} s)",
                _s(e2s.get("p95")),
                verdict(None if not e2s.get("n") else e2s["p95"] <= grace + P95_MARGIN_S),
            ],
            [
                "shared triggerer: kill → delete, worst (goal ≤ 3 s)",
                _s(max(kills)) if kills else "n/a",
                verdict(None if not kills else max(kills) <= KILL_GOAL_S),
            ],
        ]
    return "\n".join(text), targets
