"""Credentials without servers: the scrape config's fields and rules (and a Prometheus' HTTP config,
the same fields), each credential sent to its own origin alone, the preflight's one line, and
secrets that never print."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import ssl
from pathlib import Path

import httpx
import pytest

from embedlab import AccessError, ConfigError, ScenarioPlan, ScrapeAuth, attach, check_access
from embedlab.errors import ScrapeError
from embedlab.evidence import clients
from embedlab.evidence.access import HTTP_CONFIG, Access, Secret, granted, in_force
from embedlab.evidence.prom_source import (
    PrometheusCounters,
    active_targets,
    discover_workers,
    prometheus_counters,
)
from embedlab.evidence.target import check_prometheus_access
from embedlab.scenarios.params import describe_params, knob, knobs

KEY = "sk-unit-0123456789abcdef"
PASSWORD = "pw-unit-fedcba9876543210"
FRONTEND = "http://frontend.test:8000"
WORKERS = ["https://w0.test:9100", "https://w1.test:9100+https://w1.test:9101"]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_yaml_scrape_config_reads_prometheus_fields_with_paths_relative_to_its_folder(
    tmp_path: Path,
) -> None:
    write(tmp_path, "password", f"  {PASSWORD}\n")  # trimmed, as Prometheus trims it
    config = write(tmp_path, "scrape.yml", "basic_auth:\n  username: prom\n  password_file: password\n")
    auth = ScrapeAuth.load(config)
    assert auth.username == "prom" and auth.password == Secret(PASSWORD) and auth.context is None
    assert auth.headers() == {"Authorization": basic("prom", PASSWORD)}
    assert auth.describe() == f"basic auth as 'prom', from {config}"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("scrape.toml", '[authorization]\ncredentials_file = "token"\n'),
        ("scrape.json", '{"authorization": {"type": "Bearer", "credentials_file": "token"}}'),
        ("scrape.yaml", "authorization:\n  credentials_file: token\n"),
    ],
)
def test_toml_json_and_yaml_say_the_same(tmp_path: Path, name: str, text: str) -> None:
    write(tmp_path, "token", KEY)
    assert ScrapeAuth.load(write(tmp_path, name, text)).headers() == {"Authorization": f"Bearer {KEY}"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("scheme: https\n", "unknown field 'scheme'; a scrape config here takes authorization, basic_auth"),
        ("bearer_token_file: t\n", "bearer_token_file is authorization.credentials_file in Prometheus 3"),
        ("tls_config:\n  server_name: w0\n", "tls_config has no field 'server_name' here; it takes ca_file"),
        ("basic_auth:\n  username: u\n  password: p\n  password_file: f\n", "give password or password_file, not both"),
        ("basic_auth:\n  password: p\n", "basic_auth needs username or username_file"),
        ("authorization:\n  credentials: c\nbasic_auth:\n  username: u\n", "at most one of authorization and basic_auth"),
        ("authorization:\n  type: Basic\n  credentials: c\n", 'authorization type cannot be "Basic"'),
        ("authorization:\n  type: Bearer\n", "authorization needs credentials or credentials_file"),
        ("authorization:\n  credentials_file: nowhere\n", "authorization.credentials_file {dir}/nowhere does not exist"),
        ("authorization:\n  credentials_file: empty\n", "authorization.credentials_file {dir}/empty is empty"),
        ("tls_config:\n  cert_file: pem\n", "tls_config.cert_file is given without tls_config.key_file"),
        ("tls_config:\n  ca_file: pem\n", "tls_config.ca_file {dir}/pem holds no PEM certificate"),
        ("tls_config:\n  insecure_skip_verify: yes please\n", "insecure_skip_verify must be true or false"),
        ("- a list\n", "a scrape config is a mapping of authorization, basic_auth, tls_config"),
        ("basic_auth: [u]\n", "basic_auth must be a mapping"),
    ],
)  # fmt: skip
def test_a_mistake_in_the_file_is_a_config_error_that_names_it(tmp_path: Path, text: str, error: str) -> None:
    write(tmp_path, "empty", "\n")
    write(tmp_path, "pem", "not a certificate\n")
    config = write(tmp_path, "scrape.yml", text)
    with pytest.raises(ConfigError) as err:
        ScrapeAuth.load(config)
    assert str(err.value).startswith(f"{config}: ") and error.format(dir=tmp_path) in str(err.value)


def test_a_missing_or_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the scrape config .*nope.yml: No such file"):
        ScrapeAuth.load(tmp_path / "nope.yml")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        ScrapeAuth.load(write(tmp_path, "bad.toml", "[authorization\n"))


def test_insecure_skip_verify_checks_nothing_and_says_so(tmp_path: Path) -> None:
    auth = ScrapeAuth.load(write(tmp_path, "s.yml", "tls_config:\n  insecure_skip_verify: true\n"))
    assert auth.context is not None and auth.context.verify_mode == ssl.CERT_NONE
    assert not auth.context.check_hostname and "no certificate check" in auth.describe()


def test_secrets_print_as_stars_and_have_no_json_form(tmp_path: Path) -> None:
    write(tmp_path, "password", PASSWORD)
    auth = ScrapeAuth.load(write(tmp_path, "s.yml", "basic_auth: {username: u, password_file: password}\n"))
    access = Access(frontend=FRONTEND, api_key=Secret(KEY), key_from="--api-key", scrape=auth)
    shown = [repr(access), str(access), repr(auth), auth.describe(), f"{Secret(KEY)}"]
    assert not any(KEY in s or PASSWORD in s for s in shown) and "Secret('***')" in repr(access)
    with pytest.raises(TypeError):
        json.dumps(dataclasses.asdict(auth))


def test_each_credential_goes_to_its_own_origin_alone(tmp_path: Path) -> None:
    write(tmp_path, "token", "scrape-token")
    auth = ScrapeAuth.load(write(tmp_path, "s.yml", "authorization: {credentials_file: token}\n"))
    target = attach(FRONTEND, WORKERS, api_key=KEY, scrape_config=auth)
    seen: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[str(request.url)] = request.headers.get("Authorization")
        return httpx.Response(200, text="")

    urls = [
        f"{FRONTEND}/v1/embeddings",
        "http://frontend.test:80/v1/models",  # another port: another origin
        "https://w1.test:9101/metrics",
        "https://w1.test:9102/metrics",
        "https://user:pw@w0.test:9100/metrics",  # a URL's own user:password stays
    ]
    with granted(target.access), clients.client(transport=httpx.MockTransport(handler)) as http:
        for url in urls:
            http.get(url)
    assert seen == {
        f"{FRONTEND}/v1/embeddings": f"Bearer {KEY}",
        "http://frontend.test/v1/models": None,
        "https://w1.test:9101/metrics": "Bearer scrape-token",
        "https://w1.test:9102/metrics": None,
        "https://user:pw@w0.test:9100/metrics": basic("user", "pw"),
    }
    with clients.client(transport=httpx.MockTransport(handler)) as http:  # nothing granted now
        http.get(f"{FRONTEND}/v1/embeddings")
    assert seen[f"{FRONTEND}/v1/embeddings"] is None


def test_the_key_comes_from_openai_api_key_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    access = attach(FRONTEND, WORKERS).access
    assert (
        access is not None and access.api_key == Secret("from-env") and access.key_from == "$OPENAI_API_KEY"
    )
    access = attach(FRONTEND, WORKERS, api_key=KEY).access
    assert access is not None and access.api_key == Secret(KEY) and access.key_from == "--api-key"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert attach(FRONTEND, WORKERS).access == Access(frontend=FRONTEND, metrics=access.metrics)


def preflight(monkeypatch: pytest.MonkeyPatch, target: object, handler: object) -> AccessError:
    real = clients.async_client
    monkeypatch.setattr(
        clients, "async_client", lambda **options: real(transport=httpx.MockTransport(handler), **options)
    )
    with pytest.raises(AccessError) as err, granted(target.access):  # type: ignore[attr-defined]
        check_access(target)  # type: ignore[arg-type]
    assert "\n" not in str(err.value) and KEY not in str(err.value)
    return err.value


def test_a_refused_key_is_one_line_that_names_the_frontend_and_where_the_key_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":  # echoes the key back, as some routers do
            return httpx.Response(401, json={"error": {"message": f"bad key {KEY}"}})
        return httpx.Response(200, text="")

    error = preflight(monkeypatch, attach(FRONTEND, WORKERS, api_key=KEY), handler)
    assert str(error) == (
        f"the frontend at {FRONTEND}/v1/models answered HTTP 401 Unauthorized: bad key *** (given the API "
        "key from --api-key): check the key (--api-key overrides $OPENAI_API_KEY)"
    )
    assert (error.url, error.endpoint, error.status) == (f"{FRONTEND}/v1/models", "the frontend", 401)


def test_a_frontend_that_lists_no_models_passes_and_a_tls_failure_names_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "w1.test" and request.url.port == 9101:
            cause = ssl.SSLCertVerificationError(1, "unable to get local issuer certificate")
            raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]", request=request) from cause
        return httpx.Response(404 if request.url.path == "/v1/models" else 200, text="")

    error = preflight(monkeypatch, attach(FRONTEND, WORKERS), handler)
    assert str(error) == (
        "worker 1's metrics at https://w1.test:9101/metrics failed the TLS handshake: certificate verify "
        "failed: unable to get local issuer certificate (given no scrape config): give the CA that signed "
        "its certificate as tls_config.ca_file in --scrape-config"
    )
    assert error.status is None and error.endpoint == "worker 1's metrics"


def test_a_worker_down_is_left_to_the_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "w0.test":
            raise httpx.ConnectError("All connection attempts failed", request=request)
        return httpx.Response(503 if request.url.path == "/metrics" else 200, text="")

    real = clients.async_client
    monkeypatch.setattr(
        clients, "async_client", lambda **options: real(transport=httpx.MockTransport(handler), **options)
    )
    check_access(attach(FRONTEND, WORKERS))  # nothing raised


def test_the_plan_holds_the_key_out_of_its_repr_and_description(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    plan = ScenarioPlan(scenario="same-model", frontend_url=FRONTEND, system_urls=WORKERS[:1], api_key=KEY)
    assert KEY not in repr(plan) and KEY not in plan.describe()
    access = plan.target().access
    assert access is not None and access.api_key == Secret(KEY)
    with pytest.raises(
        ConfigError, match="api_key and scrape_config are what an attached deployment is given"
    ):
        ScenarioPlan(scenario="same-model", api_key=KEY)


def test_a_broken_scrape_config_fails_when_the_plan_is_made(tmp_path: Path) -> None:
    config = write(tmp_path, "s.yml", "basic_auth: {username: u, pasword: typo}\n")
    with pytest.raises(ConfigError, match="basic_auth has no field 'pasword' here"):
        ScenarioPlan(
            scenario="same-model", frontend_url=FRONTEND, system_urls=WORKERS[:1], scrape_config=str(config)
        )


def test_a_secret_knob_is_masked_where_knobs_are_described() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Params:
        token: str = knob("t0ken", "a credential", secret=True)
        requests: int = knob(4, "requests")

    assert [k.secret for k in knobs(Params)] == [True, False]
    assert describe_params(Params()) == "token ***, requests 4" and "t0ken" not in repr(Params())


def test_no_notebook_takes_the_key_as_a_parameter() -> None:
    # A parameter's value is written into the executed notebook: the key comes from $OPENAI_API_KEY.
    notebooks = sorted((Path(__file__).resolve().parents[3] / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        meta = json.loads(path.read_text()).get("metadata", {}).get("embedlab", {})
        assert "api_key" not in meta.get("parameters", []), path


def test_asyncio_clients_get_the_grant_too() -> None:
    seen: list[str | None] = []

    async def run() -> None:
        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.headers.get("Authorization"))
            return httpx.Response(200)

        access = Access(frontend=FRONTEND, api_key=Secret(KEY), key_from="--api-key")
        with granted(access):
            async with clients.async_client(transport=httpx.MockTransport(handler)) as http:
                await http.get(f"{FRONTEND}/v1/models")

    asyncio.run(run())
    assert seen == [f"Bearer {KEY}"]


# -- Prometheus behind an ingress: its HTTP config (--prometheus-http-config) ----------------------

PROM = "https://prom.test:9443"


def http_config(folder: Path, *, tls: bool = False) -> Path:
    """A Prometheus HTTP config: basic auth, and a TLS trust of its own where `tls`."""
    write(folder, "prom-password", PASSWORD)
    trust = "tls_config: {insecure_skip_verify: true}\n" if tls else ""
    return write(
        folder, "prom.yml", f"basic_auth: {{username: reader, password_file: prom-password}}\n{trust}"
    )


def prom_targets(request: httpx.Request) -> httpx.Response:
    """Prometheus' answers: one healthy target, whose counter carries its model."""
    if request.url.path == "/api/v1/targets":
        target = {
            "labels": {"job": "w", "instance": "w0.test:9100"},
            "scrapeUrl": "https://w0.test:9100/metrics",
            "health": "up",
            "scrapeInterval": "1s",
        }
        return httpx.Response(200, json={"status": "success", "data": {"activeTargets": [target]}})
    series = [{"metric": {"job": "w", "instance": "w0.test:9100", "model": "m"}, "values": [[1.0, "3"]]}]
    return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": series}})


