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
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

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
    return body, [
        ("time to verdict: both hash scenarios, embedded stack", "< 5 s", f"{both:.2f} s, {met(both < 5)}")
    ]


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


SHORT_MODES = {"graphs": "embedlab, CUDA graphs", "graphs + compile": "embedlab, graphs + torch.compile"}


def gpu_short_section(data: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    parts = ["**Targets, as ratios in this run:**\n"]
    rows = [[t["target"], t["goal"], t["measured"], met(t["met"]), t["detail"]] for t in data["targets"]]
    rows.append(
        [
            "two workers on two GPUs vs one",
            ">= 1.9x",
            "not run",
            "**not measured**",
            "the two-GPU kind was not lent to this session; the earlier 1.96x (below) predates this change",
        ]
    )
    parts.append(table(["target", "goal", "measured", "", "how"], rows, "lllll"))

    parts.append(
        "\n**References, same call: a plain batched forward and sentence-transformers `encode`, seq/s:**\n"
    )
    plain = {(r["tokens"], r["batch"]): r["seq_per_s"] for r in data["plain_forward"]}
    st = {(r["tokens"], r["batch"]): r["seq_per_s"] for r in data["sentence_transformers"]}
    parts.append(
        table(
            ["tokens", "batch", "plain forward", "sentence-transformers"],
            [[t, b, num(plain[(t, b)]), num(st[(t, b)])] for t, b in sorted(plain)],
        )
    )

    profile = data["profile"]
    parts.append(
        "\n**The forward paths in-process, back to back, two in flight** (host: time to queue one forward; "
        "device: event to event on the stream; wall: per forward over the run):\n"
    )
    prof_rows = []
    for path, body in profile["paths"].items():
        for r in body["rows"]:
            prof_rows.append(
                [
                    path,
                    f"{r['rows']} x {r['tokens']}",
                    num(r["host_ms_per_forward"], 2),
                    num(r["device_ms_per_forward"], 2),
                    num(r["wall_ms_per_forward"], 2),
                    num(r["seq_per_s"]),
                ]
            )
    parts.append(
        table(["path", "batch x tokens", "host ms", "device ms", "wall ms", "seq/s"], prof_rows, "llrrrr")
    )
    trace_rows = []
    for path, body in profile["paths"].items():
        trace = body.get("trace")
        check = body.get("sync_check", "")
        trace_rows.append(
            [
                path,
                "passed" if check.startswith("passed") else ("**a sync**" if check else "-"),
                f"{trace['device_busy_fraction']:.0%}" if trace else "-",
                trace["gaps_over_50us"] if trace else "-",
                num(trace["largest_gap_us"]) if trace else "-",
            ]
        )
    parts.append(
        '\nUnder `torch.cuda.set_sync_debug_mode("error")` (graph replays, a padded eager batch, a batch past the '
        "graph widths), and in a torch-profiler trace of 20 back-to-back 256 x 13 forwards:\n"
    )
    parts.append(
        table(
            ["path", "sync check", "device busy", "idle gaps > 50 us", "largest gap us"], trace_rows, "llrrr"
        )
    )

    parts.append(
        "\n**Served through the embedded frontend** (one worker, token-id inputs, base64 answers; CPU is each "
        "process's utime + stime over the step, per request):\n"
    )
    served_rows = []
    for mode, body in data["served"].items():
        for r in body["rows"] + [dict(x, direct=True) for x in body.get("direct_to_worker", [])]:
            served_rows.append(
                [
                    SHORT_MODES.get(mode, mode) + (" (straight to the worker)" if r.get("direct") else ""),
                    r["tokens"],
                    r["concurrency"],
                    r["inputs_per_request"],
                    num(r["seq_per_s"]),
                    num(r["p50_ms"], 2),
                    num(r["p99_ms"], 1),
                    num(r["mean_batch"], 1),
                    num(r["cpu_ms_per_request"].get("worker-0", 0), 3),
                    num(r["cpu_ms_per_request"].get("frontend", 0), 3) if not r.get("direct") else "-",
                ]
            )
    parts.append(
        table(
            [
                "path",
                "tokens",
                "c",
                "inputs/req",
                "seq/s",
                "p50 ms",
                "p99 ms",
                "mean batch",
                "worker CPU ms/req",
                "frontend CPU ms/req",
            ],
            served_rows,
            "lrrrrrrrrr",
        )
    )
    for mode, body in data["served"].items():
        info = body["engine_info"]
        parts.append(
            f"\n{SHORT_MODES.get(mode, mode)}: {len(info['cuda_graphs'])} graphs captured in {info['graph_capture_s']} s, "
            f"{num(info['graph_memory_mib'])} MiB; served vectors against an unpadded forward, "
            f"{len(body['parity']['cosines'])} vectors of {min(body['parity']['lengths'])} to "
            f"{max(body['parity']['lengths'])} tokens: min cosine {body['parity']['min_cosine']:.6f} "
            f"(floor {body['parity']['floor']})."
        )
    hist = next(r for r in data["served"]["graphs"]["rows"] if r["tokens"] == 13 and r["concurrency"] == 512)
    direct = next(r for r in data["served"]["graphs"].get("direct_to_worker", []) if r["concurrency"] == 512)
    long = next(r for r in data["served"]["graphs"]["rows"] if r["tokens"] == 128 and r["concurrency"] == 512)

    def summary(r: dict[str, Any]) -> str:
        h = {int(k): v for k, v in r["batch_histogram"].items()}
        return (
            f"{r['forwards']} forwards, mean {r['mean_batch']:.0f}, {h.get(256, 0)} at 256, "
            f"{sum(v for k, v in h.items() if k < 32)} under 32"
        )

    parts.append(
        "\n**Batch sizes at c=512** (CUDA graphs, largest bucket 256): 13 tokens through the frontend: "
        f"{summary(hist)}; 13 tokens straight to the worker: {summary(direct)}; 128 tokens through the frontend: "
        f"{summary(long)}. Full histograms per step are in the JSON (`batch_histogram`)."
    )
    cpu = load("cpu_path")
    if cpu:
        parts.append(
            "\n**On CPU nothing of the above runs.** The CPU path against the landed engine (commit dc86faf), "
            "`bench/cpu_path.py`: tiny models in-process, token-id requests, each tree in a fresh interpreter, "
            f"the trees alternating, median of {cpu['rounds']} rounds, on the 2 shared cores:\n"
        )
        parts.append(
            table(
                ["case", "landed seq/s", "this seq/s", "ratio", "landed p50 ms", "this p50 ms"],
                [
                    [
                        r["case"],
                        num(r["baseline_seq_per_s"]),
                        num(r["this_seq_per_s"]),
                        f"{r['throughput_ratio']:.2f}x",
                        num(r["baseline_p50_ms"], 2),
                        num(r["this_p50_ms"], 2),
                    ]
                    for r in cpu["rows"]
                ],
                "lrrrrr",
            )
        )
        parts.append(
            "\nAt c=1 the landed batcher held a lone request for its 2 ms window; this one launches it at once "
            "when the device is idle."
        )
    plot_gpu_short(data)
    found = [
        (f"GPU short inputs: {t['target']}", t["goal"], f"{t['measured']}, {met(t['met'])}")
        for t in data["targets"]
    ]
    found.append(
        (
            "GPU short inputs: two workers on two GPUs vs one",
            ">= 1.9x",
            "not measured: no two-GPU machine lent",
        )
    )
    return "\n".join(parts), found


def plot_gpu_short(data: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=False)
    for ax, tokens in zip(axes, (13, 128)):
        for mode, body in data["served"].items():
            rows = sorted(
                (r for r in body["rows"] if r["tokens"] == tokens and r["inputs_per_request"] == 1),
                key=lambda r: r["concurrency"],
            )
            ax.plot(
                [r["concurrency"] for r in rows],
                [r["seq_per_s"] for r in rows],
                marker="o",
                label=SHORT_MODES.get(mode, mode) + ", 1 input/request",
            )
            multi = [r for r in body["rows"] if r["tokens"] == tokens and r["inputs_per_request"] > 1]
            for r in multi:
                ax.scatter(
                    [r["concurrency"]],
                    [r["seq_per_s"]],
                    marker="^",
                    s=50,
                    color=ax.lines[-1].get_color(),
                    label=SHORT_MODES.get(mode, mode) + f", {r['inputs_per_request']} inputs/request",
                )
        st = sorted(
            (r for r in data["sentence_transformers"] if r["tokens"] == tokens), key=lambda r: r["batch"]
        )
        ax.plot(
            [r["batch"] for r in st],
            [r["seq_per_s"] for r in st],
            marker="s",
            linestyle="--",
            color="#d62728",
            label="sentence-transformers encode (x = batch)",
        )
        ceiling = {
            path: next(
                (r["seq_per_s"] for r in body["rows"] if r["rows"] == 256 and r["tokens"] == tokens), None
            )
            for path, body in data["profile"]["paths"].items()
            if path.startswith("cuda")
        }
        for (path, value), style in zip(ceiling.items(), (":", "-.")):
            if value:
                ax.axhline(
                    value,
                    color="#7f7f7f",
                    linestyle=style,
                    linewidth=1,
                    label=f"in-process {path}, 256 rows (the device's ceiling)",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (served) or batch (sentence-transformers)")
        ax.set_ylabel("sequences/s")
        ax.set_title(f"{tokens}-token inputs")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7.5, frameon=False)
    fig.suptitle(
        "Qwen3-Embedding-0.6B shape, bf16, one H200: embedlab served vs sentence-transformers", fontsize=10
    )
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    save(fig, "gpu_short_inputs.png")


def save(fig: Any, name: str) -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / name, dpi=DPI)
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
| lease TTL sweep | `make bench-ttl` (= `make bench` then `.venv/bin/python bench/ttl_sweep.py`; root) | `bench/results/ttl_sweep.json` |
| GPU short inputs | on an H200 machine: `python bench/gpu_serving.py --profile --out bench/results/gpu_short_inputs.json` | `bench/results/gpu_short_inputs.json` |
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
        ("time_to_verdict", "Time to verdict", verdict_section, VERDICT_TEXT),
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
    DOCS.mkdir(exist_ok=True)
    (DOCS / "benchmarks.md").write_text("\n".join(sections).rstrip() + "\n")
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

