"""The real routers (LiteLLM, vllm-router, sglang-router, from their own venvs) in front of embedlab's
workers, and the conformance battery across them. The findings asserted here were measured, not copied:
each assertion is what the router did when the counters were read."""

from __future__ import annotations

import asyncio
import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from embedlab.engines import EngineOptions
from embedlab.scenarios.battery import run_battery, stack_versions
from embedlab.serving.worker.app import Worker, WorkerConfig
from embedlab.stacks.routers import router_venv

from ..commands import run_embedlab
from ..proctools import processes_under

ROUTERS = ("litellm", "vllm-router", "sglang-router")


@pytest.fixture(autouse=True, scope="module")
def routers_installed() -> None:
    # `make test` builds them: a missing one is a failure, not a skip.
    missing = [r for r in ROUTERS if not (router_venv(r) / ".stamp").exists()]
    assert not missing, f"router venvs missing: {missing}; run `make routers`"


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_embedlab(*args, timeout=timeout)


def test_a_standalone_worker_answers_what_routers_probe() -> None:
    async def probe(load_format: str) -> dict[str, object]:
        worker = Worker(
            WorkerConfig(
                engine="hash",
                served_model_name="m",
                endpoint="t.w.generate",
                frontend_url="",
                engine_options=EngineOptions(dim=8),
                load_format=load_format,
            )
        )
        await worker.start()
        try:
            async with httpx.AsyncClient(base_url=worker.url, timeout=5) as client:
                got = {
                    path: (await client.get(path))
                    for path in ("/health", "/v1/models", "/get_server_info", "/get_load")
                }
                embedded = await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
                await worker.drain(None)  # type: ignore[arg-type]
                drained = await client.get("/health")
        finally:
            await worker.close()
        return {
            **{k: (v.status_code, v.json()) for k, v in got.items()},
            "header": embedded.headers.get("x-embedlab-worker"),
            "drained": drained.status_code,
        }

    vllm, sglang = asyncio.run(probe("vllm")), asyncio.run(probe("sglang"))
    assert vllm["/health"][0] == 200 and vllm["drained"] == 503  # type: ignore[index]
    assert vllm["/v1/models"] == (
        200,
        {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "embedlab", "created": 0}]},
    )
    assert vllm["/get_server_info"][1]["served_model_name"] == "m"  # type: ignore[index]
    assert vllm["/get_load"] == (200, {"load": 0}) and sglang["/get_load"][1][0]["num_tokens"] == 0  # type: ignore[index]
    assert str(vllm["header"]).startswith("t.w.generate/")


