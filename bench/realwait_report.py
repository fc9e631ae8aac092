"""The report's section on waiting on the real control plane (:mod:`bench.realwait`)."""

from __future__ import annotations

from pathlib import Path

from bench.common import JSON
from bench.report import count, ms, skipped, table, times, verdict

#: The test bed's targets (issue 23), held on the real server too.
P95_TARGET_MS = 50.0
RSS_TARGET_MB = 10.0


def _load(values: object) -> str:
    if not isinstance(values, list) or not values:
        return "not recorded"
    return " / ".join(f"{v:.1f}" for v in values)


def _latency(section: JSON, targets: list[list[str]]) -> list[str]:
    lat = section.get("latency") or {}
    sides: JSON = lat.get("sides") or {}
    if not sides:
        return []
    rows = []
    for key in ("ours_async", "ours_sync", "sdk", "ours_async_no_result"):
        side = sides.get(key)
        if side is None:
            continue
        if "error" in side:
            rows.append([side["label"], "broke: " + str(side["error"])[:200], "", "", "", "", ""])
            continue
        run = side.get("resume_to_complete") or {}
        rows.append(
            [
                side["label"],
                ms(side["p50"] * 1000),
                ms(side["p95"] * 1000),
                ms(side["max"] * 1000),
                times(side.get("ratio_p95")) if key != "sdk" else "1 (baseline)",
                f"{side.get('errors', 0)} of {side['n'] + side.get('errors', 0)}",
                f"{run.get('p50', 0):.1f} / {run.get('max', 0):.1f} s",
            ]
        )
        if key == "ours_async" and side.get("n"):
            p95 = side["p95"] * 1000
            targets.append(
                [
                    "real controllers: notice p95 after the Trainer controller's `Complete` "
                    f"(target <= {P95_TARGET_MS:g} ms), ours async vs SDK",
                    f"{ms(p95)} vs {ms(sides.get('sdk', {}).get('p95', 0) * 1000)} "
                    f"({times(side.get('ratio_p95'))})",
                    verdict(p95 <= P95_TARGET_MS),
                ]
            )
    return [
        "### Completion latency with the real controllers",
        "",
        f"_Measured {lat.get('ran_at', '?')}; load average before "
        f"{_load(lat.get('load_before'))}, after {_load(lat.get('load_after'))}._",
        "",
        f"`start.sh --controllers`: {lat.get('jobs_per_side')} TrainJobs per side, created "
        "suspended, every wait in place, then resumed together. The real Trainer controller "
        "makes each a JobSet, the real JobSet and Job controllers make its pod, kwok runs it "
        f"for 1 to {1 + (lat.get('spread_seconds') or 5):g} s (its `kwok.x-k8s.io/duration`, "
        "set through a `RuntimePatch`), and the Trainer controller writes `Complete`. Notice "
        "latency: from the moment the benchmark's own watch on the TrainJobs delivered "
        "`Complete` to the wait's return in the waiting process (`lastTransitionTime` has "
        "whole seconds only). Ratio: the SDK's p95 over ours. Each pod ends with the "
        "function's return value as its termination message, as the generated program "
        "writes it on a real node; the last row is ours on pods that end without one: the "
        "wait then looks for the result in node-0's log, which a kwok node cannot serve "
        "(no kubelet), and reports the result as missing: that failed read is the "
        "difference.",
        "",
        table(
            [
                "side",
                "notice p50",
                "notice p95",
                "max",
                "p95 vs SDK",
                "errors",
                "resume to Complete p50 / max",
            ],
            rows,
        ),
        "",
    ]


def _namespace(section: JSON, targets: list[list[str]]) -> list[str]:
    ns = section.get("namespace") or {}
    if not ns.get("rows"):
        return []
    rows = []
    by_jobs: dict[int, JSON] = {}
    for row in ns["rows"]:
        by_jobs[row["jobs"]] = row
        for key in ("ours_async", "ours_sync", "sdk"):
            side = row.get(key)
            if side is None:
                continue
            if "error" in side:
                rows.append([f"{row['jobs']:,}", key, "broke: " + str(side["error"])[:200], "", ""])
                continue
            lat = side["latency"]
            rows.append(
                [
                    f"{row['jobs']:,}",
                    side["label"],
                    ms(lat["p50"] * 1000),
                    ms(lat["p95"] * 1000),
                    count(side.get("rss_growth_mb")) + " MiB",
                    str(side.get("errors", 0)),
                ]
            )
    full = by_jobs.get(ns.get("foreign_jobs", 10000)) or {}
    ours = full.get("ours_async") or {}
    sdk = full.get("sdk") or {}
    if "latency" in ours:
        p95 = ours["latency"]["p95"] * 1000
        sdk_p95 = (sdk.get("latency") or {}).get("p95")
        targets.append(
            [
                "real server, 10,000 foreign 20-KiB jobs: notice p95 (target <= "
                f"{P95_TARGET_MS:g} ms), ours async vs SDK",
                ms(p95) + (f" vs {ms(sdk_p95 * 1000)}" if sdk_p95 is not None else ""),
                verdict(p95 <= P95_TARGET_MS),
            ]
        )
        growth = ours.get("rss_growth_mb")
        targets.append(
            [
                "real server, 10,000 foreign jobs: RSS growth of ours async (target <= "
                f"{RSS_TARGET_MB:g} MiB)"
                + (f", SDK {count(sdk.get('rss_growth_mb'))} MiB" if sdk else ""),
                count(growth) + " MiB",
                verdict(None if growth is None else growth <= RSS_TARGET_MB),
            ]
        )
    created = full.get("create_seconds")
    made = (
        f"created over HTTP by 16 concurrent writers in {created:.0f} s"
        if created
        else "created over HTTP"
    )
    return [
        "### Namespace size on the real server",
        "",
        f"_Measured {ns.get('ran_at', '?')}; load average before "
        f"{_load(ns.get('load_before'))}, after {_load(ns.get('load_after'))}._",
        "",
        f"API-only control plane. {ns.get('foreign_jobs', 10000):,} foreign TrainJobs "
        f"(~{(ns.get('program_bytes') or 20480) // 1024} KiB of program each, no label of "
        f"this suite) {made}; then a fresh process per side waits for 8 jobs of its "
        "own, whose `Complete` the benchmark writes through `/status` over two seconds "
        "(once the process's CPU has gone quiet). Ours lists and watches only the "
        "suite's own jobs (its shared informer's label selector), so the foreign jobs are "
        "never sent to it; the SDK reads each job by name. "
        "Notice latency: from the status write's answer to the wait's return. RSS growth: "
        "the process's peak RSS (sampled every 50 ms) over its RSS before the waits.",
        "",
        table(
            ["foreign jobs", "side", "notice p50", "notice p95", "RSS growth", "errors"],
            rows,
        ),
        "",
    ]


def section_realwait(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, []
    if "skipped" in section:
        return f"Skipped: {section['skipped']}.", []
    targets: list[list[str]] = []
    text = [
        "Two more control planes of `../shared/control-plane`, each started and stopped by "
        "the benchmark, on the same two shared cores; each part states the load average "
        "(1 / 5 / 15 min) before and after it (the lead's CI run and other engineers' tests "
        "ran meanwhile: compare the ratios, taken side by side in the same run, not the "
        "absolute times).",
        "",
    ]
    if section.get("sdk_skipped"):
        text += [f"The Kubeflow SDK side was skipped: {section['sdk_skipped']}.", ""]
    text += _latency(section, targets)
    text += _namespace(section, targets)
    return "\n".join(text).rstrip(), targets
