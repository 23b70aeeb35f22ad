"""What a notebook shows and keeps: live deployments, tables and figures.

    live    one live deployment per notebook (`start_deployment`, `stop_deployment`)
    views/  table(...), plot(...), verdict(...): for notebooks, the CLI and the reports
    parameters  a scenario notebook's parameters cell and plan call, written from its params class
    cellguard/  the cell guard: an IPython extension refusing what a failed cell left stale
    kernelspec  the `embedlab` kernel's spec, which loads the cell guard (`make install`)

May import the scenarios and everything below them; `reports` and `notebook` do not
import each other. Nothing is imported here.
"""
