"""The conformance matrix's rows: a stack, a worker server, a router mode and an endpoint layout,
each labelled so that a stack at two modes is two rows; the KV rows come from the stacks' own
declarations (`prefix_aware_workers`), and go to their own section of docs/conformance.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from embedlab import ConfigError
from embedlab.reports.conformance import (
    Row,
    kv_rows,
    matrix_rows,
    row_label,
    write_kv_markdown,
    write_servers_markdown,
)
from embedlab.reports.index import APPENDIX_MARKER, KV_MARKER, SERVERS_MARKER, write_conformance_markdown


def test_a_label_shows_the_server_and_the_mode_where_the_row_names_them() -> None:
    assert row_label("smg", "embedlab") == "smg"
    assert row_label("dynamo", "mocker") == "dynamo+mocker"
    assert row_label("dynamo", "mocker", "round-robin") == "dynamo+mocker (round-robin)"
    row = Row("dynamo", "mocker", "round-robin", "model")
    assert row.label == "dynamo+mocker (round-robin)" and row.slug == "dynamo+mocker@round-robin"
    assert row.params() == {
        "stack": "dynamo",
        "worker_server": "mocker",
        "router_mode": "round-robin",
        "endpoints": "model",
    }
    assert Row("smg").params() == {"stack": "smg"}  # the notebook's defaults are not repeated


def test_the_kv_rows_run_each_stack_over_the_workers_its_prefix_aware_policy_needs() -> None:
    rows = kv_rows(["embedded", "dynamo", "smg", "haproxy"])
    assert [(r.label, r.endpoints, r.kv_mode()) for r in rows] == [
        ("embedded", "worker", "kv"),
        ("dynamo+mocker", "model", "kv"),
        ("smg", "worker", "cache_aware"),
        ("haproxy", "worker", "none"),
    ]
    both = kv_rows(["dynamo"], router_modes=[None, "round-robin"])
    assert [r.label for r in both] == ["dynamo+mocker", "dynamo+mocker (round-robin)"]
    assert [r.kv_mode() for r in both] == ["kv", "round-robin"]
    assert kv_rows(["vllm-router"], router_modes=["prefix-aware"])[0].kv_mode() == "cache_aware"


def test_matrix_rows_cross_servers_and_modes_and_refuse_a_mode_a_stack_lacks() -> None:
    rows = matrix_rows(["embedded", "nginx"], worker_servers=["embedlab", "infinity"])
    assert [r.label for r in rows] == ["embedded", "nginx", "embedded+infinity", "nginx+infinity"]
    with pytest.raises(ConfigError, match="haproxy have no router mode 'round-robin'"):
        matrix_rows(["embedded", "haproxy"], router_modes=["round-robin"])
    with pytest.raises(ConfigError, match="unknown stacks"):
        matrix_rows(["no-such-stack"])


def _kv_run(rows: list[Row], verdicts: list[str], started: str) -> dict[str, object]:
    labels = [r.label for r in rows]
    return {
        "started_at": started,
        "stacks": labels,
        "checks": ["prefix-affinity"],
        "versions": {label: "v" for label in labels},
        "rows": {
            r.label: {
                "stack": r.stack,
                "server": r.server,
                "router_mode": r.router_mode,
                "endpoints": r.endpoints,
            }
            for r in rows
        },  # fmt: skip
        "cells": [
            {"stack": label, "check": "prefix-affinity", "verdict": v, "text": "4 groups"}
            for label, v in zip(labels, verdicts)
        ],
    }


def test_the_kv_rows_merge_into_their_own_section_which_the_other_writers_keep(tmp_path: Path) -> None:
    page = tmp_path / "conformance.md"
    page.write_text(f"# Router conformance\n\nMAIN\n\n{APPENDIX_MARKER}\n\n## 16-replica split\n")
    write_kv_markdown(
        page,
        _kv_run(kv_rows(["dynamo", "haproxy"]), ["passed", "unsupported"], "t1"),
        command="embedlab conformance A",
    )
    write_kv_markdown(
        page,
        _kv_run(kv_rows(["dynamo"], router_modes=["round-robin"]), ["failed"], "t2"),
        command="embedlab conformance B",
    )
    text = page.read_text()
    assert "| dynamo | mocker | kv | v | **PASSED** 4 groups |" in text
    assert "| dynamo | mocker | round-robin | v | **FAILED** 4 groups |" in text
    assert "| haproxy | embedlab | none | v | **UNSUPPORTED** 4 groups |" in text
    assert "`embedlab conformance A` on t1: dynamo+mocker, haproxy" in text
    assert "`embedlab conformance B` on t2: dynamo+mocker (round-robin)" in text
    assert text.index("MAIN") < text.index(KV_MARKER) < text.index("16-replica split")
    # The worker-server rows go above it, the main matrix's run keeps both.
    servers = {
        "started_at": "t3",
        "stacks": ["smg+infinity"],
        "checks": ["same-model"],
        "versions": {"smg+infinity": "v"},
        "cells": [{"stack": "smg+infinity", "check": "same-model", "verdict": "passed", "text": "20/20"}],
    }
    write_servers_markdown(page, servers, command="embedlab conformance C")
    main = {**servers, "stacks": ["embedded"], "versions": {}, "cells": []}
    write_conformance_markdown(page, main, command="embedlab conformance D")
    text = page.read_text()
    assert "MAIN" not in text and text.count(KV_MARKER) == 1 and text.count(SERVERS_MARKER) == 1
    assert text.index("| embedded |") < text.index(SERVERS_MARKER) < text.index(KV_MARKER)
    assert text.index(KV_MARKER) < text.index(APPENDIX_MARKER) and text.endswith("## 16-replica split\n")
    assert "| dynamo | mocker | round-robin | v | **FAILED** 4 groups |" in text
