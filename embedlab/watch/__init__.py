"""`embedlab watch`: the pool's placement checks, run continuously and exported to Prometheus.

    names       every metric, label, state and default of the watch, named once (the rules
                file, the dashboard and the tests read them from here)
    checks      which checks a pool gets (same-model per model of two replicas or more,
                multi-model across models) and the one schedule that serves them all
    judge       the sliding horizon: staggered anytime-valid tests, verdicts per check and
                model, one alarm per fault, the test restarted after each alarm (pure)
    runner      the loop: windows on the busy schedule, reads, the check's own requests under
                the rate cap, what a live pool does (restarts, timeouts) as events
    exporter    the verdicts, evidence and counters as prometheus_client metrics on /metrics
    page        `--html DIR`: a self-updating page of verdicts, alarms and events
    assets/     the Prometheus alerting rules and the Grafana dashboard for these metrics

It sits beside the scenarios (`scenarios | stacks | watch`): it imports the evidence layer
(targets, metrics, the busy statistics) and the base, nothing above. This `__init__` imports
nothing, so `embedlab --help` pays for none of it.
"""
