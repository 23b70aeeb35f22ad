"""What the counters and the traffic say: the evidence a verdict stands on.

    metrics   scrape -> Snapshot (prometheus_client's parser); deltas; CounterResetError
    counters  DispatchCheck: counter deltas judged by worker index; fairness p-values
    traffic   bursts of requests over httpx, per-request records
    target    Target: what a check reads (a launched deployment, or `attach` to one)
    clients   the HTTP clients, with their timeouts      stats  the statistics, pure
    access    credentials and TLS: the frontend's API key, the metrics' scrape config (Prometheus' fields)
    split     Split: how a router's split is judged, by its policy
    busy/     verdicts on a pool that others also use: a randomized schedule, sequential tests

May import `progress` and the base modules; nothing of the cluster, the scenarios or
the serving programs. Nothing is imported here.
"""
