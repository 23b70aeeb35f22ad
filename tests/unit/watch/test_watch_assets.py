"""The shipped Prometheus rules and Grafana dashboard use only metrics the watch serves
(promtool's own checks of the rules run it: tests/integration/test_watch_promtool.py)."""

from __future__ import annotations

import json
import re

import yaml

from embedlab.watch import names

from .test_watch_runner import MockPool, families, watch_on

METRIC = re.compile(r"\bembedlab_watch_[a-z_]+\b")


def expressions() -> dict[str, list[str]]:
    rules = yaml.safe_load(names.RULES_FILE.read_text())
    dashboard = json.loads(names.DASHBOARD_FILE.read_text())
    in_rules = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    in_dashboard = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    in_dashboard += [a["expr"] for a in dashboard["annotations"]["list"]]
    return {"rules": in_rules, "dashboard": in_dashboard}


def test_every_metric_the_rules_and_the_dashboard_use_is_served() -> None:
    # A watch that has judged blocks serves every family, the per-worker shares included.
    pool = MockPool(["a", "a", "b", "b"], seed=6)
    _, exporter = watch_on(pool, seconds=60, until=lambda w: bool(w.shares()) and w.now > 1)
    served = set(families(exporter))
    for where, exprs in expressions().items():
        used = {m for e in exprs for m in METRIC.findall(e)}
        assert used, where
        assert used <= served, f"{where} uses {sorted(used - served)}, which the watch does not serve"
    defined = {
        v
        for k, v in vars(names).items()
        if k != "PREFIX" and isinstance(v, str) and v.startswith(names.PREFIX)
    }
    assert defined <= served, sorted(defined - served)
    assert names.ALERT in {
        r["alert"] for g in yaml.safe_load(names.RULES_FILE.read_text())["groups"] for r in g["rules"]
    }


def test_the_dashboard_reads_its_prometheus_from_a_variable() -> None:
    dashboard = json.loads(names.DASHBOARD_FILE.read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    assert all(p["datasource"]["uid"] == "${datasource}" and p["targets"] for p in dashboard["panels"])
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