def test_prometheus_gets_its_http_config_and_no_other_origin_does(tmp_path: Path) -> None:
    write(tmp_path, "token", "scrape-token")
    scrape = ScrapeAuth.load(write(tmp_path, "s.yml", "authorization: {credentials_file: token}\n"))
    prom = ScrapeAuth.load(http_config(tmp_path, tls=True), what=HTTP_CONFIG)
    access = Access(
        frontend=FRONTEND,
        api_key=Secret(KEY),
        metrics=("https://w0.test:9100",),
        scrape=scrape,
        prometheus=f"{PROM}/prefix",
        prometheus_auth=prom,
    )
    assert access.headers_for(f"{PROM}/prefix/api/v1/query") == {"Authorization": basic("reader", PASSWORD)}
    assert access.headers_for("https://w0.test:9100/metrics") == {"Authorization": "Bearer scrape-token"}
    assert access.headers_for("https://prom.test:9090/api/v1/query") == {}  # another port
    assert access.headers_for(f"{FRONTEND}/v1/models") == {"Authorization": f"Bearer {KEY}"}
    assert access.context_for(f"{PROM}/api/v1/targets") is prom.context is not None
    assert access.metric_origins() == [PROM]  # its own trust: a transport of its own
    assert sorted(access.secrets()) == sorted([KEY, "scrape-token", PASSWORD])
    assert PASSWORD not in repr(access) and not Access(prometheus=PROM).headers_for(PROM)
    assert Access(prometheus=PROM).empty and not Access(prometheus=PROM, prometheus_auth=prom).empty


