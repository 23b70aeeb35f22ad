"""`embedlab watch` through Prometheus, the workers found by their labels: a 2 x 2 pool (hash
workers, the embedded frontend) scraped every second by Debian's Prometheus, whose file service
discovery gives each worker the Dynamo operator's labels (tests/integration/test_through_prometheus.py's).

`embedlab watch --prometheus-url URL --discover prometheus:SELECTOR --api-key KEY` prints the four
workers it found, reads every counter through Prometheus' API (each window between two scrapes
of every worker), says so on /metrics and on its page, turns every check ok on a correct router
and fails the same-model checks of one that sends every request to the first replica
(`--fault stick`), and shows the key nowhere. Every wait is for a state, with a generous
deadline; the times the states took are printed (`-s`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from embedlab import Deployment, DeploymentSpec
from embedlab.watch import names

from .test_through_prometheus import MODELS, prometheus, selector
from .test_watch import Watcher, watch_process

# A key no output could hold by chance: the embedded frontend takes none, so it is only carried.
KEY = "sk-watch-" + secrets.token_hex(16)
# The watch stops by itself after this long, should a test die before it stops it.
DEADLINE_S = 600


@contextmanager
def watching(dep: Deployment, prom: str, tmp_path: Path, graph_index: int) -> Iterator[Watcher]:
    """`embedlab watch` attached through `prom` to the pool of graph `graph_index`, in its own
    session, stopped by SIGTERM to its group."""
    tmp_path.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with watch_process(
        tmp_path / "watch.log",
        *("--prometheus-url", prom, "--discover", selector(graph_index), "--api-key", KEY),
        *("--port", "0", "--duration-s", str(DEADLINE_S), "--html", str(tmp_path / "page")),
        frontend=dep.frontend_url,
        env=env,
    ) as watcher:
        yield watcher


# The placement checks: counted-once needs the router's own counts (--router-metrics), and stays
# inconclusive without them.
CHECKS = {(c, m) for c in (names.SAME_MODEL, names.MULTI_MODEL) for m in MODELS}


def placement_ok(watch: Watcher) -> bool:
    found = watch.verdicts()
    return all(found.get(k) == names.OK for k in CHECKS)


def same_model_failing(watch: Watcher) -> bool:
    found = watch.verdicts()
    return all(found.get((names.SAME_MODEL, m)) == names.FAILING for m in MODELS)


def test_the_watch_through_prometheus_passes_a_correct_router_and_fails_a_stuck_one(tmp_path: Path) -> None:
    """Two pools under one Prometheus, told apart by their graph label, each with a watch of its
    own at once: one behind a correct frontend, one behind a stuck one."""
    correct = DeploymentSpec.pool(list(MODELS), replicas=2)
    stuck = DeploymentSpec.pool(list(MODELS), replicas=2, frontend_args=("--fault", "stick"))
    with (
        Deployment(correct, run_dir=tmp_path / "correct") as good,
        Deployment(stuck, run_dir=tmp_path / "stuck") as bad,
        prometheus(tmp_path, good, bad) as prom,
        watching(good, prom, tmp_path / "watch-correct", 0) as ok_watch,
        watching(bad, prom, tmp_path / "watch-stuck", 1) as bad_watch,
    ):
        assert set(ok_watch.verdicts()) >= CHECKS and set(bad_watch.verdicts()) >= CHECKS
        took = {
            "correct": ok_watch.wait_until("every placement check ok", lambda: placement_ok(ok_watch), 300),
            "stuck": bad_watch.wait_until(
                "both same-model checks failing", lambda: same_model_failing(bad_watch), 300
            ),
        }
        found = {"correct": ok_watch.samples(), "stuck": bad_watch.samples()}
        verdicts = {"correct": ok_watch.verdicts(), "stuck": bad_watch.verdicts()}
    for name, watch in (("correct", ok_watch), ("stuck", bad_watch)):
        assert watch.exit_code == 0, watch.text()[-3000:]
        text = watch.text()
        print(
            f"\nwatch through Prometheus ({name}): {verdicts[name]} {took[name]:.1f} s after it started\n{text[-2500:]}"
        )

        # The workers found, before the watch began: four, each model from its counter's label.
        assert f"discovered 4 workers through Prometheus ({prom})" in text, text
        for i, model in enumerate([MODELS[0], MODELS[0], MODELS[1], MODELS[1]]):
            assert f"worker {i}: {model} (from the counter's model label)" in text, text
        assert text.index("discovered 4 workers") < text.index("serving http://127.0.0.1:")
        # How the counters were read, on /metrics and the page; what the waits for scrapes cost.
        (info,) = found[name][names.COUNTERS_INFO]
        assert info.labels == {names.SOURCE: "prometheus", names.URL: prom}, info.labels
        assert found[name][names.SCRAPE_WAIT][0].value > 0
        assert not any(s.value for s in found[name][names.SCRAPE_FAILURES])
        page = (tmp_path / f"watch-{name}" / "page" / "index.html").read_text()
        assert f"counters read through Prometheus ({prom}) at its 1.0 s scrape interval" in page, page
        if name == "stuck":
            assert not [
                k for k, v in verdicts[name].items() if v == names.FAILING and k[0] != names.SAME_MODEL
            ]
            assert "counters rule out a correct router" in text, text
        else:
            assert {verdicts[name][k] for k in CHECKS} == {names.OK} and " alarm: " not in text, text
    # The key went to the frontend alone: in no output, no page, no file the runs wrote.
    written = [f for f in tmp_path.rglob("*") if f.is_file() and "tsdb" not in f.parts]
    assert not [str(f) for f in written if KEY.encode() in f.read_bytes()]
