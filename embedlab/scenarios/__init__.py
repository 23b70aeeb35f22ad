"""The scenarios: what is run against a deployment, and how it is judged.

    registry  scenarios by name, the only dispatch by name; built-ins load on first use
    params    knobs: a scenario's typed, documented parameters (and the plan's own fields)
    plan      ScenarioPlan (plain values, checked when made, its fields knobs) and run_scenario
    result    ScenarioResult, Burst, Figures: the one result model, plain typed data
    burst     one burst between two counter snapshots, judged: what every scenario is made of
    battery   the conformance battery: every check against every stack (ConformanceTable)
    explore   live bursts and weight sweeps on a deployment a notebook keeps
    builtin/  the scenarios themselves, one module per family

Inside, top to bottom: explore; builtin | battery; plan; burst | registry; result | params.
May import the cluster, the evidence, the engines and the base modules; never a concrete
stack (a stack's capabilities are read from the registry). Nothing is imported here, so
that reading the registry (for `--help`) stays cheap.
"""
