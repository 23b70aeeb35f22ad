"""HAProxy (Debian's 2.6) in front of embedlab's workers: the balancer many teams run instead of an LLM router.

    embedlab scenario same-model --stack haproxy [--router-mode roundrobin|static-rr|leastconn|random|first]

The run writes `<run_dir>/haproxy/haproxy.cfg` and starts `haproxy -db -f` on it, in the
foreground as a managed process; the system's haproxy and /etc/haproxy are never read.

- **Pools by the body's `model`.** A plain balancer routes by URL, but HAProxy can read
  the body: `option http-buffer-request` holds the request until its body is in (up to
  `BODY_BUFFER_BYTES`), `req.body,json_query('$.model')` reads the field, and a map file
  (`models.map`, model -> backend) picks the backend, one per model pool. So clients send
  exactly what they send to any OpenAI server; a `model` past the first
  `BODY_BUFFER_BYTES` of a body is not seen. No `model` string: 400; a model no pool
  serves: 404; `GET /v1/models` lists the pools' models; no worker able to answer: 502,
  503 or 504. All are OpenAI JSON from files in the run dir, answered by HAProxy itself.
- **Balancing:** `--router-mode` takes HAProxy's own `balance` names; `roundrobin` (its
  default) is judged exact, the rest reported: `random` draws two servers and takes the
  less loaded one, `leastconn` and `first` may favour one server.
- **Health:** `option httpchk GET /health` every second (down after 2 failures, up after
  1 success): a worker's own /health is 503 while it is starting or drained.
- **Failover:** `retries 3`, `option redispatch 1` (each retry goes to another server),
  `retry-on conn-failure empty-response response-timeout`: embeddings are safe to repeat,
  so a request whose worker died mid-answer is sent again. `--retries 0` (what
  `without_retries` gives) turns all of it off.
- **Drain:** the runtime API on `<run_dir>/haproxy/admin.sock` (an abstract socket where
  that path would pass a socket path's 107 bytes): `set server P/wN state drain` (no new
  requests; the worker keeps serving what it has), `state ready` to resume.
- **Status:** its stats page, `/stats;json`, on a loopback port the run reserves: a
  server is dispatchable while its status is UP (also "UP 1/2", failing checks but not
  yet down) or "no check". Its Prometheus exporter is on the same port, `/metrics`.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext
from ..defaults import REQUEST_TIMEOUT_S
from ..errors import ConfigError, ServerError
from ..evidence.split import Split
from .balancers import Balancer, error_json, models_json, pools_of
from .standalone import Standalone, StandaloneWorkers, snake_case_policy

__all__ = ["HAProxyStack"]

# Room for a whole request body, where `model` may come last (OpenAI's Python client sends
# it after `input`); L7 retries (retry-on empty-response) also hold a copy of the request in
# one such buffer. Measured under hey: 85-105 us of HAProxy CPU per request with buffers of
# 16 to 256 KiB, 750-1,180 us with 1 MiB (the allocator maps and unmaps a buffer that large
# for every request). `maxconn` bounds the memory: 2 buffers x 512 connections = 256 MiB.
BODY_BUFFER_BYTES = 256 << 10
MAX_CONNECTIONS = 512
# A unix socket's path holds at most 107 bytes (sun_path).
MAX_SOCKET_PATH = 107
# HAProxy's exporter: responses per server, by status class; health checks are not counted.
RESPONSES = "haproxy_server_http_responses_total"
ERRORS = {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass(frozen=True, kw_only=True)
class HAProxyRun:
    """One run of HAProxy: its workers, its stats page, and its runtime API's socket (as HAProxy
    binds it, and as a client connects to it)."""

    workers: Standalone
    stats_url: str
    bind: str
    connect: str


class HAProxyStack(BaseStack):
    """HAProxy: one backend per model pool, chosen by the body's `model`; runtime-API drain."""

    name = "haproxy"
    policies: ClassVar[dict[str, Split]] = {
        "roundrobin": Split.EXACT,
        "static_rr": Split.EXACT,
        "leastconn": Split.REPORT,
        "random": Split.REPORT,  # two draws by default: the less loaded of two random servers
        "first": Split.REPORT,
    }
    default_policy = "roundrobin"
    model_aware = True  # it reads the body's model (json_query) and picks the model's backend
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    balancer: ClassVar[Balancer] = Balancer(
        stack="haproxy", binary="haproxy", deb="haproxy", switches={"--retries": "3"}
    )
    workers: ClassVar[StandaloneWorkers] = StandaloneWorkers(load_format="vllm")

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def check(self, spec: DeploymentSpec) -> None:
        super().check(spec)
        self.balancer.check(spec)
        retries = self.balancer.settings(spec)["--retries"]
        if not retries.isdigit():
            raise ConfigError(f"--retries for the haproxy stack must be a whole number, got {retries!r}")

    def frontend_version(self) -> str | None:
        return self.balancer.version()

    def prepare(self, ctx: StackContext[Any]) -> HAProxyRun:
        conf = self.balancer.make_conf_dir(ctx)
        workers = self.workers.prepare(ctx)
        # Its stats page and Prometheus exporter, on a port the run reserves.
        stats = f"http://{ctx.host}:{ctx.reserve()}"
        path = conf / "admin.sock"
        # The runtime API, as HAProxy binds it and as a client connects to it. A unix socket's
        # path holds at most 107 bytes; a deeper run dir (a regression run's cells can be) gets
        # an abstract socket instead: no file at all, gone with HAProxy.
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            bind = connect = str(path)
        else:
            name = f"embedlab-haproxy-{stats.rsplit(':', 1)[1]}-{secrets.token_hex(4)}"
            # HAProxy binds the whole sun_path, the name zero-padded: a client must send the same.
            bind, connect = f"abns@{name}", f"\0{name}".ljust(MAX_SOCKET_PATH + 1, "\0")
        return HAProxyRun(workers=workers, stats_url=stats, bind=bind, connect=connect)

    def worker(
        self, ctx: StackContext[HAProxyRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        return self.workers.process(ctx, ctx.state.workers, index, worker, system_port)

    def direct_url(self, client: httpx.Client, ctx: StackContext[HAProxyRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def listed_models(self, client: httpx.Client, ctx: StackContext[HAProxyRun]) -> set[str] | None:
        return None  # its /v1/models is the config's own list, answered whatever is live

    def frontend(self, ctx: StackContext[HAProxyRun]) -> ProcessSpec:
        conf = self.balancer.conf_dir(ctx)
        (conf / "models.json").write_text(models_json(ctx.spec))
        served = ", ".join(dict.fromkeys(ctx.spec.models))
        (conf / "no-model.json").write_text(
            error_json(
                f"This load balancer routes by the body's 'model' (models: {served}); "
                f"the request has no 'model' string in its first {BODY_BUFFER_BYTES} bytes",
                param="model",
                code="missing_model",
            )
        )
        (conf / "unknown-model.json").write_text(
            error_json(
                f"The model does not exist on this load balancer. Served models: {served}",
                param="model",
                code="model_not_found",
            )
        )
        # What HAProxy answers itself when no worker could (all down, or none answered in time).
        for status, reason in ERRORS.items():
            body = error_json(
                f"No worker answered: {reason}", type="server_error", param=None, code="upstream_failed"
            )
            (conf / f"{status}.http").write_text(
                f"HTTP/1.0 {status} {reason}\r\nCache-Control: no-cache\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\n\r\n{body}"
            )
        pools = pools_of(ctx.spec)
        (conf / "models.map").write_text("".join(f"{p.model} {p.name}\n" for p in pools))
        path = conf / "haproxy.cfg"
        path.write_text(self.config(ctx))
        return ProcessSpec(
            role="frontend",
            argv=[self.balancer.program(), "-db", "-f", str(path)],
            ready_url=f"{ctx.frontend_url}/v1/models",
        )

    def config(self, ctx: StackContext[HAProxyRun]) -> str:
        conf = self.balancer.conf_dir(ctx)
        retries = int(self.balancer.settings(ctx.spec)["--retries"])
        failover = (
            [
                f"retries {retries}",
                "option redispatch 1",
                "retry-on conn-failure empty-response response-timeout",
            ]
            if retries
            else ["retries 0", "no option redispatch", "retry-on none"]
        )
        lines = [
            "global",
            f"    stats socket {ctx.state.bind} mode 600 level admin",
            f"    tune.bufsize {BODY_BUFFER_BYTES}",
            f"    maxconn {MAX_CONNECTIONS}",
            "defaults",
            "    mode http",
            "    timeout connect 2s",
            "    timeout check 2s",
            "    timeout http-request 10s",
            f"    timeout client {int(REQUEST_TIMEOUT_S)}s",
            f"    timeout server {int(REQUEST_TIMEOUT_S)}s",
            *(f"    {line}" for line in failover),
            *(f"    errorfile {status} {conf / f'{status}.http'}" for status in ERRORS),
            "frontend embeddings",
            f"    bind {ctx.host}:{ctx.frontend_port}",
            "    option http-buffer-request",
            f"    http-request return status 200 content-type application/json file {conf / 'models.json'}"
            " if { path /v1/models } METH_GET",
            "    http-request set-var(txn.model) req.body,json_query('$.model')",
            f"    http-request return status 400 content-type application/json file {conf / 'no-model.json'}"
            " if !{ var(txn.model) -m found }",
            f"    use_backend %[var(txn.model),map({conf / 'models.map'},unknown_model)]",
            "frontend status",
            f"    bind {ctx.state.stats_url.removeprefix('http://')}",
            "    http-request use-service prometheus-exporter if { path /metrics }",
            "    stats enable",
            "    stats uri /stats",
            "backend unknown_model",
            f"    http-request return status 404 content-type application/json file {conf / 'unknown-model.json'}",
        ]
        balance = str(self.policy(ctx.spec.router_mode)).replace("_", "-")
        for pool in pools_of(ctx.spec):
            lines += [
                f"backend {pool.name}",
                f"    balance {balance}",
                "    option httpchk GET /health",
                "    http-check expect status 200",
                "    default-server check inter 1s fall 2 rise 1",
                *(f"    server w{i} {ctx.state.workers.address(i)}" for i in pool.workers),
            ]
        return "\n".join(lines) + "\n"

    def health_url(self, ctx: StackContext[HAProxyRun]) -> str:
        return f"{ctx.state.stats_url}/stats;json"

    def dispatchable_endpoints(self, ctx: StackContext[HAProxyRun], health: Any) -> set[str]:
        """Servers HAProxy's stats call UP (or unchecked): not DOWN, not drained, not in maintenance."""
        dispatchable = set()
        endpoints = ctx.state.workers.endpoint_of
        urls = ctx.state.workers.urls
        for row in health:
            fields = {f["field"]["name"]: f["value"].get("value") for f in row if "field" in f}
            name, status = str(fields.get("svname", "")), str(fields.get("status", ""))
            if row and row[0].get("objType") == "Server" and name.startswith("w"):
                if status.startswith("UP") or status == "no check":
                    dispatchable.add(endpoints[urls[int(name[1:])]])
        return dispatchable

    def runtime(self, ctx: StackContext[HAProxyRun], command: str) -> str:
        """One command on HAProxy's runtime API; its answer (empty when it just did it)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(ctx.state.connect)
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode().strip()

    def _set_state(self, ctx: StackContext[HAProxyRun], index: int, state: str) -> None:
        pool = next(p for p in pools_of(ctx.spec) if index in p.workers)
        command = f"set server {pool.name}/w{index} state {state}"
        answer = self.runtime(ctx, command)
        if answer:
            raise ServerError(f"HAProxy's runtime API refused '{command}': {answer}", name="frontend")

    def drain(self, client: httpx.Client, ctx: StackContext[HAProxyRun], index: int) -> None:
        self._set_state(ctx, index, "drain")

    def resume(self, client: httpx.Client, ctx: StackContext[HAProxyRun], index: int) -> None:
        self._set_state(ctx, index, "ready")

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--retries", "0")

    def backend_counts(self, client: httpx.Client, ctx: StackContext[HAProxyRun]) -> dict[int, float]:
        """Responses HAProxy counted from each worker since it started (all status classes).

        Its health checks are not among them; a retried request counts on each server that answered.
        """
        text = client.get(f"{ctx.state.stats_url}/metrics").text
        counts = {i: 0.0 for i in range(len(ctx.spec.workers))}
        for family in text_string_to_metric_families(text):
            if family.type != "counter":
                continue
            for sample in family.samples:
                server = sample.labels.get("server", "")
                if sample.name == RESPONSES and server.startswith("w") and server[1:].isdigit():
                    counts[int(server[1:])] += sample.value
        return counts
