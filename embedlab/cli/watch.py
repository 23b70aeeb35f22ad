"""`embedlab watch`: keep verifying a live pool's routing, on /metrics for Prometheus.

The attach options are the scenario commands' own (the plan's knobs: `--frontend-url`,
`--system-urls`, `--worker-models`, `--metric`, `--weights`, the router's counts, `--api-key`,
`--scrape-config`, `--prometheus-url`, `--prometheus-http-config`, `--discover`, ..., made by
the same code), and so is what they become: a `ScenarioPlan` checks them and builds the
`Target` (`ScenarioPlan.attached_target`, as `embedlab scenario` does: Prometheus' access tried
first, the workers found through it printed). The rest are the watch's (embedlab/watch/names.py
holds their defaults). The target's credentials are granted for the whole watch, and tried on
every endpoint before anything is sent (`check_access`: a refusal is one line, exit 2). It runs
until SIGINT or SIGTERM (or `--duration-s`), then stops its requests and its server and exits 0.
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
    "api_key", "scrape_config",
    "prometheus_url", "prometheus_selector", "prometheus_http_config", "discover",
)  # fmt: skip
# The plan that checks the attach options and builds the target: an attached per-model scenario
# (no scenario of its own runs; the watch's checks are its own).
_PLAN_SCENARIO = "multi-model"


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
            "models) on the busy-pool schedule, under a rate cap, and serve their verdicts on /metrics. "
            "The pool is attached as the scenario commands attach it: its credentials (--api-key, "
            "--scrape-config, --prometheus-http-config) tried on every endpoint before anything is "
            "sent, its counters read from "
            "each worker's /metrics, or through Prometheus (--prometheus-url; --discover finds the "
            "workers among its targets, printed before the watch starts)."
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
    from ..scenarios.plan import ScenarioPlan
    from ..watch.runner import WatchConfig

    if not args.frontend_url or not (args.system_urls or args.discover):
        raise ConfigError(
            "embedlab watch needs --frontend-url, and one --system-url per worker or --discover"
        )
    given = {name: getattr(args, name) for name in _ATTACH if getattr(args, name) is not None}
    plan = ScenarioPlan(scenario=_PLAN_SCENARIO, **given)
    target = plan.attached_target()  # the workers found through Prometheus are printed here
    config = WatchConfig(
        max_rate=args.max_rate,
        window_requests=args.window_requests,
        horizon_s=args.horizon_s,
        stagger_s=args.stagger_s,
        seed=args.seed,
        duration_s=args.duration_s,
    )
    return run_watch(target, config, port=args.port, html=args.html, quiet=args.quiet)


def run_watch(target: Any, config: Any, *, port: int, html: Path | None, quiet: bool) -> int:
    """Serve the watch of `target` until a signal (or its duration): 0 once stopped cleanly.

    The target's credentials are granted for the whole watch, and `check_access` tries them on
    the frontend and every metrics URL first: a refusal (an AccessError, one line) comes before
    the watch serves or sends anything."""
    import asyncio
    import signal

    from ..evidence.access import granted
    from ..evidence.target import check_access
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

    watch = Watch(target, config, on_update=update)  # a pool it cannot check fails here, before access

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await watch.run(stop)

    with granted(target.access):
        check_access(target)
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
