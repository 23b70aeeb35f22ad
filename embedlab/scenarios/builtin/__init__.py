"""The built-in scenarios, one module per family, each registered by name in `registry.py`.

    dispatch    same-model, multi-model          mixed      interleaved models in one burst
    resilience  failover (a worker SIGKILLed)    drain      a worker drained mid-burst
    cluster     partition, etcd restart, TTL sweep (with cluster_figures and timeline:
                steady traffic and every worker's counter, watched through the fault)
    probes      what a client meets: answers to its mistakes, the frontend's overhead

A scenario may import `plan`, `burst`, `result` and `params`, and the layers below the
scenarios (the cluster family reuses `dispatch`'s same-model burst).
Nothing is imported here: the registry loads a module when its scenario is asked for.
"""