GPU_SHORT_TEXT = """
Run on the one-GPU machine from a fresh checkout of the branch (`git archive`), its JSON
copied back; every figure below comes from that one call. The model has random weights
and Qwen3-Embedding-0.6B's shapes (bf16, LAST pooling, normalised). The served worker is
one transformers worker behind the embedded frontend, `--max-batch-size 256
--max-batch-tokens 32768 --batch-wait-ms 2`, with CUDA graphs for 60 (rows, width)
buckets, and with `--engine-arg compile=true` for the compiled runs. Served inputs are
token ids of exactly 13 or 128 tokens; sentence-transformers gets texts that its
tokenizer turns into exactly 13 or 128 tokens. Load comes from `bench/loadgen.py`
(8 aiohttp processes), 5 s per step. The GPU image has no orjson, so the servers
serialise with the standard library there. The figures come from commit a567ff8, this branch
before its rebase onto main (which changed none of the engine or bench code); the later
move of the graph code into `engines/cuda_graphs.py` (no change in behaviour) was
checked in a short run on the same kind of machine: the same 60 graphs, the same minimum
cosines, c=1 p50 2.94 ms compiled, 3,965 seq/s at 128 tokens x16.
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

# What the profiles showed: the bounds behind the numbers above (py-spy on the live
# frontend under `hey`, and the frontend's per-request steps timed in-process).
NOTES: dict[str, str] = {
    "gpu_short_inputs": """
