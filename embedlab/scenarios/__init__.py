"""The scenario layer: a registry of scenarios, the plans that run them, and their results.

- `registry`: scenarios by name, the only dispatch by name; built-ins load on first use.
- `plans`: `ScenarioPlan` (plain values, checked when made) and `run_scenario`.
- `results`: the one result model, plain typed data.
- `bursts`: one burst between two counter snapshots, judged; what every scenario is made of.
- `dispatch` (same-model, multi-model), `resilience` (failover), `drain`, `explore` (live
  bursts, weight sweeps): one module per family.
- `live`: one live deployment per notebook (`start_deployment`), for cells that keep it.

Nothing is imported here, so that reading the registry (for `--help`) stays cheap.
"""
