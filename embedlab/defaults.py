"""Every default, and every name that crosses a process boundary, defined once.

The frontend, the workers and the harness run in different processes and must agree on
these: an environment variable one side sets and the other reads, a header, the endpoint
naming, the counter the checks read. Serving and harness both import them from here,
and this module imports nothing of embedlab.
"""

from __future__ import annotations

# -- environment variables ------------------------------------------------------------------
# Dynamo's own names, which embedlab's processes honour as Dynamo's do.
SYSTEM_PORT_ENV = "DYN_SYSTEM_PORT"  # a worker's system server: /metrics, /health, /live
SYSTEM_HOST_ENV = "DYN_SYSTEM_HOST"
HTTP_PORT_ENV = "DYN_HTTP_PORT"  # the frontend's port, as the launch scripts set it
DISCOVERY_ENV = "DYN_DISCOVERY_BACKEND"  # file or etcd: where Dynamo's processes find each other
REQUEST_PLANE_ENV = "DYN_REQUEST_PLANE"  # tcp: no NATS needed
DISCOVERY, REQUEST_PLANE = "file", "tcp"  # what the dynamo stack runs on unless told otherwise
# Dynamo's canary health checks, by the names its 1.6.1 runtime reads: DYN_CANARY_WAIT_TIME_SECS
# and DYN_HEALTH_CHECK_REQUEST_TIMEOUT_SECS, the config fields' names, are silently ignored.
HEALTH_CHECK_ENABLED_ENV = "DYN_HEALTH_CHECK_ENABLED"
CANARY_WAIT_ENV = "DYN_CANARY_WAIT_TIME"  # whole seconds an endpoint idles before its canary
# The runtime never reads the payload: a worker passes it to `serve_endpoint`, or has no canary.
HEALTH_CHECK_PAYLOAD_ENV = "DYN_HEALTH_CHECK_PAYLOAD"
# embedlab's own.
TOKEN_ENV = "EMBEDLAB_TOKEN"  # the registry token of a frontend reachable beyond loopback
FRONTEND_URL_ENV = "EMBEDLAB_FRONTEND_URL"  # where a worker registers
STATE_DIR_ENV = "EMBEDLAB_STATE_DIR"  # a process's own state folder under the run dir
VLLM_CACHE_ENV = "EMBEDLAB_VLLM_CACHE"  # vLLM's model-class cache, shared by a run's workers
RUN_ROOT_ENV = "EMBEDLAB_RUN_ROOT"  # where runs without an explicit run dir go
PORT_DIR_ENV = "EMBEDLAB_PORT_DIR"  # port reservations and watchdog files
MODEL_CACHE_ENV = "EMBEDLAB_CACHE"  # the tiny local models
NOTEBOOKS_ENV = "EMBEDLAB_NOTEBOOKS"  # where `embedlab regress` looks notebooks up
ROUTERS_ENV = "EMBEDLAB_ROUTERS"  # the routers' venvs (default: .routers/ of the checkout)
# An attached frontend's API key where `--api-key` is not given, read as OpenAI's own client reads it.
API_KEY_ENV = "OPENAI_API_KEY"
# Modules imported before any scenario, stack or engine name resolves (comma-separated): a
# plugin without packaging. The CLI's --plugin adds to it, so every process it starts (a
# worker, a notebook's kernel) imports them too.
PLUGINS_ENV = "EMBEDLAB_PLUGINS"
# Python's safe-path mode (its -P), on in every Python process embedlab starts: the folder a
# user runs from is never on their sys.path (`plugins.child_env`).
SAFE_PATH_ENV = "PYTHONSAFEPATH"
CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"  # one GPU per worker, set by the deployment

# -- the command line ---------------------------------------------------------------------------
EXIT_FAILED = 1  # `embedlab ...`: a check failed (0 passed or reported; 130/143 interrupted)
EXIT_CANNOT_RUN = 2  # bad arguments, a start failure, an unreachable URL

