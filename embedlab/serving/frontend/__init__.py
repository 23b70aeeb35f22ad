"""The embedded frontend: `embedlab frontend`.

    app             Frontend, FrontendConfig, serve_frontend: the HTTP handlers
    registry_api    registration, heartbeat, deregistration, weights, as plain calls
    instances       the instance table: model -> live instances, kept alive by leases
    dispatch        how the frontend picks an instance (round-robin, random, weighted...)
    faults          deliberate routing faults (leak, stick, skew, ghost, drop, slow), off by default
    metrics         the frontend's own Prometheus counters
    upstream        the lean HTTP/1.1 client of its one hop to a worker
    shared_routing  the routing state several routing processes share
    multiprocess/   `--processes N`: the owner (owner), the others (replica), their frames

Never imports the worker. Nothing is imported here.
"""