def test_round_robin_on_vllm_router_splits_exactly(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli(
        "scenario",
        "same-model",
        "--stack",
        "vllm-router",
        "--router-mode",
        "round_robin",
        "--json",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "same-model on vllm-router (hash): PASSED"
    assert json.loads(out.read_text())["bursts"][0]["deltas"] == [20, 20]
    assert processes_under(tmp_path / "run") == []


def test_multi_model_through_litellm_reaches_only_each_models_worker(tmp_path: Path) -> None:
    proc = cli("scenario", "multi-model", "--stack", "litellm", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "multi-model on litellm (hash): PASSED"


def test_sglang_router_stops_serving_everyone_after_a_run_of_client_mistakes(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli(
        "scenario",
        "client-mistakes",
        "--stack",
        "sglang-router",
        "--json",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    after = result["bursts"][0]["traffic"]
    # Its breaker counted the workers' 404s as failures: valid requests then got 503.
    assert after["failed"] == after["n"] and all("HTTP 503" in e for e in after["errors"]), after
    assert any("no_available_workers" in e for e in after["errors"])


def test_vllm_routers_gateway_mode_shares_one_round_robin_across_models(tmp_path: Path) -> None:
    """Two models with two replicas each, sent in turn one at a time: in its gateway mode
    vllm-router routes by model, but one round-robin position serves every model, so each
    model's requests all land on one of its replicas (Dynamo #8551 is the same kind of bug)."""
    out = tmp_path / "r.json"
    proc = cli(
        "scenario",
        "mixed",
        "--stack",
        "vllm-router",
        "--models",
        "A,B",
        "--workers",
        "2",
        "--router-mode",
        "round_robin",
        "--patterns",
        "alternate",
        "--concurrency",
        "1",
        "--json",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    # 44 per model: the mixed burst that catches a leak of 1 in 10 with 99 % (issue 30).
    assert "round-robin split 44/0 is not even" in proc.stdout or "0/44 is not even" in proc.stdout
    (burst,) = json.loads(out.read_text())["bursts"]
    # Nothing crossed models, and the replica that got nothing is a different one for each.
    assert sorted([burst["deltas"][:2], burst["deltas"][2:]]) == [[0, 44], [44, 0]], burst["deltas"]
    assert processes_under(tmp_path / "run") == []


def test_sglang_router_cannot_route_two_models_offline(tmp_path: Path) -> None:
    proc = cli("scenario", "multi-model", "--stack", "sglang-router", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("multi-model on sglang-router (hash): UNSUPPORTED") and "--enable-igw" in last


def test_the_conformance_command_writes_the_matrix_and_its_reports(tmp_path: Path) -> None:
    """`embedlab conformance` as a user runs it: every cell a notebook, with its report, the
    HTML matrix, JSON, JUnit and Markdown; HAProxy's own counters read beside the workers'."""
    stacks, checks = ("embedded", "haproxy"), ("same-model", "mixed")
    markdown = tmp_path / "conformance.md"
    proc = cli(
        "conformance", "--stacks", ",".join(stacks), "--checks", ",".join(checks),
        "--out", str(tmp_path / "out"), "--markdown", str(markdown), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = Path(proc.stdout.strip().splitlines()[-1])
    run = html.parent
    data = json.loads((run / "conformance.json").read_text())
    cells = {(c["stack"], c["check"]): c for c in data["cells"]}
    assert set(cells) == {(s, c) for s in stacks for c in checks} and data["stacks"] == list(stacks)
    assert all(c["text"] and (run / c["report"]).is_file() for c in data["cells"]), (
        "every cell says something, with its report"
    )
    assert {c["verdict"] for c in data["cells"]} == {"passed"}, data["cells"]
    assert all("the router's own counters agree" in cells[("haproxy", c)]["text"] for c in checks), cells
    assert not any("router's own" in cells[("embedded", c)]["text"] for c in checks), "it keeps no counts"
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4"
    page = html.read_text()
    assert page.count('<span class="verdict ') == 4
    table = markdown.read_text()
    assert "| embedded |" in table and "| haproxy |" in table and "mixed" in table
    assert processes_under(tmp_path / "out") == [], "every router and worker was stopped"


def test_the_battery_findings_on_embedded_litellm_and_vllm_router(tmp_path: Path) -> None:
    """The battery in this process (`run_battery`, as the router_conformance notebook runs it),
    each stack with the checks whose findings are asserted here."""
    asserted = {
        "embedded": (
            "same-model",
            "multi-model",
            "failover",
            "failover-no-retries",
            "client-mistakes",
            "drain",
        ),
        "vllm-router": ("same-model", "multi-model", "failover", "failover-no-retries", "client-mistakes"),
        "litellm": ("multi-model", "client-mistakes", "drain"),
    }
    cells = {}
    for stack, checks in asserted.items():
        matrix = run_battery(stacks=[stack], checks=checks, run_dir=str(tmp_path / stack))
        cells |= {(c.stack, c.check): c for c in matrix.cells}
    assert all(c.text for c in cells.values()), "every cell says something"
    verdict = {k: c.verdict for k, c in cells.items()}
    # embedlab's own frontend meets every check it can.
    assert {
        verdict[("embedded", c)]
        for c in ("same-model", "multi-model", "failover", "client-mistakes", "drain")
    } == {"passed"}, cells
    assert verdict[("embedded", "failover-no-retries")] == "unsupported"
    # vllm-router's default, cache_aware, is reported with its skew; without IGW it ignores the model.
    assert (
        verdict[("vllm-router", "same-model")] == "reported"
        and "judged report" in cells[("vllm-router", "same-model")].text
    )
    # Two models put it in its gateway mode (--enable-igw), workers joining with their model.
    assert verdict[("vllm-router", "multi-model")] == "passed"
    assert cells[("vllm-router", "multi-model")].text.startswith("counted on another model's worker 0 of 88")
    # Retries hide a dead worker; without them, clients see 500s.
    assert cells[("vllm-router", "failover")].text.startswith("lost 0 of 200")
    lost = cells[("vllm-router", "failover-no-retries")].text
    assert not lost.startswith("lost 0 of") and "HTTP 500" in lost, lost
    # Plain-text 400 and 422 for a malformed body and a missing field; LiteLLM answers OpenAI error JSON.
    assert (
        verdict[("vllm-router", "client-mistakes")] == "failed"
        and "plain" in cells[("vllm-router", "client-mistakes")].text
    )
    assert (
        verdict[("litellm", "client-mistakes")] == "passed"
        and verdict[("litellm", "multi-model")] == "passed"
    )
    assert verdict[("litellm", "drain")] == "unsupported" and "database" in cells[("litellm", "drain")].text
    versions = stack_versions(["vllm-router", "litellm"])
    assert versions["vllm-router"] == "vllm-router 0.1.17" and versions["litellm"].startswith(
        "litellm 1.108.7"
    )
    assert processes_under(tmp_path) == [], "every router and worker was stopped"
