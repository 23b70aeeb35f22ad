"""A Prometheus behind an ingress: nginx in front of Debian's Prometheus, over TLS (a CA made here)
and behind basic auth, scraping a pool of two hash workers every second.

`embedlab scenario same-model --prometheus-url https://... --prometheus-http-config FILE --discover
prometheus:SELECTOR` finds the workers, reads their counters through it and passes; a wrong
password or a missing CA stops the run with one line naming Prometheus, before discovery and
before any burst. No secret reaches anything the runs wrote.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from embedlab import Deployment, DeploymentSpec
from embedlab.cluster.ports import release_port, reserve_port

from ..commands import run_embedlab
from ..prometheus_server import prometheus_server, scrapes_up
from .test_access import _counts, _env, _scan, _tls_files, nginx

PASSWORD = "pw-prom-" + secrets.token_hex(16)
WRONG = "pw-wrong-" + secrets.token_hex(16)
USER = "reader"
SELECTOR = 'prometheus:component="worker"'


@dataclass(frozen=True)
class Behind:
    """The pool, Prometheus' URL behind nginx (https), and the files a user holds (not a run's)."""

    dep: Deployment
    url: str
    tls: dict[str, Path]
    keep: Path


@pytest.fixture(scope="module")
def behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Behind]:
    folder = tmp_path_factory.mktemp("prometheus-behind-auth")
    keep = folder / "secrets"
    keep.mkdir()
    tls = _tls_files(keep)
    digest = base64.b64encode(hashlib.sha1(PASSWORD.encode()).digest()).decode()
    (keep / "htpasswd").write_text(f"{USER}:{{SHA}}{digest}\n")
    (keep / "password").write_text(PASSWORD + "\n")
    prom_dir = folder / "prometheus"
    prom_dir.mkdir()
    with Deployment(DeploymentSpec.pool(["embed-model"], replicas=2), run_dir=folder / "run") as dep:
        targets = [url.split("://", 1)[1].split("/", 1)[0] for url in dep.system_urls]
        (prom_dir / "workers.json").write_text(
            json.dumps([{"targets": targets, "labels": {"component": "worker"}}])
        )
        config = (
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: workers\n"
            f"    file_sd_configs: [{{files: ['{prom_dir / 'workers.json'}'], refresh_interval: 1s}}]\n"
        )
        ready = scrapes_up(len(targets))
        with prometheus_server(prom_dir, config, ready=ready, what="scrape both workers") as prom:
            port = reserve_port()
            server = (
                f"    server {{\n        listen 127.0.0.1:{port} ssl;\n"
                f"        ssl_certificate {tls['server']}; ssl_certificate_key {tls['server-key']};\n"
                f'        auth_basic "prometheus"; auth_basic_user_file {keep / "htpasswd"};\n'
                f"        location / {{ proxy_pass {prom}; }}\n    }}"
            )
            trust = ssl.create_default_context(cafile=tls["ca"])
            # Without credentials: nginx's 401 says it is up.
            up = lambda: httpx.get(f"https://127.0.0.1:{port}/-/ready", verify=trust).status_code == 401  # noqa: E731
            try:
                with nginx(folder / "nginx", server, up=up):
                    yield Behind(dep, f"https://127.0.0.1:{port}", tls, keep)
            finally:
                release_port(port)


def _http_config(path: Path, behind: Behind, *, password: str = "", ca: bool = True) -> Path:
    """The user's --prometheus-http-config: basic auth (the password's file, or one inline), the CA."""
    secret = f"password: {password}" if password else f"password_file: {behind.keep / 'password'}"
    lines = [f"basic_auth:\n  username: {USER}\n  {secret}"]
    if ca:
        lines.append(f"tls_config:\n  ca_file: {behind.tls['ca']}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _through(behind: Behind, config: Path, *extra: str | Path) -> tuple[int, str, str]:
    started = time.monotonic()
    proc = run_embedlab(
        "scenario", "same-model", "--frontend-url", behind.dep.frontend_url, "--prometheus-url", behind.url,
        "--prometheus-http-config", config, "--discover", SELECTOR, *extra, timeout=120, env=_env(),
    )  # fmt: skip
    print(f"\nsame-model behind auth: exit {proc.returncode} in {time.monotonic() - started:.1f} s")
    print(proc.stdout + proc.stderr)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_check_through_a_prometheus_behind_tls_and_basic_auth_passes(
    behind: Behind, tmp_path: Path
) -> None:
    config = _http_config(tmp_path / "prom-http.yml", behind)
    out = tmp_path / "result.json"
    code, stdout, stderr = _through(behind, config, "--requests", "40", "--json", out)
    assert code == 0, stderr
    assert f"discovered 2 workers through Prometheus ({behind.url})" in stdout, stdout
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("same-model on attached: PASSED (counters read through Prometheus"), last
    _scan([out, behind.dep.run_dir], [stdout, stderr], [PASSWORD])


def test_a_wrong_password_or_a_missing_ca_stops_with_one_line_naming_prometheus_before_any_burst(
    behind: Behind, tmp_path: Path
) -> None:
    before = _counts(behind.dep.system_urls)
    wrong = _http_config(tmp_path / "wrong.yml", behind, password=WRONG)
    code, stdout, stderr = _through(behind, wrong, "--json", tmp_path / "wrong.json")
    assert code == 2 and stdout == "", stdout  # nothing discovered, nothing printed
    (line,) = stderr.strip().splitlines()
    assert line.startswith(
        f"embedlab scenario: error: Prometheus at {behind.url}/api/v1/status/buildinfo answered HTTP 401"
    ), line
    assert f"(given basic auth as '{USER}', CA {behind.tls['ca']}, from {wrong})" in line, line
    assert line.endswith(f"check the credentials in {wrong}"), line
    no_ca = _http_config(tmp_path / "no-ca.yml", behind, ca=False)
    code, stdout, ca_stderr = _through(behind, no_ca, "--json", tmp_path / "no-ca.json")
    assert code == 2 and stdout == "", stdout
    (line,) = ca_stderr.strip().splitlines()
    assert (
        f"Prometheus at {behind.url}/api/v1/status/buildinfo failed the TLS handshake: certificate verify failed"
        in line
    )
    assert "tls_config.ca_file in --prometheus-http-config" in line, line
    assert _counts(behind.dep.system_urls) == before  # no request reached a worker
    assert not (tmp_path / "wrong.json").exists() and not (tmp_path / "no-ca.json").exists()
    _scan([behind.dep.run_dir], [stderr, ca_stderr], [PASSWORD, WRONG])
