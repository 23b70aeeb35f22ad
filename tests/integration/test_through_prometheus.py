"""Counters through Prometheus, workers found by their labels: a 2 x 2 pool (hash workers, the
embedded frontend) scraped every second by Debian's Prometheus, whose file service discovery
gives each worker the Dynamo operator's labels (as Prometheus keeps them: sanitised).

`embedlab scenario same-model|multi-model --prometheus-url URL --discover prometheus:SELECTOR`
finds the four workers, prints them, reads every counter through Prometheus' API at the
scrape times, and passes a correct router and fails one that leaks (`--fault leak:0.1`).
`mixed --busy` does the same on the randomized schedule, each window judged between two
scrapes of every worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from embedlab import Deployment, DeploymentSpec

from ..commands import run_embedlab
from ..prometheus_server import prometheus_server, scrapes_up

MODELS = ("model-a", "model-b")
# The operator's labels (nvidia.com/dynamo-...), as a file_sd target carries them.
GRAPH = "embed-graph"
LABELS = {
    "nvidia_com_dynamo_graph_deployment_name": GRAPH,
    "nvidia_com_dynamo_component_type": "worker",
    "nvidia_com_dynamo_namespace": "embedlab",
}


@contextmanager
def prometheus(tmp_path: Path, *deps: Deployment, interval: str = "1s") -> Iterator[str]:
    """Debian's Prometheus on 127.0.0.1, scraping the workers of `deps` every `interval` through
    file_sd, each deployment's with the operator's labels and a graph name of its own (`GRAPH`,
    then `GRAPH-1`, ...); ready once it has scraped them all. Stopped by its process group, also
    on failure."""
    groups = [
        {
            "targets": [url.split("://", 1)[1].split("/", 1)[0] for url in dep.system_urls],
            "labels": LABELS | {"nvidia_com_dynamo_graph_deployment_name": graph(k)},
        }
        for k, dep in enumerate(deps)
    ]
    (tmp_path / "workers.json").write_text(json.dumps(groups))
    config = (
        f"global: {{scrape_interval: {interval}, scrape_timeout: 1s}}\n"
        "scrape_configs:\n"
        "  - job_name: dynamo-workers\n"
        f"    file_sd_configs: [{{files: ['{tmp_path / 'workers.json'}'], refresh_interval: 1s}}]\n"
    )
    ready = scrapes_up(sum(len(g["targets"]) for g in groups))
    with prometheus_server(tmp_path, config, ready=ready, what="scrape every worker") as url:
        yield url


def graph(k: int) -> str:
    """The graph name of the k-th deployment a Prometheus scrapes."""
    return GRAPH if k == 0 else f"{GRAPH}-{k}"


def selector(k: int = 0) -> str:
    return f'prometheus:nvidia.com/dynamo-graph-deployment-name="{graph(k)}",nvidia.com/dynamo-component-type="worker"'


SELECTOR = selector(0)  # the first deployment's workers


def through_prometheus(
    scenario: str, dep: Deployment, prom: str, *extra: str, graph_index: int = 0
) -> tuple[int, str]:
    """The scenario on `dep`, its workers found by their labels (given in the operator's own
    spelling: the check matches either) and read through Prometheus at `prom`."""
    started = time.monotonic()
    proc = run_embedlab(
        "scenario", scenario, "--frontend-url", dep.frontend_url, "--prometheus-url", prom,
        "--discover", selector(graph_index), *extra, timeout=300,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    print(
        f"\n{scenario} through Prometheus: exit {proc.returncode} in {time.monotonic() - started:.1f} s\n{text}"
    )
    return proc.returncode, text


def both_pools(
    tmp_path: Path, interval: str, checks: Sequence[tuple[str, tuple[str, ...]]]
) -> tuple[str, dict[tuple[str, int], tuple[int, str]]]:
    """Two 2 x 2 pools under one Prometheus at `interval`, told apart by their graph label: pool 0
    behind a correct frontend, pool 1 behind one that leaks (`leak:0.1`). Each pool runs `checks`
    (scenario, its arguments) in turn, the two pools at once. Returns Prometheus' URL and each
    (scenario, pool)'s exit code and output."""
    correct = DeploymentSpec.pool(list(MODELS), replicas=2)
    leaking = DeploymentSpec.pool(list(MODELS), replicas=2, frontend_args=("--fault", "leak:0.1"))
    with (
        Deployment(correct, run_dir=tmp_path / "correct") as good,
        Deployment(leaking, run_dir=tmp_path / "leaking") as bad,
        prometheus(tmp_path, good, bad, interval=interval) as prom,
    ):

        def run(k: int, dep: Deployment) -> dict[tuple[str, int], tuple[int, str]]:
            return {
                (scenario, k): through_prometheus(scenario, dep, prom, *extra, graph_index=k)
                for scenario, extra in checks
            }

        with ThreadPoolExecutor(2) as pool:
            found = {key: one for runs in pool.map(run, (0, 1), (good, bad)) for key, one in runs.items()}
    return prom, found


SAME = ("same-model", ("--models", MODELS[0], "--requests", "40"))
MULTI = ("multi-model", ())


def test_placement_through_prometheus_with_workers_found_by_their_labels(tmp_path: Path) -> None:
    prom, runs = both_pools(tmp_path, "1s", [SAME, MULTI, ("mixed", ("--busy",))])
    for (scenario, k), (code, text) in runs.items():
        # The deployment found, before the check: four workers, each model from its counter's label.
        assert f"discovered 4 workers through Prometheus ({prom})" in text, text
        for i, model in enumerate([MODELS[0], MODELS[0], MODELS[1], MODELS[1]]):
            assert f"worker {i}: {model} (from the counter's model label)" in text, text
        assert "nvidia_com_dynamo_component_type=worker" in text, text
        # The verdict and its power sentence say how placement was read, and at what interval.
        assert "counters read through Prometheus" in text and "at its 1.0 s scrape interval" in text, text
        assert "added" in text and "to the verdict" in text, text
        busy = scenario == "mixed"
        if busy:
            assert "placement proven by the schedule's on-minus-off counts" in text, text
            assert "randomized blocks of" in text, text
        if k == 1:
            assert code != 0 and f"{scenario} on attached: FAILED" in text, text
            # A quiet burst names the leak; the schedule finds it from the counters' deficit.
            assert ("some reached none of them" if busy else "leaked onto") in text, text
        else:
            assert code == 0 and f"{scenario} on attached: PASSED" in text, text


def test_at_five_second_scrapes_same_and_multi_model_pass_a_correct_router_and_fail_a_leaking_one(
    tmp_path: Path,
) -> None:
    """Prometheus at 5 s, as the operator's Helm chart scrapes."""
    prom, runs = both_pools(tmp_path, "5s", [SAME, MULTI])
    for (scenario, k), (code, text) in runs.items():
        assert f"discovered 4 workers through Prometheus ({prom})" in text, text
        assert "at its 5.0 s scrape interval" in text, text
        if k == 0:
            assert code == 0 and f"{scenario} on attached: PASSED" in text, text
        else:
            assert code != 0 and f"{scenario} on attached: FAILED" in text and "leaked onto" in text, text