# -- the wire -----------------------------------------------------------------------------------
# The OpenAI routes embedlab's frontend and worker serve, by request kind; the kinds that
# generate (completions, chat) are the ones a prefix (KV) cache sees.
KIND_PATHS = {
    "embeddings": "/v1/embeddings",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
GENERATE_KINDS = ("completions", "chat")
# Where a worker posts the KV events of its prefix cache to embedlab's frontend, per instance.
KV_EVENTS_PATH = "/registry/instances/{instance_id}/kv-events"
WORKER_HEADER = "x-embedlab-worker"  # the frontend names the serving instance: <endpoint>/<instance id>
METRIC = "dynamo_component_requests_total"  # the counter every check reads, one per worker
CANARY_METRIC = "embedlab_canaries_total"  # canaries an embedlab dynamo worker answered
# The input of the canary the dynamo stack sets: its payload has no `model`, which every
# request the frontend forwards carries, so no client's request is ever taken for a canary.
CANARY_INPUT = "embedlab-canary"
# The counters that count one request once on the worker servers users run (measured; see
# README, "The counters of the worker servers"). Each is read by handler alone, every status
# summed: a request the wrong worker refused (4xx) was still placed there.
VLLM_SERVE_METRIC = 'http_requests_total{handler="/v1/embeddings"}'  # vLLM's OpenAI server
INFINITY_METRIC = 'http_requests_total{handler="/v1/embeddings"}'  # Infinity with --url-prefix /v1
INFINITY_PLAIN_METRIC = 'http_requests_total{handler="/embeddings"}'  # Infinity as it starts by default
TEI_METRIC = "te_request_count"  # text-embeddings-inference, on /v1/embeddings and /embed
# Counters whose exporters create a series at its first increment (prometheus-fastapi-
# instrumentator's children, the Rust metrics crate's keys): on a worker that has not yet
# answered such a request the series is absent, which reads as 0, not as a missing metric.
LAZY_COUNTERS = ("http_requests_total", "te_request_count", "te_request_success", "te_embed_success")

# -- endpoints ----------------------------------------------------------------------------------
NAMESPACE = "dynamo"  # the embedded stack's namespace, as in the seed's launch script


def worker_endpoint(namespace: str, index: int) -> str:
    """Worker `index`'s endpoint path, as the seed's launch script names it (1-based)."""
    return f"{namespace}.embed-worker-{index + 1}.generate"


# -- serving ------------------------------------------------------------------------------------
HOST = "127.0.0.1"  # everything binds loopback unless told otherwise
FRONTEND_PORT = 8000
LEASE_TTL_S = 3.0  # a worker's lease on the embedded frontend, kept alive by heartbeat
MAX_BODY_BYTES = 8 << 20  # a request body larger than this is a 413
REQUEST_TIMEOUT_S = 120.0  # the frontend's wait for one worker's answer
DEVICE = "auto"  # CUDA where torch sees it, else the CPU
HASH_DIM = 384
FRONTEND_PROCESSES = 1  # `embedlab frontend --processes`: routing processes on the one port


def api_processes_for(cores: int) -> int:
    """`embedlab worker`'s ingest processes when --api-processes is not given and the engine
    feeds a device: one per 4 cores, at most 4, so 1 on a 2-core CI machine. (Engines
    without a device keep the single process: a pool of hash workers would multiply.)"""
    return max(1, min(4, cores // 4))


# -- harness ------------------------------------------------------------------------------------
STACK = "embedded"  # the stack a spec runs when it names none: embedlab's own frontend
ENGINE = "hash"  # the engine of embedlab's worker when a spec names none: no model to load
WORKER_SERVER = "embedlab"  # what a worker runs when a spec names none: embedlab's own worker
FAIRNESS_ALPHA = 0.001  # a same-model split with a p-value below this does not fit the weights
# A random split that does not fit is sent again, this many times as large, before it fails: a
# correct router then fails with probability alpha squared (1e-6), not alpha (1 run in 1000).
SPLIT_CONFIRM = 4
# The quiet window before a burst's first request and after its last response (settled): no
# request of embedlab's is in flight, so a counter that moves there counts someone else's.
QUIET_WINDOW_S = 0.2
# A check on a busy pool (traffic seen in the quiet windows, or `--busy`) runs its randomized
# on/off schedule up to this long, then ends inconclusive saying what it could still rule out
# (`--budget-s`; docs/busy-method.md).
BUSY_BUDGET_S = 60.0
# The busy check's own rate while a window is on, for a pool of two workers; larger pools send
# more (evidence.busy.busy_rate), and the sender's fit sends less where it cannot keep up. A
# pass rules out one request in ten counted twice or not at all, which the counters alone resolve
# against the other clients' noise at a speed that grows with the square of this rate over theirs:
# simulated with another client at 40 req/s, a correct 2x2 pool passed within 60 s in 76 % of
# checks (steady) at 80 req/s and in 100 % at 160 (median 27 s), and 1 request in 10 served twice
# was caught in 99 % and 100 % (docs/busy-method.md).
BUSY_RATE_PER_S = 160.0
# Dynamo 1.6.1's frontend logs the worker it picks for every request ("Selected worker", with the
# client's x-request-id) when its push router logs at info, in JSON lines with the second variable:
# an attached Dynamo check given that log (`--dynamo-log`) attributes each response by it
# (evidence/dynamo_log.py). Set on the frontend only: it adds about 1.3 KB of log per request.
DYNAMO_ATTRIBUTION_ENV = (
    ("DYN_LOG", "warn,dynamo_runtime::pipeline::network::egress::push_router=info"),
    ("DYN_LOGGING_JSONL", "true"),
)
# The header a request's id travels in: Dynamo's frontend logs it and echoes it on its answer.
REQUEST_ID_HEADER = "x-request-id"
# Scrapes of one snapshot in flight at once: every worker of a 64-worker pool together, and a
# bound on the sockets (one per worker, kept alive) that a far larger pool would hold open.
SCRAPE_CONCURRENCY = 64
# Failover watches this long for a killed worker to leave dispatch, where its stack judges
# no lease of its own (Dynamo's file discovery forgets a dead instance only after its ~10 s TTL).
FAILOVER_WATCH_S = 30.0
# `canaries=True`: a worker's endpoint idle this long gets a canary (Dynamo's default: 10 s).
CANARY_WAIT_S = 1
# vLLM on 2 cores takes 55-75 s to start two workers side by side, more under load.
STARTUP_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0
# The restart policy (`restart="on-exit"`): the first wait before a worker that exited starts
# again, doubled for each restart already in the window, up to the cap; once RESTART_LIMIT
# restarts fall within RESTART_WINDOW_S, the next exit is the last (the deployment gives up
# on it). Kubernetes backs a crash loop off from 10 s to 5 min and systemd stops after 5
# starts in 10 s; a worker whose lease lapsed in a fault must be back within a scenario's
# recovery wait (30 s), so the first waits here are shorter.
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 30.0
RESTART_LIMIT = 5
RESTART_WINDOW_S = 120.0
CELL_TIMEOUT_S = 600.0  # `embedlab regress`: what any one notebook cell may take
# The Jupyter kernel every notebook names and `embedlab regress` runs: the project's venv,
# registered for the user by `make install` so that any JupyterLab finds it.
KERNEL_NAME = "embedlab"
KERNEL_DISPLAY_NAME = "Python (embedlab)"
# The IPython extension that kernel loads (its kernelspec's `--ext`): the notebook's cell guard.
CELL_GUARD_EXTENSION = "embedlab.notebook.cellguard"
# Where a figure's description rides in a notebook output's metadata (`metadata["image/png"]`):
# written by the kernel that draws it, read by the report that gives it as the image's alt.
IMAGE_ALT_KEY = "alt"
# After SIGTERM, vLLM's Worker process spends seconds finalising its heap; a SIGKILL of
# the group before it is done would leave its shared-memory buffers in /dev/shm.
VLLM_STOP_TIMEOUT_S = 30.0
