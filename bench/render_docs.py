"""Regenerate docs/benchmarks.md and its plots (docs/img/*.png) from bench/results/*.json.

Every benchmark writes its JSON under bench/results/; this script only reads them, so
the page always shows the numbers the scripts measured, never hand-copied ones.

    .venv/bin/python bench/render_docs.py          # or: make bench-docs
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import render_gpu  # noqa: E402
from render_scale import (  # noqa: E402
    NOTES as SCALE_VERDICT_NOTES,
    TEXT as SCALE_VERDICT_TEXT,  # noqa: E402
    plot_scale_verdict,
    scale_verdict_section,
    split16_markdown,
)

from embedlab.jsonio import write_bytes_atomic, write_text_atomic  # noqa: E402
from embedlab.reports.index import replace_appendix  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs"
IMG = DOCS / "img"
DPI = 80  # the PNGs are committed: small files that still read well

PATH_LABELS = {
    "direct": "(a) direct to one worker",
    "embedlab": "(b) embedlab frontend",
    "dynamo": "(c) Dynamo frontend",
    "litellm": "(d) LiteLLM proxy",
    "smg": "(e) smg 1.13",
    "haproxy": "(f) HAProxy 2.6",
    "nginx": "(g) nginx 1.22",
}
COLORS = {
    "direct": "#7f7f7f",
    "embedlab": "#1f77b4",
    "dynamo": "#2ca02c",
    "litellm": "#d62728",
    "smg": "#9467bd",
    "haproxy": "#ff7f0e",
    "nginx": "#17becf",
}


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def machine_line(m: dict[str, Any], load: Any = None) -> str:
    parts = [
        f"{m.get('cores')} cores ({m.get('cpu') or 'CPU'})",
        f"{m.get('memory_gib')} GiB",
        f"Linux {m.get('kernel')}",
        f"Python {m.get('python')}",
    ]
    if m.get("hey"):
        parts.append(f"hey {m['hey']}")
    line = ", ".join(parts) + f"; run {m.get('date', '')}."
    if load:
        line += " " + load_summary(load)
    return line


def load_summary(load: Any) -> str:
    """What the other work on the shared cores looked like before each block, and at the end."""
    values = list(load.values()) if isinstance(load, dict) else list(load)
    blocks = [v for v in values if isinstance(v, dict) and "waited_s" in v]
    end = [v for v in values if isinstance(v, dict) and "waited_s" not in v and "load_1m" in v]
    text = (
        "Before each block of measurements: other processes used "
        + ", ".join(f"{v.get('foreign_cores', float('nan')):.2f}" for v in blocks)
        + " cores, 1-minute load average "
        + ", ".join(f"{v['load_1m']:.2f}" for v in blocks)
    )
    if any(not v.get("quiet", True) for v in blocks):
        text += " (some blocks ran without a quiet machine after 10 minutes of waiting)"
    if end:
        text += f"; load average at the end {end[-1]['load_1m']:.2f}"
    return text + ". Other engineers' work shares these cores."


# -- router overhead --------------------------------------------------------------------


def router_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    rows = data["rows"]
    concurrencies = data["setup"]["concurrency"]
    paths = [p for p in PATH_LABELS if any(r["path"] == p for r in rows)]

    def cell(path: str, c: int) -> dict[str, Any] | None:
        return next((r for r in rows if r["path"] == path and r["concurrency"] == c), None)

    body = [
        table(
            ["path", "c", "req/s", "p50 ms", "p99 ms", "frontend CPU ms/request", "failed"],
            [
                [
                    PATH_LABELS[r["path"]],
                    r["concurrency"],
                    num(r["rps"]),
                    num(r["p50_ms"], 2),
                    num(r["p99_ms"], 2),
                    num(r["cpu_ms_per_request"], 3) if "cpu_ms_per_request" in r else "-",
                    r["failed"],
                ]
                for c in concurrencies
                for p in paths
                if (r := cell(p, c))
            ],
        )
    ]
    body.append(
        "\nRatios of throughput, measured side by side (b = embedlab, a = direct, c = Dynamo, d = LiteLLM):\n"
    )
    body.append(
        table(
            ["concurrency", "b/a", "b/c", "b/d", "p50 added over direct, ms"],
            [
                [
                    r["concurrency"],
                    num(r.get("b_over_a", float("nan")), 2),
                    num(r.get("b_over_c", float("nan")), 2),
                    num(r.get("b_over_d", float("nan")), 1),
                    num(r.get("p50_added_ms", float("nan")), 2),
                ]
                for r in data["ratios"]
            ],
        )
    )
    fronted = [
        p for p in paths if p != "direct" and any(p in r.get("over_direct", {}) for r in data["ratios"])
    ]
    if fronted:
        body.append("\nEach path's throughput over direct's, and the p50 it adds, in the same run:\n")
        body.append(
            table(
                ["path", *(f"c={r['concurrency']}" for r in data["ratios"])],
                [
                    [
                        PATH_LABELS[p],
                        *(
                            f"{num(r['over_direct'][p], 2)}x, {r['p50_added_over_direct_ms'][p]:+.2f} ms"
                            if p in r.get("over_direct", {})
                            else "-"
                            for r in data["ratios"]
                        ),
                    ]
                    for p in fronted
                ],
            )
        )
    targets = []
    t = data["targets"]
    if "b_over_c_at_top" in t:
        targets.append(
            (
                f"router: embedlab / Dynamo throughput at c={max(concurrencies)}",
                ">= 0.5x",
                f"{t['b_over_c_at_top']['value']:.2f}x, {met(t['b_over_c_at_top']['met'])}",
            )
        )
    if "b_over_d_at_top" in t:
        targets.append(
            (
                f"router: embedlab / LiteLLM throughput at c={max(concurrencies)}",
                ">= 10x",
                f"{t['b_over_d_at_top']['value']:.1f}x, {met(t['b_over_d_at_top']['met'])}",
            )
        )
    if "p50_added_ms_at_low" in t:
        targets.append(
            (
                f"router: p50 added over direct at c={min(concurrencies)}",
                "< 1 ms",
                f"{t['p50_added_ms_at_low']['value']:.2f} ms, {met(t['p50_added_ms_at_low']['met'])}",
            )
        )
    plot_router(data, paths)
    return "\n".join(body), targets


def plot_router(data: dict[str, Any], paths: list[str]) -> None:
    rows = data["rows"]
    concurrencies = data["setup"]["concurrency"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(paths)
    for i, path in enumerate(paths):
        values = [
            next(r["rps"] for r in rows if r["path"] == path and r["concurrency"] == c) for c in concurrencies
        ]
        xs = [j + (i - (len(paths) - 1) / 2) * width for j in range(len(concurrencies))]
        left.bar(xs, values, width, label=PATH_LABELS[path], color=COLORS[path])
    left.set_xticks(range(len(concurrencies)), [f"c={c}" for c in concurrencies])
    left.set_yscale("log")
    left.set_ylabel("requests/s (log)")
    left.set_title("Throughput, two hash workers")
    left.set_ylim(bottom=1)  # bars on a log axis need a fixed floor to compare by height
    cpu_paths = [p for p in paths if any("cpu_ms_per_request" in r and r["path"] == p for r in rows)]
    for i, path in enumerate(cpu_paths):
        values = [
            next(r.get("cpu_ms_per_request", 0) for r in rows if r["path"] == path and r["concurrency"] == c)
            for c in concurrencies
        ]
        w = 0.8 / len(cpu_paths)
        xs = [j + (i - (len(cpu_paths) - 1) / 2) * w for j in range(len(concurrencies))]
        right.bar(xs, values, w, label=PATH_LABELS[path], color=COLORS[path])
    right.set_xticks(range(len(concurrencies)), [f"c={c}" for c in concurrencies])
    right.set_yscale("log")
    right.set_ylim(bottom=0.03)  # nginx spends under 0.1 ms
    right.set_ylabel("router CPU ms per request (log)")
    right.set_title("Router CPU per request")
    handles, labels = left.get_legend_handles_labels()
    rows_of_legend = 1 if len(paths) <= 4 else 2
    fig.legend(
        handles, labels, loc="lower center", ncol=-(-len(paths) // rows_of_legend), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.07 * rows_of_legend, 1, 1))
    save(fig, "router_overhead.png")


# -- scale ------------------------------------------------------------------------------


def scale_label(setting: str) -> str:
    kind, n = setting.split("=")
    return f"{n} workers, 1 model" if kind == "workers" else f"{n} models, 1 worker each"


def scale_section(
    data: dict[str, Any], *, image: str = "scale.png"
) -> tuple[str, list[tuple[str, str, str]]]:
    rows = data["rows"]
    cores = data.get("machine", {}).get("cores")
    body = table(
        [
            "pool",
            "req/s",
            "vs 2 workers",
            "p50 ms",
            "p99 ms",
            "frontend CPU ms/req",
            "workers CPU ms/req",
            "worker switches/req",
            "routing decision, us",
            "control: direct req/s",
            "direct vs 2 workers",
            "direct: workers CPU ms/req",
        ],
        [
            [
                scale_label(r["setting"]),
                num(r["rps"]),
                f"{r.get('vs_2_workers', float('nan')):.2f}",
                num(r["p50_ms"], 1),
                num(r["p99_ms"], 1),
                num(r["frontend_cpu_ms_per_request"], 3),
                num(r["workers_cpu_ms_per_request"], 3),
                num(r["worker_switches_per_request"], 2),
                num(r["routing_us"], 2),
                num(r["direct_rps"]),
                f"{r.get('direct_vs_2_workers', float('nan')):.2f}",
                num(r["direct_workers_cpu_ms_per_request"], 3),
            ]
            for r in rows
        ],
    )
    targets = [
        (
            f"scale ({cores} cores): throughput with {scale_label(k)} vs 2 workers",
            ">= 0.90",
            f"{v['value']:.2f}, {met(v['met'])}",
        )
        for k, v in data["targets"].items()
        if isinstance(v, dict)
    ]
    plot_scale(data, image)
    return body, targets


def plot_scale(data: dict[str, Any], image: str) -> None:
    rows = data["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    labels = [r["setting"].replace("workers=", "").replace("models=16", "16 models") for r in rows]
    width = 0.4
    xs = list(range(len(rows)))
    left.bar(
        [x - width / 2 for x in xs],
        [r["rps"] for r in rows],
        width,
        color="#1f77b4",
        label="through the frontend",
    )
    left.bar(
        [x + width / 2 for x in xs],
        [r["direct_rps"] for r in rows],
        width,
        color="#7f7f7f",
        label="direct to the workers (control)",
    )
    base = next((r["rps"] for r in rows if r["setting"] == "workers=2"), None)
    if base:
        left.axhline(
            0.9 * base, color="#d62728", linestyle="--", linewidth=1, label="90% of 2 workers, frontend"
        )
    left.legend(fontsize=7, loc="upper right")
    left.set_xticks(xs, labels)
    left.set_xlabel("hash workers")
    left.set_ylabel("requests/s at c=32")
    left.set_title("Throughput as the pool grows")
    right.bar(
        [x - width / 2 for x in xs],
        [r["frontend_cpu_ms_per_request"] for r in rows],
        width,
        label="frontend",
        color="#1f77b4",
    )
    right.bar(
        [x + width / 2 for x in xs],
        [r["workers_cpu_ms_per_request"] for r in rows],
        width,
        label="all workers",
        color="#ff7f0e",
    )
    right.set_xticks(xs, labels)
    right.set_ylabel("CPU ms per request")
    right.set_title("Where the CPU goes")
    right.legend(fontsize=8)
    fig.tight_layout()
    save(fig, image)


# -- time to verdict ----------------------------------------------------------------------


def verdict_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    rows = data["rows"]
    body = table(
        [
            "scenario",
            "stack",
            "engine",
            "passed",
            "wall s",
            "import s",
            "launch + ready s",
            "burst + check s",
            "teardown s",
        ],
        [
            [
                r["scenario"],
                r["stack"],
                r["engine"],
                "yes" if r["passed"] else "**no**",
                num(r["wall"], 2),
                num(r["import"], 2),
                num(r["launch_and_ready"], 2),
                num(r["burst_and_check"], 2),
                num(r["teardown"], 2),
            ]
            for r in rows
        ],
        "llll" + "r" * 5,
    )
    both = data["both_hash_embedded_s"]
    found = [
        ("time to verdict: both hash scenarios, embedded stack", "< 5 s", f"{both:.2f} s, {met(both < 5)}")
    ]
    quiet = data.get("quiet_windows") or []
    if quiet:
        body += (
            "\n\n**The quiet windows' cost.** Before each burst's first request and after its last response,"
            " the check reads every counter over a quiet window with none of its own requests in flight"
            " (traffic embedlab did not send shows there). One same-model burst and its check on a warm"
            " deployment, with the windows and without, in turns on the same inputs (medians"
            f"{', run ' + data['quiet_windows_machine']['date'] if 'quiet_windows_machine' in data else ''}):\n\n"
        )
        body += table(
            ["stack", "burst", "windows", "with s", "without s", "cost per burst s", "verdicts"],
            [
                [
                    r["stack"],
                    str(r["requests"]),
                    f"2 × {r['window_s']:g} s",
                    num(r["with_windows_s"], 3),
                    num(r["without_windows_s"], 3),
                    num(r["cost_s"], 3),
                    ", ".join(r["verdicts"]),
                ]
                for r in quiet
            ],
            "lllrrrl",
        )
        worst = max(r["cost_s"] for r in quiet)
        found.append(
            ("quiet windows' cost per burst", "≤ about 1 s", f"{worst:.2f} s at most, {met(worst <= 1.0)}")
        )
    return body, found


# -- lease TTL sweep ------------------------------------------------------------------------


def ttl_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    rows = []
    for point in data["summary"]:
        span = point["out_of_dispatch_s_range"]
        rows.append(
            [
                f"{point['ttl_s']:g}",
                num(point["out_of_dispatch_s_median"], 1)
                if point["out_of_dispatch_s_median"] is not None
                else "never",
                f"{span[0]:.1f} to {span[1]:.1f}" if span else "-",
                num(point["failed_median"], 0),
                str(point["never_left"]),
            ]
        )
    body = table(
        [
            "lease TTL s",
            "SIGKILL to out of dispatch, s (median)",
            "range, s",
            "failed requests (median)",
            "runs it never left",
        ],
        rows,
        "rrrrr",
    )
    plot_ttl(data)
    return body, []


def plot_ttl(data: dict[str, Any]) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for run in data["runs"]:
        left.plot(
            [p["ttl_s"] for p in run], [p["out_of_dispatch_s"] for p in run], "o", color="#1f77b4", alpha=0.5
        )
    summary = data["summary"]
    ttls = [p["ttl_s"] for p in summary]
    left.plot(
        ttls,
        [p["out_of_dispatch_s_median"] for p in summary],
        "-",
        color="#1f77b4",
        label="median of the runs",
    )
    span = [0, max(ttls) * 1.1]
    left.plot(span, span, "--", color="#888888", label="one TTL")
    left.set_xlabel("lease TTL (s)")
    left.set_ylabel("SIGKILL to out of dispatch (s)")
    left.legend(fontsize=8)
    right.bar([f"{t:g}" for t in ttls], [p["failed_median"] for p in summary], color="#d62728")
    right.set_xlabel("lease TTL (s)")
    right.set_ylabel("failed requests (median)")
    fig.suptitle(f"Dynamo 1.6.1 on etcd, {data['hosts']} hosts: a SIGKILLed worker against the lease TTL")
    fig.tight_layout()
    save(fig, "ttl_sweep.png")


# -- GPU --------------------------------------------------------------------------------


def gpu_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    s = data["summary"]
    pf = data["plain_forward"]
    parts = ["**Plain batched forward (the reference), one H200, same call:**\n"]
    parts.append(
        table(
            ["batch x tokens", "forwards", "tokens/s"],
            [[f"{pf['batch']} x {pf['tokens']}", pf["forwards"], num(pf["tokens_per_s"])]],
        )
    )
    parts.append(
        "\n**Served throughput, two workers (one per GPU) behind the embedded frontend, 128-token inputs:**\n"
    )
    parts.append(
        table(
            [
                "concurrency",
                "inputs/request",
                "requests",
                "req/s",
                "tokens/s",
                "per GPU vs plain forward",
                "p50 ms",
                "p99 ms",
            ],
            [
                [
                    r["concurrency"],
                    r["inputs_per_request"],
                    r["requests"],
                    num(r["rps"], 1),
                    num(r["tokens_per_s"]),
                    f"{r['tokens_per_s'] / 2 / pf['tokens_per_s']:.0%}",
                    num(r["p50_ms"], 1),
                    num(r["p99_ms"], 1),
                ]
                for r in data["load_two_workers"]
            ],
        )
    )
    parts.append("\n**One worker against two, at the best setting:**\n")
    best_two = max(data["load_two_workers"], key=lambda r: r["tokens_per_s"])
    parts.append(
        table(
            ["workers", "concurrency", "inputs/request", "tokens/s", "p50 ms"],
            [
                [1, r["concurrency"], r["inputs_per_request"], num(r["tokens_per_s"]), num(r["p50_ms"], 1)]
                for r in data["load_one_worker"]
            ]
            + [
                [
                    2,
                    best_two["concurrency"],
                    best_two["inputs_per_request"],
                    num(best_two["tokens_per_s"]),
                    num(best_two["p50_ms"], 1),
                ]
            ],
        )
    )
    parts.append(
        f"\nTwo workers over one: **{s['two_over_one']:.2f}x**. "
        f"Latency at concurrency 1 (one 128-token input): **p50 {s['p50_ms_at_c1']:.1f} ms**. "
        f"Both scenarios passed on the GPUs: {'yes' if s['scenarios_passed'] else '**no**'}; "
        f"served vector against a direct forward: cosine {s['served_vs_direct_cosine']:.5f}."
    )
    targets = [
        (
            "GPU: served tokens/s per GPU vs plain forward",
            ">= 85%",
            f"{s['served_per_gpu_over_plain']:.0%}, {met(s['served_per_gpu_over_plain'] >= 0.85)}",
        ),
        ("GPU: two workers vs one", ">= 1.8x", f"{s['two_over_one']:.2f}x, {met(s['two_over_one'] >= 1.8)}"),
        ("GPU: p50 at concurrency 1", "reported", f"{s['p50_ms_at_c1']:.1f} ms"),
    ]
    plot_gpu(data)
    return "\n".join(parts), targets


def plot_gpu(data: dict[str, Any]) -> None:
    rows = data["load_two_workers"]
    pf = data["plain_forward"]["tokens_per_s"]
    fig, ax = plt.subplots(figsize=(10, 3.4))
    labels = [f"c={r['concurrency']}\nx{r['inputs_per_request']}" for r in rows]
    ax.bar(labels, [r["tokens_per_s"] / 1e3 for r in rows], color="#1f77b4", label="two workers, served")
    ax.axhline(
        2 * pf / 1e3, color="#2ca02c", linestyle="--", linewidth=1, label="2 x plain forward (batch 64 x 128)"
    )
    ax.axhline(2 * 0.85 * pf / 1e3, color="#d62728", linestyle=":", linewidth=1, label="85% target")
    one = max(data["load_one_worker"], key=lambda r: r["tokens_per_s"])
    ax.axhline(
        one["tokens_per_s"] / 1e3,
        color="#ff7f0e",
        linestyle="-.",
        linewidth=1,
        label="one worker, best served",
    )
    ax.set_ylabel("thousand tokens/s")
    ax.set_xlabel("concurrency and inputs per request (128 tokens each)")
    ax.set_title("Qwen3-Embedding-0.6B shape, bf16, 2x H200, embedded stack")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save(fig, "gpu_serving.png")


def gpu_short_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    """Issue 33's run, beside the same bench before the fix and the run the issue was filed against."""
    return render_gpu.gpu_short_section(
        data,
        before=load("gpu_short_inputs_gc_before"),
        landed=load("gpu_short_inputs_landed"),
        previous=load("gpu_short_inputs_previous"),
        diagnosed=load("gpu_diagnose_before"),
        last_token=load("gpu_last_token"),
        repeats=[r for r in (load("gpu_short_inputs_repeat1"), load("gpu_short_inputs_repeat2")) if r],
        table=table,
        met=met,
        plot=partial(render_gpu.plot_gpu_short, plt=plt, save=save),
    )


