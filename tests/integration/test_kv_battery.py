"""The KV checks as conformance cells (`embedlab conformance --kv`), in this process: each stack at
its own prefix-aware policy, on real processes; a stack without one stated unsupported."""

from __future__ import annotations

from pathlib import Path

from embedlab.scenarios.battery import KV_CHECKS, run_battery

from ..proctools import processes_under


def test_the_kv_cells_of_the_embedded_frontend_pass_and_haproxys_are_stated_unsupported(
    tmp_path: Path,
) -> None:
    """embedded runs at its `kv` policy though no mode is given (`prefix-aware`, the checks' own
    default); HAProxy has no prefix-aware policy: its cells say so and nothing is launched."""
    matrix = run_battery(stacks=["embedded", "haproxy"], checks=KV_CHECKS, run_dir=str(tmp_path))
    cells = {(c.stack, c.check): c for c in matrix.cells}
    assert {cells[("embedded", c)].verdict for c in KV_CHECKS} == {"passed"}, cells
    assert cells[("embedded", "prefix-affinity")].text.startswith("groups that stayed on one worker 4"), cells
    for check in KV_CHECKS:
        cell = cells[("haproxy", check)]
        assert cell.verdict == "unsupported", cell
        assert cell.text.startswith(
            "the haproxy stack has no prefix-aware policy: none of its router modes"
        ), cell
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "embedded-kv-participation",
        "embedded-prefix-affinity",
    ]
    assert processes_under(tmp_path) == [], "every frontend and worker was stopped"
