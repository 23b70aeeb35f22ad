"""The embedded stack's two programs, the frontend and the worker, and what they share.

    frontend/     `embedlab frontend`: registry, instance table, dispatch, routing faults
    worker/       `embedlab worker`, `embedlab dynamo-worker`: the request plane over an engine
    http          the aiohttp helpers both serve with; run_service (signals, event loop)
    openai        the /v1/embeddings request, response and error shapes
    channel       shared-memory rings between processes of one program
    registration  what a worker and its frontend agree on: the endpoint's name, the token

Imports only `engines` and the base modules: a worker process never loads the harness
(pandas, httpx, the scenarios). Nothing is imported here.
"""
