"""ScenarioPlan: the plain values of a notebook's parameters cell or the CLI, turned into a run.

`run_scenario(plan)` launches the deployment the plan describes (or attaches to one),
runs the scenario, and tears everything down, also when the scenario fails. Every
mistake in the values is a `ConfigError` when the plan is made, before anything launches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..cluster.deployment import Deployment
from ..cluster.etcd import discovered
from ..cluster.spec import DISCOVERY_BACKENDS, ENDPOINT_LAYOUTS, DeploymentSpec, WorkerSpec
from ..cluster.stack import PREFIX_AWARE, prefix_aware
from ..cluster.stack_registry import STACKS, get_stack
from ..cluster.worker_server import (
    WORKER_SERVERS,
    counter_notes,
    is_foreign,
    model_dir,
    startup_timeout,
    workers_text,
)
from ..defaults import (
    API_KEY_ENV,
    CANARY_WAIT_S,
    DISCOVERY,
    ENGINE,
    LEASE_TTL_S,
    METRIC,
    RESTART_BACKOFF_S,
    RESTART_LIMIT,
    RESTART_WINDOW_S,
    STACK,
    STARTUP_TIMEOUT_S,
    WORKER_SERVER,
)
from ..engines import ENGINES, engine_traits
from ..engines.models import model_names, resolve_model_path
from ..errors import ConfigError, EmbedlabError, UnsupportedError
from ..evidence.access import HTTP_CONFIG, ScrapeAuth, granted
from ..evidence.metrics import MetricQuery
from ..evidence.prom_source import (
    DiscoveredWorker,
    discover_workers,
    discovered_text,
    parse_label_selector,
    prometheus_counters,
)
from ..evidence.router import router_metrics
from ..evidence.target import Target, attach, check_access, check_prometheus_access, check_system_urls
from ..evidence.traffic import probing
from ..freshness import guarded
from ..progress import LaunchProgress
from ..verdicts import Verdict
from .params import describe_params, knob, knobs, params_from
from .registry import Scenario, get_scenario
from .result import ScenarioResult, given_up

__all__ = ["ScenarioPlan", "check_knob_names", "run_scenario"]

# What a plan field left unset (None) becomes when its scenario sets no value for it.
FALLBACKS: dict[str, Any] = {
    "workers": 2,
    "lease_ttl": LEASE_TTL_S,
    "restart": "never",
    "prefill_workers": 0,
    "endpoints": "worker",
}
RESTARTS = ("never", "on-exit")


def _engines() -> list[str]:
    return sorted(ENGINES)


def _servers() -> list[str]:
    return WORKER_SERVERS.names()


def _stage(replica: int, prefill: int) -> str | None:
    """Replica `replica`'s stage where each model's first `prefill` replicas only prefill."""
    if not prefill:
        return None
    return "prefill" if replica < prefill else "decode"


def _tuple(value: Any, kind: Callable[[Any], Any] = str) -> tuple[Any, ...]:
    """Accept a list, a tuple, a comma-separated string, or nothing."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(kind(v.strip()) for v in value.split(",") if v.strip())
    if isinstance(value, Iterable):
        return tuple(kind(v) for v in value)
    return (kind(value),)


