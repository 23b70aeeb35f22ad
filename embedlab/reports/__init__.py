"""Notebook runs and the files they leave: the matrix, regress, conformance, the pages.

    matrix       the TOML matrix (packaged ones under matrices/): which notebooks, which parameters
    regress      `embedlab regress`: the matrix's notebooks through papermill (run_jobs)
    conformance  `embedlab conformance`: the stack x check table, each cell a notebook run
    runfiles     a run's files after every notebook, its status; history; the outputs index
    run_report   one notebook run's HTML report and JUnit     index  index.html, conformance.html, Markdown
    kernels      the notebooks' kernels: their sockets, how a signal stops them

May import the scenarios and everything below them. Nothing is imported here.
"""