def frontend_scale_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    rows = data["rows"]
    body = [
        table(
            [
                "frontend processes",
                "req/s",
                "vs 1 process",
                "p50 ms",
                "p99 ms",
                "frontend CPU ms/req",
                "workers CPU ms/req",
                "machine busy",
                "control: direct req/s",
            ],
            [
                [
                    r["frontend_processes"],
                    num(r["rps"]),
                    f"{r['vs_1_process']:.2f}",
                    num(r["p50_ms"], 1),
                    num(r["p99_ms"], 1),
                    num(r["frontend_cpu_ms_per_request"], 3),
                    num(r["workers_cpu_ms_per_request"], 3),
                    f"{r['machine_busy']:.0%}",
                    num(r["direct_rps"]),
                ]
                for r in rows
            ],
        )
    ]
    prop = [(r["frontend_processes"], p) for r in rows for p in r.get("propagation", [])]
    if prop:
        body.append(
            "\n**How long a table change takes to reach every routing process**, under the load above: worker 0 "
            "drained and resumed every 0.2 s while it ran; the owner's histogram of acknowledgements "
            "(`embedlab_frontend_table_propagation_seconds`, bucket bounds), and the wall time of each drain and "
            "resume call, which returns only once every process has the change:\n"
        )
        body.append(
            table(
                [
                    "processes",
                    "run",
                    "acks",
                    "mean ms",
                    "p50 <= ms",
                    "p99 <= ms",
                    "max <= ms",
                    "drain call max ms",
                    "resume call max ms",
                ],
                [
                    [
                        n,
                        i + 1,
                        int(p["acks"]),
                        num(p["mean_ms"], 1),
                        num(p["p50_le_ms"], 1),
                        num(p["p99_le_ms"], 0),
                        num(p["max_le_ms"], 0),
                        num(max(p["drain_call_ms"], default=0), 1),
                        num(max(p["resume_call_ms"], default=0), 1),
                    ]
                    for i, (n, p) in enumerate(prop)
                ],
            )
        )
    target = data["targets"].get("frontend=4")
    found = []
    if target:
        found.append(
            (
                "frontend (16 cores): 4 processes vs 1, in front of 16 hash workers",
                ">= 3.0x",
                f"{target['value']:.2f}, {met(target['met'])}",
            )
        )
    return "\n".join(body), found


