"""Turn ``bench/results.json`` into ``BENCHMARKS.md`` and ``bench/plots/*.png``.

Everything here reads the results only, so the report can be re-rendered without
re-running anything (``python -c "from bench.report import rerender; rerender()"``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import JSON, REPO

PLOTS = Path("bench") / "plots"
#: The multiplication sign that follows ratios, spelt as an escape for the linter.
TIMES = "\u00d7"


# ----------------------------------------------------------------------------- formatting


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def secs(value: Any) -> str:
    """Seconds, in the unit that reads best."""
    v = _num(value)
    if v is None:
        return "n/a"
    if abs(v) < 1:
        return f"{v * 1000:.0f} ms" if abs(v) >= 0.0095 else f"{v * 1000:.1f} ms"
    return f"{v:.2f} s"


def ms(value: Any) -> str:
    v = _num(value)
    return "n/a" if v is None else (f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms")


def times(value: Any) -> str:
    """A ratio, e.g. ``12.3`` followed by the multiplication sign."""
    v = _num(value)
    if v is None:
        return "n/a"
    return f"{v:.1f}{TIMES}" if v < 100 else f"{v:.0f}{TIMES}"


def count(value: Any, digits: int = 1) -> str:
    v = _num(value)
    if v is None:
        return "n/a"
    return f"{v:.0f}" if v == int(v) else f"{v:.{digits}f}"


def verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def skipped(section: JSON) -> str | None:
    if "error" in section:
        return (
            "This benchmark broke in this run:\n\n```\n" + str(section["error"])[-1500:] + "\n```"
        )
    return None


# ----------------------------------------------------------------------------- plots


def _plot(out: Path, name: str, draw: Callable[[Any], None], *, width: float = 9.0) -> str | None:
    """Draw with matplotlib (Agg) into ``out/bench/plots/name``; the relative path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    path = out / PLOTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    plt.rcParams.update({"font.size": 9})
    fig = plt.figure(figsize=(width, 3.6), dpi=110)
    try:
        draw(fig)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return str(PLOTS / name)


COLORS = {"ours_sync": "#1f77b4", "ours_async": "#2ca02c", "ours": "#2ca02c", "sdk": "#d62728"}
COLORS["poll"] = "#ff7f0e"


def plot_latency(out: Path, section: JSON) -> str | None:
    sides = section.get("sides", {})
    series = {k: v.get("latencies") for k, v in sides.items() if v.get("latencies")}
    if not series:
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for key, values in series.items():
            ys = [(i + 1) / len(values) for i in range(len(values))]
            xs = [max(v, 1e-4) for v in values]
            ax.step(xs, ys, where="post", label=sides[key]["label"], color=COLORS.get(key))
        ax.set_xscale("log")
        ax.set_xlabel("seconds from Complete (server) to wait() returning (client), log scale")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"Completion latency, {section.get('jobs')} jobs per side (CDF)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left")

    return _plot(out, "latency_cdf.png", draw)


