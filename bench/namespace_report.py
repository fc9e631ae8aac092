"""The "Namespace size" section of ``BENCHMARKS.md`` (see :mod:`bench.namespace`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import JSON, REPO
from bench.report import COLORS, _num, _plot, secs, skipped, table, verdict

#: The same benchmark run on the code before this section's work (commit, results),
#: kept for the before/after table; written by hand from a run of the old tree.
BEFORE = REPO / "bench" / "namespace_before.json"

NAMES = {"sync": "ours, sync", "async": "ours, async", "sdk": "Kubeflow SDK"}


def _mib(value: Any) -> str:
    v = _num(value)
    return "n/a" if v is None else (f"{v:.1f} MiB" if v < 100 else f"{v:.0f} MiB")


def _rows(section: JSON) -> list[list[str]]:
    rows = []
    for r in section.get("rows") or []:
        population = f"{r['jobs']:,} {'foreign' if r['whose'] == 'foreign' else 'own, finished'}"
        for key in ("sync", "async", "sdk"):
            s = r.get(key)
            if not isinstance(s, dict):
                continue
            if "error" in s:
                rows.append([population, NAMES[key], "broke", "", "", "", str(s["error"])[:80]])
                continue
            lat = s.get("latency") or {}
            rows.append(
                [
                    population,
                    NAMES[key],
                    _mib(s.get("rss_growth_mb")),
                    _mib(s.get("received_mb")),
                    str(s.get("requests")),
                    f"{secs(lat.get('p50'))} / {secs(lat.get('p95'))}",
                    str(s.get("errors")),
                ]
            )
    return rows


HEADER = [
    "TrainJobs in the namespace",
    "waiter",
    "RSS growth (peak)",
    "bytes received",
    "requests",
    "notice p50 / p95",
    "errors",
]


def plot(out: Path, section: JSON) -> str | None:
    rows = [r for r in section.get("rows") or [] if r["whose"] == "foreign"]
    if len(rows) < 2:
        return None

    def draw(fig: Any) -> None:
        for i, (field, title) in enumerate(
            (
                ("rss_growth_mb", "RSS growth (MiB)"),
                ("received_mb", "bytes received (MiB)"),
                ("p95", "notice p95 (s)"),
            )
        ):
            ax = fig.add_subplot(1, 3, i + 1)
            for key in ("sync", "async", "sdk"):
                points = []
                for r in rows:
                    s = r.get(key) or {}
                    value = (s.get("latency") or {}).get("p95") if field == "p95" else s.get(field)
                    number = _num(value)
                    if number is not None:
                        points.append((r["jobs"], number))
                if points:
                    xs, ys = zip(*points, strict=True)
                    color = COLORS.get("ours_" + key, COLORS.get(key))
                    ax.plot(xs, ys, "o-", label=NAMES[key], color=color)
            ax.set_xscale("symlog", linthresh=100)
            ax.set_xlabel("foreign TrainJobs (~20 KiB) in the namespace")
            ax.set_title(title)
            if i == 0:
                ax.legend()

    return _plot(out, "namespace.png", draw, width=12.0)


def _targets(section: JSON) -> list[list[str]]:
    out: list[list[str]] = []
    wanted = (("foreign", 10000, 10.0), ("suite", 10000, 30.0))
    for whose, n, rss_cap in wanted:
        row = next(
            (r for r in section.get("rows") or [] if r["whose"] == whose and r["jobs"] == n), None
        )
        what = "foreign" if whose == "foreign" else "of the suite's own finished"
        label = f"{n:,} {what} 20-KiB TrainJobs: RSS growth ≤ {rss_cap:.0f} MiB, notice p95 ≤ 50 ms"
        if row is None:
            out.append([label, "not run (quick mode)", verdict(None)])
            continue
        shown, met = [], True
        for key in ("sync", "async"):
            s = row.get(key) or {}
            rss = _num(s.get("rss_growth_mb"))
            p95 = _num((s.get("latency") or {}).get("p95"))
            if rss is None or p95 is None or s.get("errors"):
                met = False
                shown.append(f"{NAMES[key]}: broke")
                continue
            met = met and rss <= rss_cap and p95 <= 0.05
            shown.append(f"{NAMES[key]}: {_mib(rss)}, p95 {secs(p95)}")
        sdk = row.get("sdk") or {}
        if "rss_growth_mb" in sdk:
            sdk_p95 = (sdk.get("latency") or {}).get("p95")
            shown.append(f"SDK: {_mib(sdk['rss_growth_mb'])}, p95 {secs(sdk_p95)}")
        out.append([label, "; ".join(shown), verdict(met)])
    return out


def section_namespace(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, []
    waits = section.get("waits_per_process")
    text = [
        "What one waiting process pays for the TrainJobs already in its namespace "
        "(Trainer keeps every finished job, each embedding its program). The namespace "
        "is filled with finished TrainJobs of ~20 KiB — *foreign* ones (made by others, "
        "no label of this suite) or, apart, the suite's *own* finished ones — straight "
        "into the test server's store; then a fresh process waits for "
        f"{waits} suspended jobs of its own, which are resumed once its start-up work is "
        "done. *RSS growth*: the process's peak RSS (sampled every 50 ms) over its RSS "
        "after one API call, before the waits; *bytes received*: the response bodies the "
        "server sent it; "
        "*requests*: all it sent; *notice*: Complete on the server to `wait` returning. "
        "Our waits list (in pages of 250) and watch only the suite's jobs "
        "(`app.kubernetes.io/managed-by=kf-trainer-suite`), follow a foreign job by a "
        "watch on its name, and keep finished jobs nobody waits for as name + version.",
        "",
        table(HEADER, _rows(section)),
    ]
    if section.get("sdk_skipped"):
        text += ["", f"The Kubeflow SDK side did not run: {section['sdk_skipped']}."]
    if BEFORE.exists():
        before = json.loads(BEFORE.read_text())
        text += [
            "",
            f"Before this work (commit {before.get('commit', '?')}, one unpaginated list and "
            "watch of every TrainJob in the namespace), the same benchmark, run separately "
            f"with `{before.get('command', '?')}` on {before.get('ran_at', '?')}:",
            "",
            table(HEADER, _rows(before)),
        ]
    picture = plot(out, section)
    if picture:
        text += ["", f"![cost against namespace size]({picture})"]
    return "\n".join(text), _targets(section)