def save(fig: Any, name: str) -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    image = BytesIO()  # rendered whole, then renamed into place: never half a PNG in docs/img
    fig.savefig(image, dpi=DPI, format="png")
    write_bytes_atomic(IMG / name, image.getvalue())
    plt.close(fig)


# -- the page ---------------------------------------------------------------------------

INTRO = """# Benchmarks

Generated by `bench/render_docs.py` from `bench/results/*.json`; do not edit by hand.
Every CPU figure that compares two things is a ratio measured side by side in one run,
on the same machine, under the same load. Benchmarks print their results; they are not
timed tests, and nothing in the test suite depends on a machine's speed.

**From a fresh clone**, each benchmark is one command (Python 3.11, Debian/Ubuntu, root
for `apt-get install hey` where it is missing):

| benchmark | command | writes |
|---|---|---|
| router overhead | `make bench-router` (= `make bench` then `.venv/bin/python bench/router_overhead.py`) | `bench/results/router_overhead.json` |
| scale | `make bench-scale` (= `make bench` then `.venv/bin/python bench/scale.py`) | `bench/results/scale.json` |
| time to verdict | `make bench-verdict` (= `make bench` then `.venv/bin/python bench/time_to_verdict.py`) | `bench/results/time_to_verdict.json` |
| time to verdict, 2 to 64 workers; 16-replica splits | `make bench` then `.venv/bin/python bench/scale_verdict.py --mixed` (root for the 4-host rows) | `bench/results/scale_verdict.json` |
| lease TTL sweep | `make bench-ttl` (= `make bench` then `.venv/bin/python bench/ttl_sweep.py`; root) | `bench/results/ttl_sweep.json` |
| GPU short inputs | on an H200 machine: `python bench/gpu_serving.py --api-also 8 --out bench/results/gpu_short_inputs.json` | `bench/results/gpu_short_inputs.json` |
| frontend processes, 16 cores | on the H200 machine: `python bench/scale.py --settings frontend=1,frontend=2,frontend=4 --requests 40000 --concurrency 256 --encoding base64 --max-load 1000 --max-foreign 16 --json bench/results/scale_frontend_16cores.json` | `bench/results/scale_frontend_16cores.json` |
| GPU serving (two GPUs, before issue 15) | `bench/gpu_serving.py` as of commit dc86faf, on a 2-GPU machine | `bench/results/gpu_h200x2.json` |
| verification power | `.venv/bin/python bench/verification_power.py` | see [verification.md](verification.md) |
| this page and its plots | `make bench-docs` (= `.venv/bin/python bench/render_docs.py`) | `docs/benchmarks.md`, `docs/img/*.png` |

`make bench` builds `.venv/` with the Dynamo runtime (the peer frontend), `.routers/litellm/`
with the LiteLLM proxy (`litellm[proxy]==1.108.7`, the pins of its stack class, in a venv of its own
so that its pins never touch the workbench's), and installs `hey` from Debian, the load
generator: one Go process drives thousands of requests per second, where a Python client
tops out near 1,000 and would measure itself.

**Noise.** The CPU benchmarks run on 2 shared cores. Before each block of measurements
they wait (up to 10 minutes, polling every 30 s) for the 1-minute load average to fall
below 1.5, and record the load they saw in the JSON. Paths and settings take turns in a
rotated order, and each figure is the median of 3 runs.
"""