def plot_requests(out: Path, section: JSON) -> str | None:
    rows = section.get("rows") or []
    if not rows:
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        xs = [r["duration"] for r in rows]
        for side, label, key, style in (
            ("ours", "ours, about the job", "per_job_mean", "o-"),
            ("ours", "ours, all requests / job", "all_per_job", "o--"),
            ("sdk", "SDK (scaled run), about the job", "per_job_mean", "s-"),
            ("sdk", "SDK (scaled run), all requests / job", "all_per_job", "s--"),
        ):
            ys = [_num((r.get(side) or {}).get(key)) for r in rows]
            if any(y is not None for y in ys):
                pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
                color = COLORS["ours_async" if side == "ours" else "sdk"]
                ax.plot(*zip(*pts, strict=True), style, label=label, color=color)
        unscaled = [(r["duration"], r["sdk_unscaled"]["per_job"]) for r in rows]
        ax.plot(
            *zip(*unscaled, strict=True),
            "x:",
            color="grey",
            label="SDK at a real 2 s poll, about the job (computed)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs, [r["label"] for r in rows])
        ax.set_xlabel("job duration (simulated)")
        ax.set_ylabel("API requests per job (log)")
        ax.set_title("API requests per job against job duration")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

    return _plot(out, "requests_per_job.png", draw)


def plot_scale(out: Path, section: JSON) -> str | None:
    rows = section.get("rows") or []
    if not rows:
        return None
    panels: list[tuple[str, Callable[[JSON], Any]]] = [
        ("p95 completion latency (s, log)", lambda s: (s.get("latency") or {}).get("p95")),
        ("RSS of the waiting process (MiB)", lambda s: s.get("rss_mb")),
        ("CPU while idle (% of a core)", lambda s: s.get("idle_cpu_percent")),
        ("requests/s while idle", lambda s: s.get("idle_requests_per_second")),
    ]

    def draw(fig: Any) -> None:
        for i, (title, get) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            for key in ("ours", "poll", "sdk"):
                pts = [
                    (r["jobs"], _num(get(r[key])))
                    for r in rows
                    if isinstance(r.get(key), dict) and _num(get(r[key])) is not None
                ]
                if pts:
                    label = {"ours": "ours", "poll": "SDK-style async", "sdk": "SDK threads"}[key]
                    ax.plot(*zip(*pts, strict=True), "o-", label=label, color=COLORS[key])
            if "requests" in title:
                est = [(r["jobs"], r["sdk_rate_estimate"]) for r in rows]
                ax.plot(*zip(*est, strict=True), "x:", color="grey", label="SDK (computed)")
            ax.set_xscale("log")
            counts = [r["jobs"] for r in rows]
            ax.set_xticks(counts, [str(c) for c in counts])
            if "requests" in title:
                ax.set_yscale("symlog", linthresh=1)
                ax.set_ylim(bottom=0)
            elif "latency" in title:
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.set_xlabel("concurrent waits")
            ax.set_title(title, fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            if i == 0:
                ax.legend(fontsize=7)

    return _plot(out, "scale.png", draw, width=12.0)


def plot_submit(out: Path, section: JSON) -> str | None:
    sides = section.get("sides", {})
    if not any(s.get("levels") for s in sides.values()):
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for key, side in sides.items():
            levels = side.get("levels") or []
            if levels:
                xs = [lv["concurrency"] for lv in levels]
                ys = [lv["jobs_per_second"] for lv in levels]
                ax.plot(xs, ys, "o-", label=side["label"], color=COLORS.get(key))
        ax.set_xscale("log")
        levels = section.get("levels") or []
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrent submitters")
        ax.set_ylabel("TrainJobs created per second")
        ax.set_title("Submit throughput")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

    return _plot(out, "submit.png", draw)


# ----------------------------------------------------------------------------- sections


def section_latency(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, [
            [f"completion latency p95 ≥ 10{TIMES} lower than the SDK", "n/a", "not measured"]
        ]
    sides = section["sides"]
    rows = []
    for key in ("ours_sync", "ours_async", "sdk"):
        s = sides.get(key, {})
        if "skipped" in s or "error" in s:
            reason = s.get("skipped") or str(s.get("error", "broke"))[-300:]
            rows.append([s.get("label", key), "—", "—", "—", "—", reason, ""])
            continue
        rows.append(
            [
                s["label"],
                f"{s['n']}" + (f" ({s['errors']} errors)" if s.get("errors") else ""),
                secs(s["p50"]),
                secs(s["p95"]),
                secs(s["max"]),
                times(s.get("ratio_p95")) if key != "sdk" else "baseline",
                f"{s.get('server_requests_per_second', 0):.0f} req/s, "
                f"p95 answer {ms(s.get('server_p95_request_ms'))}",
            ]
        )
    text = [
        "Time from the moment the test server commits a TrainJob's `Complete` condition "
        f"(stamped in {section.get('clock', 'a store.subscribe callback')}, in the server's "
        "process) to the moment `wait` returns in the waiting process (`time.time()` on "
        "both sides, same machine). "
        f"{section['jobs']} jobs per side, in {section['waves']} wave(s) of "
        f"{section['per_wave']}: a wave's jobs are created suspended, a new process starts a "
        "wait on each, and once every wait is in place they are resumed together, their "
        f"completions spread over {section['spread_seconds']:.0f} s. The SDK runs in its own "
        "venv against the same server through a kubeconfig, with its default 2 s poll. "
        "Waves keep the server unsaturated (*server* column: requests per second it "
        "answered while the wave ran, and the p95 time to answer one), so that the SDK's "
        "figure is its polling, not queueing in the Python test server.",
        "",
        table(
            ["waiter", "jobs", "p50", "p95", "max", "p95: SDK / ours", "server (busiest wave)"],
            rows,
        ),
    ]
    plot = plot_latency(out, section)
    if plot:
        text += ["", f"![completion latency CDF]({plot})"]
    targets = []
    for key in ("ours_sync", "ours_async"):
        r = _num(sides.get(key, {}).get("ratio_p95"))
        flavour = key.replace("ours_", "")
        targets.append(
            [
                f"completion latency p95 ≥ 10{TIMES} lower than the SDK ({flavour})",
                times(r),
                verdict(None if r is None else r >= 10),
            ]
        )
    return "\n".join(text), targets


def section_requests(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, [["requests per job constant in duration and ≤ 6", "n/a", "not measured"]]
    scale = section["scale"]
    rows = []
    for r in section["rows"]:
        ours, sdk = r.get("ours") or {}, r.get("sdk") or {}
        rows.append(
            [
                f"{r['label']} ({r['real_seconds']:.2f} s real)",
                count(ours.get("per_job_mean")),
                count(ours.get("all_per_job")),
                count(ours.get("watches")),
                count(sdk.get("per_job_mean")),
                count(sdk.get("all_per_job")),
                count(sdk.get("polls_mean")),
                f"{r['sdk_unscaled']['per_job']} / {r['sdk_unscaled']['all_per_job']}",
                times(_ratio(sdk.get("per_job_mean"), ours.get("per_job_mean"))),
            ]
        )
    setup = section.get("setup") or {}
    setup_lines = []
    for side, label in (("ours", "ours"), ("sdk", "the SDK")):
        st = setup.get(side)
        if st:
            setup_lines.append(
                f"{label}: {st['requests']} requests ({st['lists']} lists, {st['watches']} "
                f"watch connections), {st['amortised_per_job']:.1f} per job over the "
                f"{section['jobs_per_process']} jobs of the process"
            )
    text = [
        "One process per side submits and waits for a warm-up job, then for "
        f"{section['jobs_per_duration']} job(s) of each duration in turn (the jobs of a "
        "duration concurrently; ours with an identity, as the adapters submit; the SDK "
        "with `train()` and a client per job). Long jobs are simulated by scaling time by "
        f"s = 1/{round(1 / scale)}: a job of duration D runs D{TIMES}s real seconds and the "
        f"SDK polls every 2 s {TIMES} s = {section['sdk_polling_interval'] * 1000:.0f} ms, "
        "so that it polls about as often per job as it would at its default 2 s over the "
        "real duration.",
        "",
        "*About the job*: `server.requests.count(job=name)` — requests naming the TrainJob, "
        "its pods, their logs and events, or a selector naming it — mean per job. *All / "
        "job*: every request the process made while those jobs ran, divided by them: for "
        "us, a fresh identity's submit is one CREATE (its jobs are listed only when that "
        "create conflicts: a rerun); "
        "for the SDK, the kubeconfig check and the runtime lookups it makes on every poll. "
        "*Watches*: watch connections opened meanwhile. Our waits share one TrainJob watch "
        "and one Event watch per namespace and process, opened once (with a list each); "
        "they are counted apart, in the set-up below, and amortised over every job the "
        "process waits for. At the scaled interval a poll's own time is not negligible, so "
        "the SDK polls *less* often than at a real 2 s poll: the column *SDK at 2 s* gives "
        "that count, computed (1 create + 2 requests about the job per poll / 4 requests "
        "per poll in all).",
        "",
        table(
            [
                "job duration",
                "ours: about the job",
                "ours: all / job",
                "ours: watches",
                "SDK: about the job",
                "SDK: all / job",
                "SDK: polls",
                "SDK at 2 s: about / all",
                "SDK / ours (about the job)",
            ],
            rows,
        ),
    ]
    if setup_lines:
        text += [
            "",
            "Set-up, once per process (process start and the warm-up job): "
            + "; ".join(setup_lines)
            + ".",
        ]
    plot = plot_requests(out, section)
    if plot:
        text += ["", f"![requests per job]({plot})"]
    # Judged on both counts: about the job (the server's per-job count) and everything
    # the process sent per job once set up.
    about = [_num((r.get("ours") or {}).get("per_job_max")) for r in section["rows"]]
    every = [_num((r.get("ours") or {}).get("all_per_job")) for r in section["rows"]]
    met: bool | None = None
    shown = "n/a"
    if all(v is not None for v in about + every) and about:
        a = [v for v in about if v is not None]
        e = [v for v in every if v is not None]
        met = max(a) - min(a) <= 1 and max(e) - min(e) <= 1 and max(a + e) <= 6
        shown = (
            "about the job (max) "
            + " / ".join(count(v) for v in a)
            + "; all / job "
            + " / ".join(count(v) for v in e)
            + " (10 s / 1 min / 10 min)"
        )
    return "\n".join(text), [["requests per job constant in duration and ≤ 6", shown, verdict(met)]]


def _ratio(baseline: Any, ours: Any) -> float | None:
    b, o = _num(baseline), _num(ours)
    return b / o if b is not None and o else None


def section_scale(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, []
    rows = []
    names = {"ours": "ours (async)", "poll": "SDK-style async pollers", "sdk": "SDK (threads)"}
    for r in section["rows"]:
        for key in ("ours", "poll", "sdk"):
            s = r.get(key)
            if not isinstance(s, dict):
                continue
            if "error" in s:
                rows.append([str(r["jobs"]), names[key], "broke", "", "", "", "", "", "", ""])
                continue
            lat = s.get("latency") or {}
            cpu = s.get("completion_cpu_seconds") or {}
            busy = (
                f"{cpu['client']:.2f} s / {cpu['server']:.2f} s (load {s['load_average']:.1f})"
                if cpu
                else ""
            )
            rows.append(
                [
                    str(r["jobs"]),
                    names[key],
                    str(s["open_watches"]),
                    f"{s['rss_mb']:.0f} MiB",
                    "n/a" if s.get("rss_growth_mb") is None else f"{s['rss_growth_mb']:.1f} MiB",
                    f"{s['idle_cpu_seconds']:.2f} s ({s['idle_cpu_percent']:.1f} %)",
                    f"{s['idle_requests_per_second']:.1f}",
                    f"{secs(lat.get('p50'))} / {secs(lat.get('p95'))}",
                    busy,
                    str(s["errors"]),
                ]
            )
        if "poll" not in r:
            rows.append(
                [
                    str(r["jobs"]),
                    "SDK (computed)",
                    "0",
                    "",
                    "",
                    "",
                    f"{r['sdk_rate_estimate']:.0f}",
                    "≈ 1 s / 1.9 s (2 s poll)",
                    "",
                    "",
                ]
            )
    window = section["idle_window_seconds"]
    text = [
        "N waits pending at once in one process (the Airflow triggerer case). While all are "
        "pending: watch connections open on the server, the process's RSS (and its growth "
        "over its RSS before the waits started), its CPU time and the requests it made over "
        f"an idle window of {window:.0f} s. Then the jobs are resumed and the completion "
        "latency is measured as above, with completions paced to what the single-process "
        "test server can serve: the first after the resume burst (1 s + 20 ms a job), then "
        "at most 50 a second (5 s at the least). The "
        "SDK-style alternative repeats, per job, the four requests the SDK's "
        "`wait_for_job_status` makes per poll, every 2 s, as `kubernetes_asyncio` tasks in "
        "one event loop; it and the SDK itself run at 10 and 100 jobs only, and the rate "
        f"they would impose at 1,000 is computed (1,000 {TIMES} 4 requests / 2 s) rather than "
        "imposed on a shared machine. *CPU over completions*: the waiting process's and "
        "the test server's (with its simulated controller) CPU seconds from the resume to "
        "the last wait returning, with the 1-minute load average at the resume: on two "
        "shared cores a latency is only as good as the CPU left to both. At 1,000 waits "
        "the server's share alone exceeds what two cores give over the 5 s of "
        "completions, so the latency there is queueing: see [A thousand waits in one "
        "process](docs/scale.md#a-thousand-waits-in-one-process) for what was measured "
        "and fixed.",
        "",
        table(
            [
                "waits",
                "waiter",
                "watches open",
                "RSS",
                "RSS growth",
                f"CPU in {window:.0f} s idle",
                "requests/s idle",
                "latency p50 / p95",
                "CPU over completions: waiter / server",
                "errors",
            ],
            rows,
        ),
    ]
    marginal = section.get("marginal_memory") or {}
    if marginal:
        text += [
            "",
            "Memory per additional wait (RSS slope between the two largest counts): "
            + "; ".join(
                f"{names[k]} {m['kb_per_wait']:.1f} KiB ({m['from']} → {m['to']} waits)"
                for k, m in marginal.items()
            )
            + ". *RSS growth* is over the process's RSS before its waits started (the first "
            "wait also pays for the client's connections and the informers).",
        ]
    plot = plot_scale(out, section)
    if plot:
        text += ["", f"![scale of waiting]({plot})"]
    return "\n".join(text), scale_summary(section)


def scale_summary(section: JSON) -> list[list[str]]:
    """Headline rows: the largest count each side ran at."""
    rows = section.get("rows") or []
    ours = next((r for r in reversed(rows) if "rss_mb" in (r.get("ours") or {})), None)
    poll = next((r for r in reversed(rows) if "rss_mb" in (r.get("poll") or {})), None)
    out: list[list[str]] = []
    if ours:
        o = ours["ours"]
        out.append(
            [
                f"{ours['jobs']} concurrent async waits, one process: watch connections, "
                "requests/s and CPU while idle",
                f"{o['open_watches']} watches, {o['idle_requests_per_second']:.1f} req/s, "
                f"{o['idle_cpu_percent']:.1f} % of a core (SDK way: "
                f"{ours['sdk_rate_estimate']:.0f} req/s computed)",
                "no target",
            ]
        )
    big = next((r for r in rows if r["jobs"] >= 1000 and "latency" in (r.get("ours") or {})), None)
    if big:
        o = big["ours"]
        p95 = _num((o.get("latency") or {}).get("p95"))
        cpu = o.get("completion_cpu_seconds") or {}
        load = f", load {o['load_average']:.1f}" if "load_average" in o else ""
        spent = (
            f"; CPU over the completions: waiter {cpu['client']:.1f} s, test server "
            f"{cpu['server']:.1f} s{load}"
            if cpu
            else ""
        )
        met = p95 is not None and p95 <= 0.050 and o["open_watches"] <= 4
        out.append(
            [
                f"{big['jobs']} concurrent async waits: notice p95 ≤ 50 ms, a few watches",
                f"p95 {secs(p95)}, {o['open_watches']} watches{spent}",
                "**met**" if met else "**missed** (see Scale of waiting)",
            ]
        )
    if poll:
        p, o = poll["poll"], poll.get("ours") or {}
        if "idle_cpu_percent" in o:
            out.append(
                [
                    f"{poll['jobs']} concurrent waits: SDK-style async pollers vs ours, idle",
                    f"{p['idle_requests_per_second']:.0f} vs {o['idle_requests_per_second']:.1f} "
                    f"req/s; CPU {p['idle_cpu_percent']:.1f} % vs "
                    f"{o['idle_cpu_percent']:.1f} % of a core",
                    "no target",
                ]
            )
    return out


def section_submit(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, []
    sides = section["sides"]
    rows = []
    spreads: list[float] = []
    for i, c in enumerate(section["levels"]):
        row = [str(c)]
        for key in ("ours_sync", "ours_async", "ours_identity", "sdk"):
            levels = sides.get(key, {}).get("levels") or []
            if i >= len(levels):
                row.append("n/a")
                continue
            cell = f"{levels[i]['jobs_per_second']:.0f}/s"
            rounds = levels[i].get("rounds") or []
            if len(rounds) > 1:
                cell += f" ({min(rounds):.0f} to {max(rounds):.0f})"
                spreads.append(max(rounds) / max(min(rounds), 1e-9))
            row.append(cell)
        ratios = section["ratios"][str(c)]
        row += [
            times(ratios["async_over_sync"]),
            times(ratios["sync_over_sdk"]),
            times(ratios.get("identity_over_sdk")),
        ]
        rows.append(row)
    text = [
        f"{section['jobs_per_level']} TrainJobs per concurrency level and side, created by "
        "one process (ours: one client shared by the threads or tasks, explicit names, "
        "runtime looked up and one job submitted before the clock starts; the SDK: "
        "`train()` with its runtime object, a client per thread). The simulated controller "
        f"runs the created jobs meanwhile. Median of {section.get('rounds', 1)} round(s), "
        "the sides alternating from round to round.",
        "",
        table(
            [
                "concurrency",
                "ours sync",
                "ours async",
                "ours sync, identity",
                "SDK",
                "async / sync",
                "sync / SDK",
                "identity / SDK",
            ],
            rows,
        ),
    ]
    if spreads:
        text += [
            "",
            "In brackets: the slowest and fastest round. Rounds of the same side and "
            f"concurrency differ by up to {max(spreads):.1f}{TIMES} here: creation is bound by "
            "the test server and its simulated controller, which share two busy cores with "
            "everything else, so differences smaller than that are noise, not a ranking.",
        ]
    plot = plot_submit(out, section)
    if plot:
        text += ["", f"![submit throughput]({plot})"]
    top = str(section["levels"][-1])
    ratios = section["ratios"][top]
    summary = [
        [
            f"submit throughput at {top} concurrent: async / sync, sync / SDK, async / SDK",
            f"{times(ratios['async_over_sync'])}, {times(ratios['sync_over_sdk'])}, "
            f"{times(ratios['async_over_sdk'])}",
            "no target",
        ]
    ]
    summary += submit_identity_targets(section, "test server")
    return "\n".join(text), summary


def submit_identity_targets(section: JSON, where: str) -> list[list[str]]:
    """Issue 27's target: a submit with a fresh identity at least as fast as the SDK's
    ``train()`` at 1, 10 and 100 concurrent submitters."""
    got = [(c, section["ratios"][str(c)].get("identity_over_sdk")) for c in section["levels"]]
    if all(r is None for _, r in got):
        return []
    met = all(r is not None and r >= 1.0 for _, r in got)
    return [
        [
            f"submit with a fresh identity / SDK ({where}), at "
            + ", ".join(str(c) for c, _ in got)
            + " concurrent (target >= 1.0x each)",
            ", ".join(times(r) for _, r in got),
            verdict(met),
        ]
    ]


def _pulls(a: JSON) -> str:
    pulled = a.get("pulled") or {}
    if not pulled:
        return "no"
    text = ", ".join(f"yes: {n} `{h}` modules" for h, n in pulled.items())
    already = [h for h in pulled if h in (a.get("base_loaded") or [])]
    if already:
        text += f" (`{'`, `'.join(already)}` itself already loaded by the orchestrator)"
    return text


def section_imports(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    target = "Airflow operator module adds ≤ 50 ms (beyond `import airflow.sdk`)"
    broken = skipped(section)
    if broken:
        return broken, [[target, "n/a", "not measured"]]
    rows = []
    for a in section["adapters"]:
        status = a.get("status")
        module, _, attr = str(a["base"]).partition(":")
        base = f"`{module}` ({ms(a.get('base_ms'))})"
        if attr:
            base += f", then `{attr}` ({ms(a.get('lazy_ms'))})"
        if status == "measured":
            rows.append(
                [
                    a["adapter"],
                    f"`{a['module']}`",
                    base,
                    ms(a["ms"]),
                    ms(a.get("own_ms")) if attr else "—",
                    _pulls(a),
                    times(a.get("ratio_vs_sdk")),
                    verdict(a.get("target_met")),
                ]
            )
        else:
            why = {
                "placeholder": "not available (an empty placeholder so far)",
                "not available": "not available (no such module yet)",
            }.get(str(status), f"broke: {str(a.get('error', ''))[-200:]}")
            rows.append([a["adapter"], f"`{a['module']}`", base, why, "", "", "", ""])
    for key in ("sdk", "kubernetes", "core_client"):
        if key not in section["baselines"]:
            continue
        b = section["baselines"][key]
        label = {
            "sdk": "baseline: Kubeflow SDK",
            "kubernetes": "reference: kubernetes client",
            "core_client": "reference: our core client",
        }[key]
        if "ms" in b:
            rows.append([label, f"`{b['module']}`", "python", ms(b["ms"]), "", "", "", ""])
        else:
            reason = b.get("skipped") or str(b.get("error", "broke"))[-200:]
            rows.append([label, f"`{b.get('module', '')}`", "", reason, "", "", "", ""])
    text = [
        "Import time of each adapter's user-facing module in a fresh interpreter that has "
        "already imported its orchestrator — the orchestrator's own time, in brackets, is "
        f"not part of the figures — median of {section['runs']} run(s). *Adds*: beyond "
        "importing the orchestrator's module (the brief's definition). Airflow loads "
        "`BaseOperator` / `BaseTrigger` lazily, on first use, and any operator or trigger "
        "module pays for that; so does Prefect its `task` decorator, which any module of "
        "Prefect tasks pays for; *beyond the base class too* leaves that part out. *Pulls "
        "kubernetes*: modules of `kubernetes` / `kubernetes_asyncio` the import loaded "
        "(there should be none). *SDK / ours*: the Kubeflow SDK's `kubeflow.trainer` "
        "import (what any adapter built on the SDK adds at least) over ours. *≤ 50 ms*: "
        "the target of issue 27, every module's own cost beyond its orchestrator's base "
        "classes (the *beyond the base class too* figure; for KFP, whose `kfp.dsl` loads "
        "everything at once, the two are the same).",
        "",
        table(
            [
                "adapter",
                "module",
                "after importing",
                "adds",
                "beyond the base class too",
                "pulls kubernetes",
                "SDK / ours",
                "≤ 50 ms",
            ],
            rows,
        ),
    ]
    biggest = [
        f"`{a['module']}`: "
        + ", ".join(f"{c['module']} {ms(c['self_ms'])}" for c in a["contributors"])
        for a in section["adapters"]
        if a.get("contributors")
    ]
    if biggest:
        text += [
            "",
            "Largest own import times among the modules each import adds beyond its base "
            "(one `python -X importtime` run, which inflates them; what to make lazy first):",
            "",
            *[f"- {line}" for line in biggest],
        ]
    airflow: JSON = next((a for a in section["adapters"] if a["adapter"] == "airflow"), {})
    if airflow.get("unsettled_ms") is not None:
        text += [
            "",
            "Importing an orchestrator leaves a full garbage collection due, which falls on "
            "whatever allocates next; each probe runs `gc.collect()` after the orchestrator's "
            f"import and counts it as the orchestrator's ({ms(airflow.get('settle_ms'))} "
            "after Airflow). Left to fall on the operator module, it makes that import "
            f"{ms(airflow['unsettled_ms'])} (beyond `BaseOperator`), whatever the module "
            "does: a DAG file's own code pays the same.",
        ]
    if airflow.get("then_ms") is not None:
        text += [
            "",
            "Building the first `TrainJobOperator` from a dict spec takes "
            f"{ms(airflow['then_ms'])} after the import: it validates the spec when the DAG "
            "is parsed, so a bad spec is an import error naming the field, and that first "
            "validation loads the spec models the module import leaves out.",
        ]
    if airflow.get("status") == "measured":
        shown = ms(airflow["ms"])
        own_met = section.get("airflow_own_target_met")
        if own_met is not None:
            shown += (
                f" ({ms(airflow.get('own_ms'))} beyond `BaseOperator` too: target "
                f"{'met' if own_met else 'missed'} on that count)"
            )
    else:
        shown = "not available"
    summary = [[target, shown, verdict(section.get("airflow_target_met"))]]
    for a in section["adapters"]:
        if a.get("status") == "measured" and a["adapter"] != "airflow":
            summary.append(
                [
                    f"`{a['module']}` adds ≤ 50 ms beyond its orchestrator's base classes",
                    ms(a.get("own_ms")),
                    verdict(a.get("target_met")),
                ]
            )
    return "\n".join(text), summary


def section_local(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    broken = skipped(section)
    if broken:
        return broken, []
    ours, sdk = section["ours"], section["sdk"]
    rows = []
    if "seconds" in ours:
        rows.append(
            [
                "ours: `TrainerClient(LocalConfig(state_dir=...))`",
                secs(ours["seconds"]),
                "—",
                "—",
                f"median of {len(ours['samples'])}; returned {json.dumps(ours.get('result'))}",
            ]
        )
    else:
        rows.append(["ours", "n/a", "", "", ours.get("skipped") or str(ours.get("error"))[-300:]])
    if "seconds" in sdk:
        note = str(sdk.get("status", ""))
        if sdk.get("error"):
            note += f" ({str(sdk['error'])[-200:]})"
        rows.append(
            [
                "Kubeflow SDK: `LocalProcessBackendConfig()`",
                secs(sdk["seconds"]),
                secs(sdk.get("prepare_seconds")),
                secs(sdk.get("install_seconds")),
                note,
            ]
        )
    else:
        reason = sdk.get("skipped") or str(sdk.get("error"))[-300:]
        rows.append(["Kubeflow SDK", "n/a", "", "", reason])
    container = section.get("container") or {}
    if "seconds" in container:
        rows.append(
            [
                "ours: `TrainerClient(ContainerConfig(image=...))`",
                secs(container["seconds"]),
                "—",
                "—",
                f"median of {len(container['samples'])}; returned "
                f"{json.dumps(container.get('result'))}; image {container.get('image')}",
            ]
        )
    elif container:
        reason = container.get("skipped") or str(container.get("error"))[-300:]
        rows.append(["ours, container backend", "n/a", "", "", reason])
    text = [
        "End-to-end time of a trivial job (a function that returns a dict) from creating "
        "the client to `wait` returning, on this machine without a cluster. The SDK's local "
        "backend builds a venv per job, bootstraps pip, installs the runtime's `torch` "
        "(here `torch==2.13.0`, from this machine's wheel directory via `PIP_FIND_LINKS`, "
        "passed through the trainer's `env`: the SDK gives the job's shell no other "
        "environment) and runs the function under `torchrun`; its wait polls every 2 s. "
        "*Before the function*: client created to packages installed; *pip*: venv created "
        "to packages installed (pip bootstrap and install), from the time stamps of the "
        "job's log lines.",
        "",
        table(["backend", "end to end", "before the function", "pip", "note"], rows),
        "",
        f"SDK / ours: {times(section.get('ratio'))}; "
        f"without the SDK's pip time: {times(section.get('ratio_without_install'))}.",
        "",
        "The container backend runs the same job as a container of a Docker engine "
        "(`dockerd --bridge=none`, the host network; the image of "
        "`.ci/container-setup.sh`), with the `jax-distributed` runtime, whose launcher is "
        "plain `python` as the local run's is: the difference is the container (engine "
        "round trips, container start, log stream, removal). The Kubeflow SDK's "
        "`ContainerBackendConfig` is not run: it joins its containers through a bridge "
        "network, and this machine allows only loopback traffic. "
        f"Container / local (ours): {times(section.get('container_ratio'))}.",
    ]
    return "\n".join(text), [
        [
            "local backend: a trivial job end to end, SDK / ours",
            times(section.get("ratio")),
            "no target",
        ],
        [
            "container backend: a trivial job end to end, ours container / ours local",
            times(section.get("container_ratio")),
            "no target",
        ],
    ]


def section_namespace(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    from bench.namespace_report import section_namespace as render

    return render(section, out)


def section_real(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    from bench.real_report import section_real as render

    return render(section, out)


def section_realwait(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    from bench.realwait_report import section_realwait as render

    return render(section, out)


def section_gpu(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    from bench.gpu.report import section_gpu as render

    return render(section, out)


def section_triggerer(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    from bench.triggerer_report import section_triggerer as render

    return render(section, out)


SECTIONS: list[tuple[str, str, Callable[[JSON, Path], tuple[str, list[list[str]]]]]] = [
    ("latency", "Completion latency", section_latency),
    ("requests", "API requests per job", section_requests),
    ("scale", "Scale of waiting", section_scale),
    ("namespace", "Namespace size", section_namespace),
    ("submit", "Submit throughput", section_submit),
    ("imports", "Import cost", section_imports),
    ("local", "Local backend", section_local),
    ("real", "On the real control plane", section_real),
    ("realwait", "On the real control plane: waiting with its controllers", section_realwait),
    # Not run by `python -m bench`: `python -m bench.triggerer --record` (tens of minutes).
    ("triggerer", "Shared triggerer at 200 deferred tasks", section_triggerer),
    # Not run by `python -m bench`: bench/gpu/run.py on a GPU machine, then
    # `python -m bench.gpu.record gpu_bench.json`.
    ("gpu", "On a GPU", section_gpu),
]


def write_report(results: JSON, out: Path) -> Path:
    """Render ``BENCHMARKS.md`` (and the plots) under ``out``."""
    machine = results.get("machine", {})
    packages = machine.get("packages", {})
    sections = results.get("sections", {})
    body: list[str] = []
    targets: list[list[str]] = []
    for key, title, render in SECTIONS:
        section = sections.get(key)
        if section is None:
            continue
        text, section_targets = render(section, out)
        stamp = f"_Measured {section.get('ran_at', '?')} in {section.get('seconds', '?')} s"
        if section.get("command") not in (None, results.get("command")):
            stamp += f", re-run alone with `{section['command']}`"
        stamp += " (quick mode: small sizes)._" if section.get("quick") else "._"
        if section.get("not_run"):
            stamp = f"_Not measured yet; run `{section.get('command')}`._"
        body += [f"## {title}", "", stamp, "", text, ""]
        targets += section_targets
    load = machine.get("load_at_start") or []
    header = [
        "# Benchmarks",
        "",
        f"> **Generated** by `{results.get('command', 'uv run python -m bench')}` on "
        f"{machine.get('date', '?')} — do not edit; run the command again to refresh "
        "(`--quick` for a fast check, `--only NAME` for one section).",
        "",
        f"Machine: {machine.get('cores', '?')} cores ({machine.get('cpu', '?')}), "
        f"{machine.get('platform', '?')}, Python {machine.get('python', '?')}. "
        + "Packages: "
        + ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        + f". Baseline: Kubeflow SDK {machine.get('sdk') or 'not available'}, in its own venv.",
        "",
        f"Load average when the run started: {' / '.join(str(x) for x in load)} (1 / 5 / 15 "
        "min). The machine was shared with other work while this ran, so absolute times "
        "are noisy; every comparison below is a ratio or a count taken side by side, in "
        "the same run, on the same machine, against the same server, and absolute times "
        "appear only next to their baseline.",
        "",
        "Setup: the Kubernetes-API test server of `kf_trainer_core.testing` (real HTTP on "
        "loopback, apiserver semantics, the upstream CRDs, a simulated Trainer controller) "
        "runs in the benchmark's process; each side under test runs in a process of its "
        "own, talking to it through a kubeconfig — ours with this environment "
        "(`bench/driver_ours.py`), the Kubeflow SDK from a venv that the benchmark builds "
        "(`bench/driver_sdk.py`). Raw figures: [`bench/results.json`](bench/results.json).",
        "",
        "## Summary",
        "",
        "The brief's targets, with their verdicts, and the headline figure of each other "
        "section (details below).",
        "",
        table(["figure", "measured", "verdict"], targets) if targets else "Nothing measured.",
        "",
    ]
    text = "\n".join(header + body).rstrip() + "\n"
    path = out / "BENCHMARKS.md"
    path.write_text(text)
    return path


def rerender(out: Path = REPO) -> Path:
    """Render again from ``out/bench/results.json``."""
    results = json.loads((out / "bench" / "results.json").read_text())
    return write_report(results, out)