def test_discovery_and_reads_through_prometheus_send_its_http_config_to_it_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("Authorization")))
        return prom_targets(request)

    real, real_async = clients.client, clients.async_client
    mocked = {"transport": httpx.MockTransport(handler)}
    monkeypatch.setattr(clients, "client", lambda **options: real(**mocked, **options))
    monkeypatch.setattr(clients, "async_client", lambda **options: real_async(**mocked, **options))
    config = http_config(tmp_path)
    # Discovery: the targets, then the model probe (no model label on the target).
    found = discover_workers(PROM, 'job="w"', http_config=str(config))
    assert [(w.system_url, w.model) for w in found] == [("https://w0.test:9100/metrics", "m")]
    # Placing the workers, then a read with a client of its own: the file is read once.
    counters = prometheus_counters(PROM, ["https://w0.test:9100"], http_config=config)
    assert counters.http_config is not None and PASSWORD not in repr(counters)
    with pytest.raises(ScrapeError, match="stale"):  # the sample is old: what matters is what was sent
        asyncio.run(
            dataclasses.replace(counters, scrape_interval_s=0.01).aread(["https://w0.test:9100"], [0])
        )
    paths = [path for path, _ in seen]
    assert paths[:3] == ["/api/v1/targets", "/api/v1/query", "/api/v1/targets"] and len(paths) > 3
    assert {auth for _, auth in seen} == {basic("reader", PASSWORD)}
    assert in_force() == []  # granted while it was asked, and no longer
    # The target it makes carries the HTTP config to Prometheus' origin, not to the workers.
    access = attach(FRONTEND, ["https://w0.test:9100"], counters=counters).access
    assert access is not None and access.prometheus == PROM and access.prometheus_auth == counters.http_config
    assert access.headers_for("https://w0.test:9100/metrics") == {}