def main() -> int:
    sections: list[str] = [INTRO]
    targets: list[tuple[str, str, str]] = []
    parts: list[tuple[str, str, Callable[[dict[str, Any]], tuple[str, list[tuple[str, str, str]]]], str]] = [
        (
            "router_overhead",
            "Router overhead: embedlab against direct, Dynamo, LiteLLM, smg, HAProxy and nginx",
            router_section,
            ROUTER_TEXT,
        ),
        ("scale", "Scale: 2 to 16 workers, and 16 models", scale_section, SCALE_TEXT),
        (
            "scale_h200x1_16cores",
            "Scale on 16 cores: a core per worker",
            partial(scale_section, image="scale_16cores.png"),
            SCALE_16_TEXT,
        ),
        (
            "scale_frontend_16cores",
            "Frontend processes on 16 cores",
            frontend_scale_section,
            FRONTEND_SCALE_TEXT,
        ),
        ("time_to_verdict", "Time to verdict", verdict_section, VERDICT_TEXT),
        (
            "scale_verdict",
            "Time to verdict and scrape time, 2 to 64 workers",
            partial(
                scale_verdict_section,
                table=table,
                met=met,
                plot=partial(plot_scale_verdict, plt=plt, save=save),
            ),
            SCALE_VERDICT_TEXT,
        ),
        ("ttl_sweep", "Lease TTL against time out of dispatch, on etcd across hosts", ttl_section, TTL_TEXT),
        (
            "gpu_short_inputs",
            "GPU serving on short inputs: one H200, Qwen3-Embedding-0.6B shape",
            gpu_short_section,
            GPU_SHORT_TEXT,
        ),
        ("gpu_h200x2", "GPU serving: two H200s, Qwen3-Embedding-0.6B shape", gpu_section, GPU_TEXT),
    ]
    body: list[str] = []
    for name, title, render, text in parts:
        data = load(name)
        if data is None:
            body.append(f"## {title}\n\nNo results yet: `bench/results/{name}.json` is missing.\n")
            continue
        rendered, found = render(data)
        targets += found
        machine = data.get("machine", {})
        if "gpus" in machine:
            kind = "nvidia-h200" if len(machine["gpus"]) == 1 else f"nvidia-h200-x{len(machine['gpus'])}"
            software = (
                f", torch {machine['torch']}, transformers {machine['transformers']}"
                if "torch" in machine
                else ""
            )
            where = f"{len(machine['gpus'])}x {machine['gpus'][0]}, {machine['cpus']} CPU cores, Python {machine['python']}{software} (the device machine, kind `{kind}`)."
        elif str(machine.get("kernel", "")).endswith("-gpu"):
            where = (
                f"{machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, Python {machine['python']}; "
                f"run {machine['date']} (the device machine, kind `nvidia-h200`, held by this run alone)."
            )
        else:
            where = machine_line(machine, data.get("load"))
        command = data.get("command") or DEFAULT_COMMANDS.get(name, "")
        section = [f"## {title}\n", f"**Machine:** {where}\n"]
        if command:
            section.append(f"**Reproduce:** `{command}`\n")
        section.append(text.strip() + "\n")
        section.append(rendered + "\n")
        img = {
            "router_overhead": "router_overhead.png",
            "scale": "scale.png",
            "scale_h200x1_16cores": "scale_16cores.png",
            "gpu_short_inputs": "gpu_short_inputs.png",
            "gpu_h200x2": "gpu_serving.png",
            "ttl_sweep": "ttl_sweep.png",
            "scale_verdict": "scale_verdict.png",
        }.get(name)
        if img:
            section.append(f"![{title}](img/{img})\n")
        notes = NOTES.get(name)
        if notes:
            section.append(notes.strip() + "\n")
        if name in NUMBERS:
            section.append(NUMBERS[name](data).strip() + "\n")
        body.append("\n".join(section))
    sections.append("## Targets\n\n" + table(["target", "goal", "measured"], targets, "lll") + "\n")
    sections += body
    sections.append(VERIFICATION_TEXT)
    sections.append(CODE_FIGURES_TEXT)
    DOCS.mkdir(exist_ok=True)
    write_text_atomic(DOCS / "benchmarks.md", "\n".join(sections).rstrip() + "\n")
    write_conformance_split()
    print(f"wrote {DOCS / 'benchmarks.md'} and {len(list(IMG.glob('*.png')))} plots in {IMG}")
    return 0