@dataclass(frozen=True, kw_only=True)
class ScenarioPlan:
    """Everything one scenario run needs, as plain values: the deployment, attach and run
    settings every scenario shares, and `params`, the scenario's own knobs (an instance of
    the class it registered with `params=`, or a mapping of some of them; the rest keep
    their defaults). `workers`, `lease_ttl` and `restart` left at None take the scenario's
    values, else embedlab's.

    Each shared setting is a `knob` like a scenario's own: its help and bounds are written
    here once, and `embedlab scenario NAME --help` lists them under the same names
    (`model_paths` is `--model-paths`, repeated, also spelled `--model-path`).
    """

    scenario: str
    stack: str = knob(STACK, "the stack: embedlab's own frontend, dynamo, or a router", choices=STACKS.names)
    engine: str = knob(
        ENGINE, "embedlab's worker's engine (a worker server of its own has none)", choices=_engines
    )
    worker_server: str = knob(
        WORKER_SERVER, "what each worker runs: embedlab's worker, vllm serve, Infinity, ...", choices=_servers
    )
    models: tuple[str, ...] = knob(
        (), "model names; worker i serves models[i] in a per-model scenario (none: embed-model, or model-a and "
        "model-b, for hash; tiny-bert, tiny-qwen3 otherwise)",
    )  # fmt: skip
    model_paths: tuple[str, ...] = knob(
        (), "one per model, or one for all: a directory or a known model's name, e.g. all-MiniLM-L6-v2 "
        "(none: tiny local models)", each=True,
    )  # fmt: skip
    workers: int | None = knob(None, "replicas of each model", min=1)
    replicas: tuple[int, ...] = knob((), "replicas per model, in place of workers (give one of the two): 4,2")
    prefill_workers: int | None = knob(
        None, "disaggregated serving: the first N replicas of each model only prefill, the rest only "
        "decode (Dynamo's mocker; None or 0: every worker does both)", min=0,
    )  # fmt: skip
    weights: tuple[float, ...] = knob((), "routing weight per worker, model by model (none: all equal)")
    seed: int | None = knob(0, "seeds the frontend's routing choices")
    nonce: str = knob(
        "", "the request bodies' run nonce: none draws a fresh one, which no cache has seen; a "
        "run's recorded one (results.json: probes) sends its bodies again, on purpose",
    )  # fmt: skip
    router_mode: str | None = knob(None, "the frontend's policy, in its own names (None: its default)")
    endpoints: str | None = knob(
        None, "worker: an endpoint per worker (the seed's layout); model: the workers of a model are "
        "instances of one endpoint", choices=ENDPOINT_LAYOUTS,
    )  # fmt: skip
    pooling: str | None = knob(None, "the engine's pooling (None: the model's own)")
    max_model_len: int | None = knob(None, "the engine's longest input in tokens (None: the model's)", min=1)
    frontend_url: str = knob("", "attach: the frontend of a running deployment (launches nothing)")
    system_urls: tuple[str, ...] = knob((), "attach: each worker's metrics URL, in worker order", each=True)
    metric: str = knob(METRIC, 'the counter, e.g. http_requests_total{handler="/v1/embeddings"}')
    run_dir: str = knob("", "where server logs go (none: a new folder under the temp dir)")
    startup_timeout: float = knob(STARTUP_TIMEOUT_S, "seconds a worker may take to start", positive=True)
    discovery: str = knob(DISCOVERY, "dynamo: file, or etcd (the run starts one)", choices=DISCOVERY_BACKENDS)
    hosts: int = knob(1, "simulated hosts: more than 1 runs network namespaces (root; dynamo on etcd)", min=1)
    lease_ttl: float | None = knob(None, "seconds a lease lives", positive=True)
    restart: str | None = knob(
        None, "workers: never, or on-exit (back on their host when they exit)", choices=RESTARTS
    )
    restart_limit: int | None = knob(
        None, f"on-exit: restarts within {RESTART_WINDOW_S:g} s before a worker is given up on "
        f"(None: {RESTART_LIMIT})", min=0,
    )  # fmt: skip
    restart_backoff: float | None = knob(
        None,
        f"on-exit: seconds before a restart, doubled for each recent one (None: {RESTART_BACKOFF_S:g})",
        min=0,
    )
    canaries: bool = knob(
        False, f"dynamo: Dynamo's health-check canaries on every worker idle for {CANARY_WAIT_S} s"
    )
    etcd_endpoints: str = knob("", "attach: the cluster's etcd, to list the instances it believes live")
    worker_models: tuple[str, ...] = knob(
        (), "attach: the model each system URL's worker serves, e.g. A,A,B,B"
    )
    dynamo_log: str = knob(
        "", "attach: a Dynamo 1.6.1 frontend's log, JSON lines with its push router at info "
        "(DYN_LOG, DYN_LOGGING_JSONL): each response attributed to its worker by it",
    )  # fmt: skip
    router_metrics: str = knob(
        "", "attach: the router's own /metrics, where it counts per model the requests it takes and "
        "answers (Dynamo's frontend, embedlab's; others with --router-admitted and the two after it): "
        "read beside the workers' counters at every window of a busy check",
    )  # fmt: skip
    router_admitted: str = knob("", "attach: the router's counter of requests it takes, per model")
    router_answered: str = knob("", "attach: the router's counter of requests it answers, per model")
    router_success: str = knob("", "attach: the labels of a successful answer on it, e.g. status=200")
    api_key: str = knob(
        "", f"attach: the frontend's API key, sent as Authorization: Bearer to it alone (none: ${API_KEY_ENV}, "
        "where set, which keeps it out of the shell's history); never written anywhere", secret=True,
    )  # fmt: skip
    scrape_config: str = knob(
        "", "attach: a file of Prometheus scrape-config fields for every worker's metrics URL: "
        "authorization, basic_auth, tls_config (ca_file, cert_file, key_file, insecure_skip_verify); "
        "YAML, TOML or JSON",
    )  # fmt: skip
    prometheus_url: str = knob(
        "", "attach: read the workers' counters through this Prometheus (its HTTP API), each burst "
        "and busy window aligned to its scrapes: slower by about a scrape interval a snapshot",
    )  # fmt: skip
    prometheus_selector: str = knob(
        "", "attach: PromQL label matchers added to every query of --prometheus-url (the workers' job, say)"
    )
    prometheus_http_config: str = knob(
        "", "attach: how to reach --prometheus-url behind an ingress, a file of its HTTP client config "
        "(promtool's --http.config.file): authorization, basic_auth, tls_config (ca_file, cert_file, "
        "key_file, insecure_skip_verify); sent to its origin alone; YAML, TOML or JSON",
    )  # fmt: skip
    discover: str = knob(
        "", "attach: find the workers by their labels among the targets of --prometheus-url, "
        "prometheus:SELECTOR with SELECTOR a PromQL label selector, such as on the Dynamo operator's "
        "nvidia.com/dynamo-component-type (in place of --system-url; each worker's model from its "
        "target's model label or its counter's)",
    )  # fmt: skip
    worker_args: tuple[str, ...] = knob((), "an extra argument for every worker", each=True)
    frontend_args: tuple[str, ...] = knob((), "an extra argument for the frontend", each=True)
    progress: bool = False  # progress bars for bursts (the command line's --progress also shows the launch)
    params: Any = None  # the scenario's knobs; None: its defaults

    def __post_init__(self) -> None:
        for name, item in _tuple_fields():  # a list, a comma-separated string or nothing: a tuple
            object.__setattr__(self, name, _tuple(getattr(self, name), item))
        scenario = self.definition  # an unknown scenario fails here
        check_knob_names(scenario)
        object.__setattr__(self, "params", params_from(scenario.params, self.params, scenario=self.scenario))
        if self.stack not in STACKS:
            raise ConfigError(f"unknown stack {self.stack!r}; choose from {', '.join(STACKS.names())}")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        workers = self.workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"workers must be a whole number of at least 1, got {workers!r}")
        if any(w <= 0 for w in self.weights):
            raise ConfigError(f"weights must be positive, got {list(self.weights)}")
        self._check_prometheus()
        if bool(self.frontend_url) != bool(self.system_urls or self.discover):
            raise ConfigError("attach mode needs both a frontend URL and one system URL per worker")
        if (self.router_metrics or self.router_admitted) and not self.attached:
            raise ConfigError(
                "router_metrics reads an attached router's own counts (a launched stack's are read "
                "where it keeps them): give frontend_url and system_urls too"
            )
        if self.dynamo_log and not self.attached:
            raise ConfigError(
                "dynamo_log reads an attached Dynamo frontend's log: give frontend_url and system_urls too"
            )
        if (self.api_key or self.scrape_config) and not self.attached:
            raise ConfigError(
                "api_key and scrape_config are what an attached deployment is given: give frontend_url "
                "and system_urls too"
            )
        if self.scrape_config:
            ScrapeAuth.load(self.scrape_config)  # a mistake in the file is one here, before anything runs
        if self.attached and (scenario.launches or scenario.deploys):
            raise ConfigError(
                f"{self.scenario} changes a worker: it cannot run attached, only on a deployment it launches"
            )
        MetricQuery.parse(self.metric)
        self._check_pool()
        plan = self.resolved()
        if not self.attached:
            plan._check_models()
            # The deployment's own checks (hosts, discovery, weights, the stack's limits), with
            # stand-in model paths: tiny models are built when the plan launches, not here.
            models = plan.models or plan.default_models()
            paths = (
                (None,) * len(models) if plan.hashes else (plan.model_paths or ("model-dir",)) * len(models)
            )
            get_stack(plan.stack).check(plan._spec_of((models, paths[: len(models)]), workers=plan.workers))
        if scenario.check is not None:
            scenario.check(plan)

    def _check_prometheus(self) -> None:
        """Counters through Prometheus, and workers found by their labels: what goes with what."""
        if (self.prometheus_url or self.prometheus_selector or self.discover) and not self.frontend_url:
            raise ConfigError(
                "prometheus_url, prometheus_selector and discover read an attached deployment: give frontend_url too"
            )
        if self.prometheus_selector:
            parse_label_selector(self.prometheus_selector)
        if self.prometheus_http_config and not self.prometheus_url:
            raise ConfigError(
                "prometheus_http_config says how to reach the Prometheus of --prometheus-url: give it too"
            )
        if self.prometheus_http_config:  # a mistake in the file is one here, before anything runs
            ScrapeAuth.load(self.prometheus_http_config, what=HTTP_CONFIG)
        if not self.discover:
            return
        kind, _, selector = self.discover.partition(":")
        if kind != "prometheus" or not selector.strip():
            raise ConfigError(f"discover takes prometheus:SELECTOR, got {self.discover!r}")
        parse_label_selector(selector)
        if not self.prometheus_url:
            raise ConfigError(
                "discover prometheus:SELECTOR lists the targets of --prometheus-url: give it too"
            )
        if self.system_urls or self.worker_models:
            raise ConfigError(
                "discover finds the workers and their models: leave out system_urls and worker_models"
            )

    def discovered(self) -> list[DiscoveredWorker]:
        """The workers `discover` finds among the targets of `prometheus_url`, in worker order."""
        return discover_workers(
            self.prometheus_url,
            self.discover.partition(":")[2],
            metric=self.metric,
            http_config=self.prometheus_http_config,
        )

    def _check_pool(self) -> None:
        """The pool's shape: one model for a one-model scenario; replicas and attached models that fit."""
        named = self.models or tuple(dict.fromkeys(self.worker_models))
        if self.definition.layout == "pool" and len(named) > 1:
            raise ConfigError(
                f"{self.scenario} takes one model, got {len(named)} ({', '.join(named)}); "
                "a scenario over several models is multi-model (or mixed)"
            )
        if any(isinstance(k, bool) or k < 1 for k in self.replicas):
            raise ConfigError(f"replicas must be whole numbers of at least 1, got {list(self.replicas)}")
        if self.replicas and self.workers is not None:
            raise ConfigError(
                f"workers = {self.workers} and replicas = {list(self.replicas)} both count the workers: set workers "
                "= None to use replicas, or replicas = [] to use workers (command line: leave out one of the two)"
            )
        check_system_urls(self.system_urls, models=self.worker_models or None, what="worker models")
        if self.worker_models and self.models and set(self.models) != set(self.worker_models):
            raise ConfigError(
                f"the workers serve {', '.join(dict.fromkeys(self.worker_models))}, but models names "
                f"{', '.join(self.models)}: leave models out, worker_models say it"
            )

    def _check_models(self) -> None:
        """Model names and paths that would fail only when the workers start."""
        if self.hashes or is_foreign(self.worker_server):
            return  # a server of its own serves a default model under any name
        models = self.models or self.default_models()
        if self.model_paths and len(self.model_paths) not in (1, len(models)):
            raise ConfigError(f"{len(models)} models but {len(self.model_paths)} model paths")
        unknown = [m for m in models if m not in model_names()]
        if not self.model_paths and unknown:
            raise ConfigError(
                f"model {unknown[0]!r} needs a model path (model_paths); models known by name: {', '.join(model_names())}"
            )

    @classmethod
    @guarded("plan")  # in a notebook: refuses values a failed parameters cell left
    def from_params(cls, **values: Any) -> ScenarioPlan:
        """Build from flat values (a notebook's parameters cell, a matrix's set): the plan's own
        fields, and the scenario's knobs by name (or in a `params` mapping). A name that is
        neither is an error, never a silent no-op."""
        plan_fields = {f.name for f in fields(cls)} - {"params"}
        given = values.pop("params", None) or {}
        if not isinstance(given, Mapping):
            raise ConfigError(f"params must be a mapping of the scenario's knobs, got {given!r}")
        if "scenario" not in values:
            raise ConfigError("a plan needs a scenario")
        knob_names = {k.name for k in knobs(get_scenario(values["scenario"]).params)}
        unknown = sorted(set(values) - plan_fields - knob_names)
        if unknown:
            takes = ", ".join(sorted(knob_names)) or "none"
            raise ConfigError(
                f"unknown scenario parameters: {', '.join(unknown)} ({values['scenario']}'s own knobs: {takes})"
            )
        if values.get("seed") in ("", None):
            values["seed"] = None
        own = {name: values.pop(name) for name in list(values) if name in knob_names}
        return cls(**values, params={**own, **given})

    @property
    def definition(self) -> Scenario:
        """The registered scenario this plan runs."""
        return get_scenario(self.scenario)

    @property
    def attached(self) -> bool:
        return bool(self.frontend_url)

    # Workers whose engine loads no model (embedlab's hash engine): no model directory anywhere
    # (an unknown worker server fails here).
    hashes = property(
        lambda self: not engine_traits(self.engine).needs_model and not is_foreign(self.worker_server)
    )

    def resolved(self) -> ScenarioPlan:
        """This plan with the fields left unset filled: the scenario's values, then embedlab's."""
        defaults = self.definition.deployment
        filled = {name: value for name, value in defaults.items() if getattr(self, name) is None}
        if self.workers is None and self.weights and self.definition.layout == "pool":
            filled["workers"] = len(self.weights)  # one weight per worker says how many
        if self.workers is None and self.definition.layout == "per-model" and "workers" not in filled:
            filled["workers"] = 1  # one worker per model, unless told how many replicas
        filled.update(
            {
                name: value
                for name, value in FALLBACKS.items()
                if getattr(self, name) is None and name not in filled
            }
        )
        if self.replicas:
            filled.pop("workers", None)  # each model's count is given
        if filled.get("router_mode", self.router_mode) == PREFIX_AWARE:  # in the stack's own name
            own = get_stack(self.stack).prefix_aware_mode
            if own is None and self.router_mode is None:  # it has none: `without_policy` says so
                filled.pop("router_mode")
            else:
                filled["router_mode"] = own
        return replace(self, **filled) if filled else self

    def describe(self) -> str:
        """One line for people: what runs where, and what the scenario proves."""
        plan = self.resolved()
        where = (
            f"attached to {plan.frontend_url}"
            if plan.attached
            else f"on {plan.stack} with {workers_text(plan.worker_server, plan.engine)}"
        )
        models, _ = plan.resolved_models()
        return f"{plan.scenario} {where}: {', '.join(models)}; {describe_params(plan.params)}. It proves: {plan.definition.help}"

    def default_models(self) -> tuple[str, ...]:
        """The models a plan that names none serves: two for a per-model scenario, one otherwise."""
        per_model = self.definition.layout == "per-model"
        if self.hashes or is_foreign(self.worker_server):
            return ("model-a", "model-b") if per_model else ("embed-model",)
        return ("tiny-bert", "tiny-qwen3") if per_model else ("tiny-bert",)

    def resolved_models(self) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
        """Model names and paths, with the defaults for this engine filled in."""
        models, paths = self.models or self.default_models(), self.model_paths
        if self.hashes:
            return models, (None,) * len(models)
        if paths and len(paths) not in (1, len(models)):
            raise ConfigError(f"{len(models)} models but {len(paths)} model paths")
        if not paths:
            paths = tuple(str(model_dir(m, self.worker_server)) for m in models)
        else:  # a path may be a known model's name (engines.models): the workers get its directory
            paths = tuple(str(resolve_model_path(p)) for p in paths) * (len(models) if len(paths) == 1 else 1)
        return models, paths

    def deployment_spec(self) -> DeploymentSpec:
        plan = self.resolved()
        return plan._spec_of(plan.resolved_models(), workers=plan.workers)

    def _spec_of(
        self, resolved: tuple[tuple[str, ...], tuple[str | None, ...]], *, workers: int | None
    ) -> DeploymentSpec:
        models, paths = resolved
        common = dict(
            engine=self.engine,
            server=self.worker_server,
            pooling=self.pooling,
            max_model_len=self.max_model_len,
            extra_args=self.worker_args,
            restart=self.restart or FALLBACKS["restart"],
            **{k: v for k in ("restart_limit", "restart_backoff") if (v := getattr(self, k)) is not None},
        )
        if self.definition.layout == "pool":
            models, paths = models[:1], paths[:1]
        counts = list(self.replicas) or [workers or 1] * len(models)
        if len(counts) != len(models):
            raise ConfigError(f"{len(models)} models but {len(counts)} replica counts")
        prefill = self.prefill_workers or 0
        if prefill and min(counts) <= prefill:
            raise ConfigError(
                f"prefill_workers = {prefill} leaves a model no decode worker: give each model more than "
                f"{prefill} replicas (it has {min(counts)})"
            )
        shapes = [(m, p, _stage(r, prefill)) for m, p, k in zip(models, paths, counts) for r in range(k)]
        weights = self.weights or (1.0,) * len(shapes)
        if len(weights) != len(shapes):
            raise ConfigError(f"{len(shapes)} workers but {len(weights)} weights")
        specs = tuple(
            WorkerSpec(model=m, model_path=p, weight=w, stage=stage, **common)
            for (m, p, stage), w in zip(shapes, weights)
        )
        return DeploymentSpec(
            stack=self.stack,
            workers=specs,
            router_mode=self.router_mode,
            seed=self.seed,
            metric=self.metric,
            startup_timeout=startup_timeout(self.startup_timeout, self.worker_server),
            frontend_args=self.frontend_args,
            hosts=self.hosts,
            discovery=self.discovery,
            lease_ttl=self.lease_ttl or FALLBACKS["lease_ttl"],
            canaries=self.canaries,
            endpoints=self.endpoints or FALLBACKS["endpoints"],
        )

    def deployment(self, *, progress: LaunchProgress | None = None) -> Deployment:
        """The Deployment this plan launches, not started yet. `progress` shows its start.

        A notebook that keeps one across cells starts it with `embedlab.start_deployment(plan)`.
        """
        if self.attached:
            raise ConfigError("this plan attaches to a running deployment; it has nothing to launch")
        return Deployment(self.deployment_spec(), run_dir=self.run_dir or None, progress=progress)

    def target(self, found: Sequence[DiscoveredWorker] | None = None) -> Target:
        """The attached deployment this plan checks (`found`: the workers `discovered` already found)."""
        urls: Sequence[str] = self.system_urls
        models: list[str | None] | None
        if self.discover:
            found = self.discovered() if found is None else found
            urls, models = [w.system_url for w in found], [w.model for w in found]
        else:
            models = self._attached_models()
        return attach(
            self.frontend_url,
            urls,
            models=models,
            metric=self.metric,
            weights=self.weights or None,
            dynamo_log=self.dynamo_log,
            router_metrics=router_metrics(
                self.router_metrics,
                admitted=self.router_admitted,
                answered=self.router_answered,
                success=self.router_success,
            ),
            api_key=self.api_key or None,
            scrape_config=self.scrape_config or None,
            counters=(
                prometheus_counters(
                    self.prometheus_url,
                    urls,
                    selector=self.prometheus_selector,
                    http_config=self.prometheus_http_config,
                )
                if self.prometheus_url
                else None
            ),
        )

    def attached_target(self) -> Target:
        """`target()` as the commands attach it (`embedlab scenario`, `embedlab watch`): Prometheus'
        access tried before its targets are asked for (a refusal is one line), and the workers
        `discover` finds printed, before anything is sent to them."""
        if self.prometheus_url:
            check_prometheus_access(self.prometheus_url, self.prometheus_http_config)
        found = self.discovered() if self.discover else None
        if found is not None:
            print(discovered_text(self.prometheus_url, self.discover, found), flush=True)
        return self.target(found)

    def _attached_models(self) -> list[str | None] | None:
        """The model each given system URL's worker serves, where the plan says."""
        models: list[str | None] | None = None
        if self.worker_models:
            models = list(self.worker_models)
        elif self.models:
            if self.definition.layout == "pool":
                models = [self.models[0]] * len(self.system_urls)
            elif len(self.models) == len(self.system_urls):
                models = list(self.models)
            else:
                n, k = len(self.system_urls), len(self.models)
                shape = ",".join(self.models[i * k // n] for i in range(n)) if n % k == 0 else "A,A,B,B"
                raise ConfigError(
                    f"{n} system URLs but {k} models: --models names the models to send; say which model "
                    f"each worker serves with --worker-models, one per system URL in the same order, "
                    f"e.g. --worker-models {shape}"
                )
        return models

    def without_policy(self) -> ScenarioResult | None:
        """UNSUPPORTED, with the stack's reason, where the plan asks for the stack's own prefix-aware
        policy (`PREFIX_AWARE`, the KV checks' default) and it has none: nothing launches for it."""
        asked = self.router_mode or self.definition.deployment.get("router_mode")
        if asked != PREFIX_AWARE or self.attached:
            return None
        try:
            prefix_aware(get_stack(self.stack))
        except UnsupportedError as exc:
            return self.resolved()._unsupported(exc)
        return None

    def run_on(self, deployment: Deployment | Target | None) -> ScenarioResult:
        """This plan's scenario on a deployment that the caller started and stops.

        On a `Target` (attached), its `access` is granted for the run, and `check_access` tries it
        on the frontend, every metrics URL and the Prometheus the counters are read through (where
        they are) first: a refusal is an AccessError, before any burst.
        """
        if (unsupported := self.without_policy()) is not None:
            return unsupported
        plan = self.resolved()
        target = deployment if isinstance(deployment, Target) else None
        try:
            with granted(target.access if target else None), probing(plan.nonce) as drawn:
                if target is not None:
                    check_access(target)
                result: ScenarioResult = plan.definition.run(deployment, plan)
        except UnsupportedError as exc:
            return plan._unsupported(exc)
        if not isinstance(result, ScenarioResult):
            raise ConfigError(
                f"scenario {plan.scenario!r} returned {type(result).__name__}, not a ScenarioResult"
            )
        # Its own name (a custom scenario built on same_model_load_balance); the plan's engine if it has no workers.
        result.scenario = plan.scenario
        result.engine = result.engine or ("" if plan.attached else plan.engine)
        result.reasons += counter_notes(plan.metric)  # a counter of inputs, not requests, is named
        result.probes = result.probes or drawn.to_json()
        if target is not None and target.counters is not None:  # how placement was read, and its cost
            said = target.counters.sentence()
            result.power = f"{result.power}; {said}" if result.power else said
            result.reasons = [*result.reasons, said]
        return result

    def _unsupported(self, exc: UnsupportedError) -> ScenarioResult:
        """The stack cannot do what the check needs: a verdict of its own, with the stack's reason."""
        return ScenarioResult.without_run(
            self.scenario,
            self.stack,
            Verdict.UNSUPPORTED,
            str(exc),
            engine="" if self.attached else self.engine,
        )


@functools.cache
def _tuple_fields() -> tuple[tuple[str, type], ...]:
    """The plan's tuple fields and their items' type, read once from its knobs."""
    return tuple((k.name, k.item) for k in knobs(ScenarioPlan) if k.item is not None)


def check_knob_names(scenario: Scenario) -> None:
    """A knob may not share a name with a plan field: in a matrix, a notebook or on the command
    line the two would be one key."""
    clash = sorted({k.name for k in knobs(scenario.params)} & {f.name for f in fields(ScenarioPlan)})
    if clash:
        raise ConfigError(
            f"scenario {scenario.name!r}: its knobs {clash} are plan fields too (the deployment's); rename them"
        )


@guarded("result")
def run_scenario(
    plan: ScenarioPlan,
    *,
    progress: bool = False,
    launch_progress: bool | None = None,
    on_deployment: Callable[[Deployment], None] | None = None,
) -> ScenarioResult:
    """Launch (or attach), run the plan's scenario, tear down; returns the result.

    `progress` (or the plan's own) shows the launch and a bar per burst; `launch_progress`
    (default: as `progress`) the launch alone.
    """
    if progress:
        plan = replace(plan, progress=True)
    if plan.attached:
        result = plan.run_on(plan.attached_target())
        if plan.etcd_endpoints:
            # What the cluster believes is live, beside what the counters said.
            result.discovered = [
                asdict(i) | {"path": i.path} for i in discovered(plan.etcd_endpoints.split(",")[0])
            ]
        return result
    if plan.definition.deploys or plan.without_policy() is not None:
        return plan.run_on(None)  # a stack without the policy asked for: run_on says so, unlaunched
    show_launch = plan.progress if launch_progress is None else launch_progress
    deployment = plan.deployment(progress=LaunchProgress() if show_launch else None)
    try:
        with deployment:
            if on_deployment is not None:
                on_deployment(deployment)
            result = plan.run_on(deployment)
    except UnsupportedError as exc:  # the stack cannot launch it at all (nginx with two models to route)
        return plan.resolved()._unsupported(exc)
    except EmbedlabError as exc:  # a worker given up on fails the next scrape: the cause is known
        if not given_up(deployment.events):
            raise
        result = ScenarioResult.without_run(
            plan.scenario, plan.stack, Verdict.FAILED, str(exc), engine=plan.resolved().engine
        )
    result.startup_seconds = dict(deployment.startup_seconds)
    result.run_dir = str(deployment.run_dir)
    result.note_given_up(deployment.events)
    return result
