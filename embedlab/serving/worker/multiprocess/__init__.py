"""A worker with several ingest processes (`embedlab worker --api-processes N`).

pool      the engine process's side: starts the ingest processes, batches their ids
ingest    one ingest process: HTTP in, token ids to the engine, vectors out
messages  the binary messages they exchange over a `serving.channel.Channel`
"""