ROUTER_TEXT = """
Two hash workers on loopback (the hash engine answers in microseconds, so the router is
what is measured), one short input per request, 2,000 requests per run, keep-alive.
The paths run in one process tree at once: (a) straight to one worker's request
plane, (b) the embedlab frontend in front of both, (c) the real `dynamo.frontend` (1.6.1)
in front of two embedlab workers on the Dynamo runtime, (d) the LiteLLM proxy
(`--num_workers 1`, `simple-shuffle` over both workers' request planes under one
`model_name`, `LITELLM_LOCAL_MODEL_COST_MAP=True`, a master key), and the `smg`, `haproxy`
and `nginx` stacks, each in front of two hash workers of its own: (e) smg 1.13
(`round_robin`, `--log-level warn`: at its default it logs two lines per request), (f)
HAProxy 2.6 (`roundrobin`, the body read for its `model` with 256 KiB buffers, L7
retries on), (g) nginx 1.22 (round-robin, one worker process, upstream keep-alive). CPU per request is the
utime + stime delta of the router's process group over the run, divided by its requests:
on 2 cores shared with the load generator and the workers it is the most robust figure.
"""

SCALE_TEXT = """
The embedded frontend with 2, 4, 8 and 16 hash workers of one model, and 16 models of
one worker each. Load: 16 `hey` processes at concurrency 2 each (32 in all), 4,000
requests per run, pooled; to the frontend they spread over the models, and in the control
run, straight to the same workers with no frontend, over the workers. Every setting thus
sees the same client, and the control tells what the pool costs without the frontend.
Each setting is launched afresh for each of 3 runs, in rotated order. "Routing decision"
is the in-process cost of one registry lookup plus one weighted-random pick at that pool
size, timed apart from any I/O; "worker switches" are the workers' context switches per
request, from /proc.
"""