def test_a_prometheus_that_refuses_is_one_line_naming_it_before_anything_is_asked_of_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "prom.test":  # an ingress's page, with the password echoed
            return httpx.Response(
                401, text=f"<html><title>401 Authorization Required {PASSWORD}</title></html>"
            )
        return httpx.Response(200, text="")

    real = clients.async_client  # preflight mocks it with the first handler
    config = http_config(tmp_path)
    counters = PrometheusCounters(PROM, ((("w", "w0.test:9100"),),), http_config=ScrapeAuth.load(config))
    error = preflight(monkeypatch, attach(FRONTEND, WORKERS[:1], counters=counters), handler)
    assert str(error) == (
        f"Prometheus at {PROM}/api/v1/status/buildinfo answered HTTP 401 Unauthorized: 401 Authorization "
        f"Required *** (given basic auth as 'reader', from {config}): check the credentials in {config}"
    )
    assert (error.endpoint, error.status) == ("Prometheus", 401)

    def tls(request: httpx.Request) -> httpx.Response:
        cause = ssl.SSLCertVerificationError(1, "self-signed certificate in certificate chain")
        raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]", request=request) from cause

    monkeypatch.setattr(
        clients, "async_client", lambda **options: real(transport=httpx.MockTransport(tls), **options)
    )
    with pytest.raises(AccessError) as err:
        check_prometheus_access(PROM)  # before discovery: no HTTP config given
    assert str(err.value) == (
        f"Prometheus at {PROM}/api/v1/status/buildinfo failed the TLS handshake: certificate verify failed: "
        "self-signed certificate in certificate chain (given no HTTP config): give the CA that signed its "
        "certificate as tls_config.ca_file in --prometheus-http-config"
    )


