"""The embedded worker: `embedlab worker` (and `embedlab dynamo-worker`, Dynamo's runtime).

    app            Worker, serve_worker: the engine, the system port, registration and lease
    config         WorkerConfig: what `embedlab worker` was asked for, checked
    request_plane  /v1/embeddings and what routers probe beside it
    metrics        the worker's own counters (the evidence embedlab reads)
    dynamo         the same engine behind Dynamo's runtime
    multiprocess/  `--api-processes N`: ingest processes in front of one engine process

Never imports the frontend. Nothing is imported here.
"""