SCALE_16_TEXT = """
The same script on the device machine (kind `nvidia-h200`: 16 CPU cores, held by this
run alone; the GPU is not used), `hey` copied there with the checkout. Here every worker
can have a core of its own, so what is left to measure is the frontend. Each single hash
worker answers some 1,700 to 2,000 requests/s on one core, so 2 workers are the limit at
2 (through the frontend and direct alike); from 4 workers on, the one frontend process is
the limit, and it holds its throughput from 4 to 16 workers and with 16 models.
"""

TTL_TEXT = """
Dynamo 1.6.1 with etcd discovery, the frontend and etcd on host 0 and one hash worker on
each of two other hosts (network namespaces), steady traffic at 20 requests/s. At each
lease TTL a fresh deployment starts, worker 1 is SIGKILLed 2 s into the traffic, and the
frontend's `/health` is read every 0.25 s until the worker is gone from it. The expected
relation is about one TTL: the dead worker's lease has to run out. What Dynamo does is
reported, not asserted (the `lease-ttl-sweep` scenario's verdict is `reported`).
"""

VERDICT_TEXT = """
Wall time from nothing to a verdict, cold, each run in a fresh interpreter: imports,
launch and readiness (event-driven, no fixed sleeps), the scenario's bursts and check,
teardown. Median of 3 runs. `dynamo-etcd-3hosts` is Dynamo with etcd discovery and its two
workers on two other hosts (network namespaces): its launch includes etcd's start and the
namespaces, its teardown their deletion.
"""

GPU_SHORT_TEXT = render_gpu.TEXT

