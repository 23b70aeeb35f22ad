"""The built-in scenarios, one module per family: each declares its `Scenario(...)` beside its
function and its params class, and `registry.py` names it (`"same-model"`: `dispatch:SAME_MODEL`).

    dispatch    same-model, multi-model          mixed      interleaved models in one burst
    resilience  failover (a worker SIGKILLed)    drain      a worker drained mid-burst
    cluster     partition, etcd restart, TTL sweep (with cluster_figures and timeline:
                steady traffic and every worker's counter, watched through the fault)
    probes      what a client meets: answers to its mistakes, the frontend's overhead
    placement   what a placement check can prove (its power, in words) and its busy half,
                the on/off schedule's verdict, for dispatch and mixed

A scenario's function takes its params object (`params=`) or its knobs by name; its
`run(target, plan)` hands `plan.params` on as it is. A scenario may import `plan`, `burst`,
`result`, `params` and `registry`, and the layers below the
scenarios (the cluster family reuses `dispatch`'s same-model burst).
Nothing is imported here: the registry loads a module when its scenario is asked for.
"""
