"""`embedlab watch`: keep verifying a live pool's routing, on /metrics for Prometheus.

The attach options are the scenario commands' own (the plan's knobs `--frontend-url`,
`--system-urls`, `--worker-models`, `--metric`, `--weights`, made by the same code); the rest
are the watch's (embedlab/watch/names.py holds their defaults). It runs until SIGINT or
SIGTERM (or `--duration-s`), then stops its requests and its server and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_watch"]

_ATTACH = (
    "frontend_url", "system_urls", "worker_models", "metric", "weights",
    "router_metrics", "router_admitted", "router_answered", "router_success",
)  # fmt: skip


def add_watch(sub: argparse._SubParsersAction) -> None:
    from ..scenarios.params import knobs
    from ..scenarios.plan import ScenarioPlan
    from ..watch import names
    from .scenario import add_knob

    p = sub.add_parser(
        "watch",
        help="keep verifying a live pool's routing on the busy schedule, exported to Prometheus",
        description=(
            "Run the pool's placement checks continuously (same-model per model, multi-model across "
            "models) on the busy-pool schedule, under a rate cap, and serve their verdicts on /metrics."
        ),
    )
    attach = p.add_argument_group("the pool (as the attached scenario commands take it)")
    plan_knobs = {k.name: k for k in knobs(ScenarioPlan)}
    for name in _ATTACH:
        add_knob(attach, plan_knobs[name])
    p.add_argument(
        "--port", type=int, default=names.PORT, help="serve /metrics on 127.0.0.1:PORT (0: any free port)"
    )
    p.add_argument(
        "--max-rate",
        type=_positive,
        default=names.MAX_RATE,
        help="the check's own requests per second, on average",
    )
    p.add_argument(
        "--window-requests",
        type=_whole,
        default=names.WINDOW_REQUESTS,
        help="requests per model in a window of its arm",
    )
    p.add_argument("--horizon-s", type=_positive, default=names.HORIZON_S, help="how long one test lives")
    p.add_argument("--stagger-s", type=_positive, default=names.STAGGER_S, help="how often a new test starts")
    p.add_argument(
        "--duration-s",
        type=_positive,
        default=None,
        help="stop after this long (default: at SIGINT or SIGTERM)",
    )
    p.add_argument("--html", type=Path, default=None, metavar="DIR", help="keep a self-updating page in DIR")
    p.add_argument(
        "--seed", type=int, default=None, help="the schedule's seed (default: a random one, as it should be)"
    )
    p.add_argument("--quiet", action="store_true", help="print no events on stderr")
    p.set_defaults(run=_run_watch)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _whole(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _run_watch(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..evidence.router import router_metrics
    from ..evidence.target import attach
    from ..watch.runner import WatchConfig

    if not args.frontend_url or not args.system_urls:
        raise ConfigError("embedlab watch needs --frontend-url and one --system-url per worker")
    target = attach(
        args.frontend_url,
        args.system_urls,
        models=_items(args.worker_models) or None,
        metric=args.metric or _default_metric(),
        weights=[float(w) for w in _items(args.weights)] or None,
        router_metrics=router_metrics(
            args.router_metrics,
            admitted=args.router_admitted,
            answered=args.router_answered,
            success=args.router_success,
        ),
    )
    config = WatchConfig(
        max_rate=args.max_rate,
        window_requests=args.window_requests,
        horizon_s=args.horizon_s,
        stagger_s=args.stagger_s,
        seed=args.seed,
        duration_s=args.duration_s,
    )
    return run_watch(target, config, port=args.port, html=args.html, quiet=args.quiet)


def _items(value: Any) -> list[str]:
    """A knob's tuple as the command line gives it: comma-separated text (or None)."""
    text = ",".join(value) if isinstance(value, list | tuple) else (value or "")
    return [v.strip() for v in text.split(",") if v.strip()]


def _default_metric() -> str:
    from ..defaults import METRIC

    return METRIC


def run_watch(target: Any, config: Any, *, port: int, html: Path | None, quiet: bool) -> int:
    """Serve the watch of `target` until a signal (or its duration): 0 once stopped cleanly."""
    import asyncio
    import signal

    from ..watch.exporter import Exporter
    from ..watch.page import Page
    from ..watch.runner import Watch

    exporter = Exporter()
    page = Page(html) if html is not None else None
    shown = 0

    def update(watch: Watch) -> None:
        nonlocal shown
        snap = exporter.update(watch)
        if page is not None:
            page.write(watch, snap)
        events = list(watch.events)
        total = sum(watch.event_counts.values())
        if not quiet:
            for event in events[max(0, len(events) - (total - shown)) :]:
                print(
                    f"embedlab watch: {event.at:7.1f} s {event.kind}: {event.detail}",
                    file=sys.stderr,
                    flush=True,
                )
        shown = total

    watch = Watch(target, config, on_update=update)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await watch.run(stop)

    bound = exporter.serve(port)
    exporter.update(watch)
    print(f"embedlab watch: serving http://127.0.0.1:{bound}/metrics", file=sys.stderr, flush=True)
    try:
        asyncio.run(main())
    finally:
        exporter.close()
        if page is not None:
            page.write(watch, exporter.update(watch), force=True)
    return 0