FRONTEND_SCALE_TEXT = """
`bench/scale.py` on the device machine's 16 cores (kind `nvidia-h200`, the GPU unused): 16
hash workers of one model behind a frontend of 1, 2 and 4 routing processes
(`--processes N`). Load: 16 `hey` processes at concurrency 16 each (256 in all), 40,000
requests per run, base64 answers (less JSON for every process to write and copy); the
control run sends the same load straight to the 16 workers. Each setting is launched afresh
for each of 3 runs, in rotated order; figures are medians. While the load runs against 2 and
4 processes, worker 0 is drained and resumed every 0.2 s, so that the table changes under
load and the owner times how long each change takes to reach every routing process.
"""

GPU_TEXT = """
Measured before issue 15 (the landed engine of commit dc86faf, which the short-input
section above replaces); `bench/gpu_serving.py` has changed since.
Run on the two-GPU machine from a source checkout, its JSON copied back.
Two transformers workers (bf16, dynamic batching up to 256 sequences) on a random-weight
model with Qwen3-Embedding-0.6B's shapes, one per GPU, behind the embedded frontend; load
from `bench/loadgen.py` (multi-process aiohttp; the GPU image has no `hey`). The plain
batched forward is measured in the same call, on the same GPU.
"""

# Results written before their script recorded its own command line.
DEFAULT_COMMANDS = {
    "gpu_h200x2": "git checkout dc86faf && python bench/gpu_serving.py --out bench/results/gpu_h200x2.json",
}

VERIFICATION_TEXT = """## Verification power

How often the checks catch each injected routing fault, and how often they cry wolf on a
clean deployment: [docs/verification.md](verification.md), from
`.venv/bin/python bench/verification_power.py` (`bench/results/verification_power.json`).
"""

CODE_FIGURES_TEXT = """## Figures the code cites

Measured figures behind a choice in the code, which its comments point to here.

| figure | the choice it supports | measured | command |
|---|---|---|---|
| the busy schedule's fit: half against the whole of a window's sending part | `scenarios/schedule.py` `_fitted` fills the whole part | 16 replicas, a quiet 2-core machine: half the part fitted 51 requests a window and a correct pool passed at 1x in a median 39-44 s; the whole part fitted 104, set aside 4 % of blocks, and passed in 19-28 s | `.venv/bin/python bench/verification_power.py --busy` |
| a window's requests on a loaded machine | `scenarios/schedule.py` `_fitted` measures the sender first | 2 cores at load 12: 20 requests took 0.14-0.9 s, against a 0.25 s window's sending part of 0.175 s | not recorded |
| a full garbage collection in an engine process holding a compiled model | `serving/http.py` `freeze_heap` | the event loop stopped for 400-440 ms at saturation on an H200 | `bench/gpu_serving.py` |
| an over-limit body buffered by aiohttp | `serving/http.py` refuses a body declared over the limit unread | 8 MiB per request, 15 MiB swings of the frontend's RSS | `.venv/bin/python bench/soak.py` |
| the frontend's dispatch list read on a loaded box | `scenarios/builtin/timeline.py` reads it on a loop of its own, with a 5 s timeout | 1.4 s under stress-ng with 128 requests in flight | not recorded |
"""

# What the profiles showed: the bounds behind the numbers above (py-spy on the live
# frontend under `hey`, and the frontend's per-request steps timed in-process).
NOTES: dict[str, str] = {
    "scale_frontend_16cores": """
**What bounds it.** One routing process answers 7,564 requests/s at 0.131 ms of CPU per
request: its one core (0.131 ms is 7,600 per second). With 4 processes the frontend's CPU per
request stays at 0.140 ms and the throughput is 3.03x; the machine is 77% busy (the 16
workers, 16 `hey`s and the frontend's processes), against 30% with one process. Straight to
the workers the same load reaches 40,000 to 42,000 requests/s.

**The table's propagation.** A registration, deregistration (the drain) or weight change is
answered only once every routing process has acknowledged the new table, so whatever follows
the answer sees it in every process; under the load above those calls took at most 22 to 90
ms. The owner's histogram of acknowledgements (each one includes the owner's own delay in
reading it, on a loaded event loop) had means of 8 to 15 ms, medians under 25 ms, 99th
percentiles under 50 ms in four of the six runs and under 100 ms in the other two, and its
largest under 250 ms. So the bound stated for the table is: every process has a change
before the call that made it is answered, in tens of milliseconds under a saturating load. A
lease expiry needs no message at all: every process compares the same monotonic clock
against the same heartbeat time, so a lapsed lease leaves dispatch in every process at the
same instant; the owner's sweep then removes it from the table.
""",
    "router_overhead": """
**What bounds the embedlab frontend.** Its own code is a small part of a request: parsing
the body takes about 4 us, the registry lookup and weighted pick 2 us (6 us with 16
instances), the Prometheus updates 11 us. A py-spy profile of the frontend under `hey`
puts more than half of its busy samples in the two socket writes of each request (the
body to the worker, the answer to the client: loopback TCP in this VM, which includes
waking the receiving process) and most of the rest in aiohttp's HTTP machinery. At
concurrency 1 the time added over direct is that on-path CPU plus two more process
wake-ups (client to frontend, worker to frontend); on 2 shared cores each wake-up waits
behind whatever else runs, so this figure is the one most sensitive to other load (trial
runs of this script under a load average of 5 to 10 saw 4.6 to 7 ms added, and 2.3 to 2.9
ms for the Dynamo frontend). `hey` reports latencies to 0.1 ms, so each p50 carries
+-0.05 ms of rounding. At concurrency 32 the whole machine is the limit: `hey`, the frontend and both
workers share 2 cores, and the frontend's lower CPU per request is what its throughput
lead over Dynamo's frontend comes from.

**The peers as measured here.** The Dynamo frontend is the real `dynamo.frontend` 1.6.1
with embedlab's hash engine on the Dynamo runtime (TCP request plane, file discovery,
every listener on loopback); the workers answer base64 float32 and the frontend encodes
the client's floats. LiteLLM (1.108.7) costs about 33 ms of CPU per request here; its
profile is pydantic validation of the response, a stack of some 25 ASGI middlewares, and
about 14% in a "zero-cost diagnostic" it runs after every call to a model without a price
in its cost map, which a self-hosted embedding model is. FACTS.md measured both peers on a
machine like this one against stub workers and saw more (Dynamo 891, 2,046 and 2,691
req/s at c=1, 8 and 32; LiteLLM about 100): the ratios here are between paths measured
in one run against the same two workers, which is what they are for.

**How stable the figures are.** Two earlier runs of this script on the same day, while
other work used up to 1.5 cores, gave 1.73x and 1.55x the Dynamo frontend's throughput at
c=32, and 0.90 and 1.00 ms added over direct at c=1 (the second misses the target by the
rounding above). The run shown waited, before every single run, until other processes
used at most 0.3 cores (`started_quiet` and `foreign_cores` per run in the JSON).
""",
    "scale": """
**On 2 cores the 90% target is missed, and the frontend is not what bounds it.** The control run
sends the same client load straight to the same workers, with no frontend at all, and
loses about as much from 2 to 16 workers; the frontend's own CPU per request stays flat
across pool sizes while the workers' grows. What grows is the pool's cost on 2 cores:
with 2 workers at concurrency 32 each worker has about 16 requests in flight and answers
several per wake-up; with 16 workers it has about 2, so it wakes, switches and refills
its caches for nearly every request (see "worker switches/req"), and 16 Python processes
time-share 2 cores with the clients and the frontend. The CPU per request that the
frontend and the workers spend together predicts the drop (figures below).

**Does the registry or routing scale?** Yes. A py-spy profile of the frontend under the
same load with 16 workers puts 1.2% of its samples in the registry lookup and the policy
pick together (`Registry.live`, `WeightedRandom.pick`); one routing decision costs a few
microseconds more at 16 instances than at 2 (the column above, timed in-process),
against some 400 us of frontend CPU per request. Nearly half of the samples are the two
socket writes per request; the write to a worker grows from about 14% of the samples
with 2 workers to 29% with 16, because a write to a sleeping worker pays for waking it.
So there was nothing in embedlab/serve to fix for this target. On a machine with a core
per worker (the next section, 16 cores) the workers do not share cores, the question is
the frontend's alone, and there the target is met.
""",
}