**What bounds each figure.**

- *13 tokens, one input per request* (best 5,148 seq/s, compiled, c=256): HTTP in single-threaded
  Python, on both hops. Straight to the worker, with no frontend, the worker answers 5,196 to
  5,411 requests/s at 0.21 to 0.23 ms of CPU per request (aiohttp, JSON, the Prometheus
  counters, two socket syscalls); through the frontend each request costs the frontend another
  0.16 to 0.20 ms. The device is far from its limit: the same forward, replayed in-process as a
  graph of 256 x 13, runs 11,281 seq/s, and 22,330 compiled, 4.3x sentence-transformers' best
  here. So the 2.0x target is missed on the HTTP side, not on the device: it needs the request
  planes to scale past one process (the frontend, and the worker's aiohttp loop), which this
  change does not do. 16 inputs per request, where HTTP costs per sequence are 16 times
  smaller, reach 15,961 seq/s (3.0x sentence-transformers).
- *c=512 below c=256 through the frontend, with p99 of 0.5 to 0.8 s*, while straight to the
  worker c=512 holds 5,196: the frontend's upstream pool keeps at most 256 idle connections
  per worker (`max_idle_per_worker` in `serve/upstream.py`), so at c=512 about half the
  forwarded requests open and close a TCP connection of their own. Not changed here.
- *c=1 p50* (2.9 ms compiled, 5.1 ms not): a batch-of-one graph replays in 1.7 ms (4.2 ms
  uncompiled) of device time, and the two HTTP hops add about 1 ms.
- *128 tokens* (3,726 seq/s at 16 inputs per request, compiled): the device. The compiled
  256 x 128 graph replays at 3,725 seq/s in-process; served reaches all of it. Uncompiled,
  1,668 served against 1,676 in-process, 97.5% of the best plain batched forward (1,710 at
  batch 1024). Compile pays by fusing the elementwise kernels (RMSNorm, rotary, SiLU,
  residual adds) that hold most of the device time at these sizes. It is compiled once for
  all 28 decoder layers (regional compilation): the profile's cold compile and 22 captures
  took 16 s, and the served worker, with the compiler's cache warm, started 5 s later than
  without compile.
- *sentence-transformers*, 13 tokens: eager launching and its own per-batch CPU (tokenizing,
  sorting, a copy to the host per batch). Its batch-1024 figure is the noisiest in the table:
  4,869 seq/s in this run, 9,039 in an earlier call the same day on the same image.
- *Overlap of back-to-back forwards.* With transformers' own mask code every forward reads a
  device value on the host and so waits for the device (the sync check catches it); over 20 back-to-back
  256 x 13 forwards the device was busy 38% of the time, with 2,418 idle gaps over 50 us.
  Without the sync (our inputs, eager) it was busy 51%: still launch-bound, since ~1,600
  launches from Python take longer than their kernels. As CUDA graphs it was busy 95%, with
  2 gaps: queueing a forward takes 1.5 ms of host time against 22.7 ms of device time, so the
  next one is queued while the current one runs.
- *Batch sizes at c=512.* Where the worker sees the whole request rate (straight to it, or at
  128 tokens) batches are nearly full: mean 238 and 244 of 256. Through the frontend at 13
  tokens the arrival rate is the frontend's, and with the device idle the batcher launches
  what has come rather than hold requests the device could already be computing: mean 170,
  no batch under 32, and no cycle of near-empty forwards.
- *A graph launch can block.* Queueing a 256 x 128 graph behind another took 110 ms of host
  time (48 ms compiled): the device's launch queue is full. Launches behind a queued forward
  therefore run on the worker's forward thread, which releases the GIL while it waits, so
  the event loop keeps serving; a launch onto an idle device stays on the event loop, where
  it costs no thread hand-off.
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
