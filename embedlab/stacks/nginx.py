"""nginx (Debian's 1.22) in front of embedlab's workers: a plain reverse proxy, one upstream of one model.

    embedlab scenario same-model --stack nginx [--router-mode round_robin|least_conn|random|random_two|ip_hash]

The run writes `<run_dir>/nginx/nginx.conf` with `daemon off;` and every path nginx would
write (pid, lock, temp folders; errors go to stderr, the frontend's log) under
`<run_dir>/nginx`, and starts `nginx -p <run_dir>/nginx -c ... -e stderr` as a managed
process; the system's nginx and /etc/nginx are never read. One worker process, so that
round-robin is one order for every request (each nginx worker process keeps its own).

- **One model.** nginx picks the upstream before it reads the request body, so it cannot
  route by the body's `model`: a deployment of two models is unsupported (UnsupportedError
  at start, with that reason); teams that put nginx in front of several models route by
  URL path. `GET /v1/models` lists the one model, from the config.
- **Balancing:** `--router-mode` takes nginx's own methods: `round_robin` (its default,
  judged exact), `random` (judged against the weights), `least_conn`, `random_two`
  (`random two least_conn`) and `ip_hash` (reported; every request comes from 127.0.0.1).
- **Failover:** `proxy_next_upstream error timeout non_idempotent`: a request whose
  worker refused or died is passed to the next server (embeddings are safe to repeat, and
  POST is not passed on without `non_idempotent`). A failed server is skipped for
  `fail_timeout` (nginx's default `max_fails=1 fail_timeout=10s`): nginx has no active
  health checks in its open-source build. `--proxy-next-upstream off` (what
  `without_retries` gives) turns it off.
- **Drain is a config change and a reload:** the server is marked `down` in a rewritten
  config, then `nginx -s reload`. `drain` returns once the new config serves and the old
  worker processes (which finish what they hold) are gone.
- **Status:** open-source nginx has no status API for upstreams (`stub_status` counts
  connections, for all of them together). What it would dispatch to is read from a page
  each config generation carries (`/upstreams` on a loopback port the run reserves): the
  servers of the config nginx has loaded, without `down`. A server nginx skips after a
  failure does not show there (it says so only in its error log), and it counts nothing
  per server: `backend_counts` is None.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext
from ..defaults import MAX_BODY_BYTES, REQUEST_TIMEOUT_S
from ..errors import ServerError, UnsupportedError
from ..evidence.split import Split
from .balancers import Balancer, error_json, models_json, pools_of
from .standalone import Standalone, StandaloneWorkers, snake_case_policy

__all__ = ["NginxStack"]

METHODS = {
    "round_robin": "",
    "least_conn": "least_conn;",
    "random": "random;",
    "random_two": "random two least_conn;",
    "ip_hash": "ip_hash;",
}
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
RELOAD_TIMEOUT_S = 15.0


@dataclass(kw_only=True)
class NginxRun:
    """One run of nginx: its workers, its status page, and what a drain changes: the config
    generation it has written, and the servers marked down in it."""

    workers: Standalone
    status_url: str
    generation: int = 0
    down: set[int] = field(default_factory=set)


class NginxStack(BaseStack):
    """nginx: one upstream of one model's workers; drain by rewriting the config and reloading."""

    name = "nginx"
    policies: ClassVar[dict[str, Split]] = {
        "round_robin": Split.EXACT,
        "random": Split.WEIGHTS,
        "least_conn": Split.REPORT,
        "random_two": Split.REPORT,
        "ip_hash": Split.REPORT,
    }
    default_policy = "round_robin"
    model_aware = False  # it picks an upstream before it reads the body
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    lacks: ClassVar[dict[str, str]] = {
        "counts_backends": "open-source nginx counts nothing per upstream server"
    }
    balancer: ClassVar[Balancer] = Balancer(
        stack="nginx",
        binary="nginx",
        deb="nginx",
        switches={"--proxy-next-upstream": "error timeout non_idempotent"},
    )
    workers: ClassVar[StandaloneWorkers] = StandaloneWorkers(load_format="vllm")

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def check(self, spec: DeploymentSpec) -> None:
        super().check(spec)
        self.balancer.check(spec)

    def frontend_version(self) -> str | None:
        return self.balancer.version()

    def prepare(self, ctx: StackContext[Any]) -> NginxRun:
        pools = pools_of(ctx.spec)
        if len(pools) > 1:
            raise UnsupportedError(
                "nginx picks an upstream before it reads the request body, so it cannot route by the body's "
                f"'model' ({', '.join(p.model for p in pools)}): one nginx serves one model's pool"
            )
        conf = self.balancer.make_conf_dir(ctx)
        workers = self.workers.prepare(ctx)
        for sub in TEMP_PATHS:
            (conf / "tmp" / sub).mkdir(parents=True, exist_ok=True)
        return NginxRun(workers=workers, status_url=f"http://{ctx.host}:{ctx.reserve()}")

    def worker(
        self, ctx: StackContext[NginxRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        return self.workers.process(ctx, ctx.state.workers, index, worker, system_port)

    def direct_url(self, client: httpx.Client, ctx: StackContext[NginxRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def listed_models(self, client: httpx.Client, ctx: StackContext[NginxRun]) -> set[str] | None:
        return None  # its /v1/models is the config's own list, answered whatever is live

    def _argv(self, ctx: StackContext[NginxRun], *extra: str) -> list[str]:
        conf = self.balancer.conf_dir(ctx)
        return [
            self.balancer.program(),
            "-p",
            str(conf),
            "-c",
            str(conf / "nginx.conf"),
            "-e",
            "stderr",
            *extra,
        ]

    def frontend(self, ctx: StackContext[NginxRun]) -> ProcessSpec:
        self._write(ctx)
        return ProcessSpec(role="frontend", argv=self._argv(ctx), ready_url=f"{ctx.frontend_url}/v1/models")

    def _write(self, ctx: StackContext[NginxRun]) -> None:
        """The next config generation, replacing the last in one rename."""
        ctx.state.generation += 1
        path = self.balancer.conf_dir(ctx) / "nginx.conf"
        partial = path.with_suffix(".conf.new")
        partial.write_text(self.config(ctx))
        partial.replace(path)

    def config(self, ctx: StackContext[NginxRun]) -> str:
        conf = self.balancer.conf_dir(ctx)
        run = ctx.state
        pool = pools_of(ctx.spec)[0]
        status = {
            "generation": run.generation,
            "servers": [
                {
                    "pool": pool.name,
                    "worker": i,
                    "address": run.workers.address(i),
                    "down": i in run.down,
                }
                for i in pool.workers
            ],
        }
        # As root, nginx would run its workers as nobody, who may not enter the run dir.
        user = (
            f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
            if os.geteuid() == 0
            else ""
        )
        next_upstream = self.balancer.settings(ctx.spec)["--proxy-next-upstream"]
        no_worker = error_json("No worker answered", type="server_error", param=None, code="upstream_failed")
        too_large = error_json(
            f"The request body is larger than {MAX_BODY_BYTES} bytes", param=None, code="request_too_large"
        )
        servers = "\n".join(
            f"        server {run.workers.address(i)}{' down' if i in run.down else ''};"
            for i in pool.workers
        )
        temp = "\n".join(f"    {sub}_temp_path {conf / 'tmp' / sub};" for sub in TEMP_PATHS)
        return f"""daemon off;
worker_processes 1;
{user}
pid {conf / "nginx.pid"};
lock_file {conf / "nginx.lock"};
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
{temp}
    client_max_body_size {MAX_BODY_BYTES};
    upstream {pool.name} {{
        {METHODS[str(self.policy(ctx.spec.router_mode))]}
{servers}
        keepalive 32;
    }}
    server {{
        listen {ctx.host}:{ctx.frontend_port};
        location = /v1/models {{ default_type application/json; return 200 '{models_json(ctx.spec)}'; }}
        location / {{
            proxy_pass http://{pool.name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout {int(REQUEST_TIMEOUT_S)}s;
            proxy_next_upstream {next_upstream};
        }}
        error_page 502 504 = @no_worker;
        error_page 413 = @too_large;
        location @no_worker {{ default_type application/json; return 502 '{no_worker}'; }}
        location @too_large {{ default_type application/json; return 413 '{too_large}'; }}
    }}
    server {{
        listen {run.status_url.removeprefix("http://")};
        location = /upstreams {{
            default_type application/json;
            keepalive_timeout 0;
            return 200 '{json.dumps(status)}';
        }}
    }}
}}
"""

    def health_url(self, ctx: StackContext[NginxRun]) -> str:
        return f"{ctx.state.status_url}/upstreams"

    def dispatchable_endpoints(self, ctx: StackContext[NginxRun], health: Any) -> set[str]:
        """The servers of the config nginx has loaded that are not marked down."""
        return {ctx.endpoint(s["worker"]) for s in health.get("servers", []) if not s["down"]}

    def _reload(self, client: httpx.Client, ctx: StackContext[NginxRun]) -> None:
        """Write the next generation and reload; back once only its worker processes remain.

        The old worker processes keep accepting connections until they take the master's
        signal, so the new config's status page alone does not say the drain took effect.
        """
        master = int((self.balancer.conf_dir(ctx) / "nginx.pid").read_text())
        old = set(_children(master))
        self._write(ctx)
        done = subprocess.run(self._argv(ctx, "-s", "reload"), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise ServerError(f"nginx -s reload failed: {done.stderr.strip()}", name="frontend")
        deadline = time.monotonic() + RELOAD_TIMEOUT_S
        while old & set(_children(master)) or (
            client.get(self.health_url(ctx)).json().get("generation") != ctx.state.generation
        ):
            if time.monotonic() > deadline:
                raise ServerError(
                    f"nginx did not finish reloading config generation {ctx.state.generation} within "
                    f"{RELOAD_TIMEOUT_S:g} s",
                    name="frontend",
                )
            time.sleep(0.02)

    def drain(self, client: httpx.Client, ctx: StackContext[NginxRun], index: int) -> None:
        ctx.state.down.add(index)
        self._reload(client, ctx)

    def resume(self, client: httpx.Client, ctx: StackContext[NginxRun], index: int) -> None:
        ctx.state.down.discard(index)
        self._reload(client, ctx)

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--proxy-next-upstream", "off")


def _children(master: int) -> list[int]:
    """The nginx master's worker processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the fields start after the last ')'.
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == master:
            found.append(int(entry.name))
    return found