NOTES["scale_verdict"] = SCALE_VERDICT_NOTES


def write_conformance_split() -> None:
    """docs/conformance.md's 16-replica split, below the matrix `embedlab conformance --markdown`
    writes (which keeps it when it rewrites the matrix)."""
    data = load("scale_verdict")
    page = DOCS / "conformance.md"
    if data is None or not data.get("split16") or not page.exists():
        return
    write_text_atomic(page, replace_appendix(page.read_text(), split16_markdown(data, table=table)))
    print(f"wrote the 16-replica split into {page}")


def scale_numbers(data: dict[str, Any]) -> str:
    """The figures behind the scale notes, from this run's JSON."""
    rows = {r["setting"]: r for r in data["rows"]}
    two, sixteen = rows.get("workers=2"), rows.get("workers=16")
    if not two or not sixteen:
        return ""
    front = [r["frontend_cpu_ms_per_request"] for r in data["rows"]]
    total2 = two["frontend_cpu_ms_per_request"] + two["workers_cpu_ms_per_request"]
    total16 = sixteen["frontend_cpu_ms_per_request"] + sixteen["workers_cpu_ms_per_request"]
    lines = [
        f"In this run: the frontend's CPU per request stays between {min(front):.2f} and {max(front):.2f} ms; "
        f"the workers' grows from {two['workers_cpu_ms_per_request']:.2f} ms (2 workers) to "
        f"{sixteen['workers_cpu_ms_per_request']:.2f} ms (16), with {two['worker_switches_per_request']:.2f} and "
        f"{sixteen['worker_switches_per_request']:.2f} worker context switches per request. Frontend plus workers: "
        f"{total2:.2f} to {total16:.2f} ms per request, which predicts {total2 / total16:.2f}x the throughput; "
        f"measured {sixteen['vs_2_workers']:.2f}x through the frontend and {sixteen['direct_vs_2_workers']:.2f}x "
        f"direct to the workers."
    ]
    many = rows.get("models=16")
    if many:
        lines.append(
            f"With 16 models of one worker each: {many['vs_2_workers']:.2f}x through the frontend, "
            f"{many['direct_vs_2_workers']:.2f}x direct."
        )
    return " ".join(lines)


def scale_16_numbers(data: dict[str, Any]) -> str:
    rows = {r["setting"]: r for r in data["rows"]}
    four, sixteen, many = rows.get("workers=4"), rows.get("workers=16"), rows.get("models=16")
    if not four or not sixteen:
        return ""
    text = (
        f"In this run the frontend's CPU per request was {four['frontend_cpu_ms_per_request']:.3f} ms with 4 workers and "
        f"{sixteen['frontend_cpu_ms_per_request']:.3f} ms with 16; throughput with 16 workers was "
        f"{sixteen['rps'] / four['rps']:.2f}x that with 4"
    )
    if many:
        text += f", and with 16 models {many['rps'] / four['rps']:.2f}x"
    return text + (
        ". So the drop on 2 cores is the pool sharing 2 cores, not the frontend or its registry "
        "growing with the pool."
    )


NUMBERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "scale": scale_numbers,
    "scale_h200x1_16cores": scale_16_numbers,
}


if __name__ == "__main__":
    sys.exit(main())