def test_a_proxys_refusal_of_a_query_says_so_rather_than_that_it_is_no_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = clients.client
    page = httpx.MockTransport(lambda request: httpx.Response(403, text="<html>Forbidden</html>"))
    monkeypatch.setattr(clients, "client", lambda **options: real(transport=page, **options))
    with pytest.raises(
        ScrapeError, match=r"answered HTTP 403 Forbidden: give its credentials with --prometheus-http-config"
    ):
        active_targets(PROM)


def test_the_plan_reads_the_http_config_when_it_is_made_and_wants_the_prometheus_url(tmp_path: Path) -> None:
    good = str(http_config(tmp_path))
    with pytest.raises(ConfigError, match="prometheus_http_config says how to reach the Prometheus"):
        ScenarioPlan(
            scenario="same-model", frontend_url=FRONTEND, system_urls=WORKERS[:1], prometheus_http_config=good
        )
    broken = write(tmp_path, "broken.yml", "basic_auth: {username: u}\noauth2: {client_id: x}\n")
    with pytest.raises(
        ConfigError, match=f"{broken}: unknown field 'oauth2'; a Prometheus HTTP config here takes"
    ):
        ScenarioPlan(
            scenario="same-model",
            frontend_url=FRONTEND,
            prometheus_url=PROM,
            discover='prometheus:job="w"',
            prometheus_http_config=str(broken),
        )
    plan = ScenarioPlan(
        scenario="same-model",
        frontend_url=FRONTEND,
        prometheus_url=PROM,
        discover='prometheus:job="w"',
        prometheus_http_config=good,
    )
    assert PASSWORD not in repr(plan) and PASSWORD not in plan.describe()
