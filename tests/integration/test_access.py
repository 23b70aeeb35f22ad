"""Credentials and TLS against real servers on this machine: LiteLLM with a master key, and nginx
serving two workers' metrics over TLS (a CA made here, a client certificate required) behind basic
auth. A refusal is one line, before any burst; no secret reaches any file the runs wrote."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import pwd
import re
import secrets
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from embedlab import AccessError, Deployment, DeploymentSpec, ManagedProcess, ScenarioPlan, run_scenario
from embedlab.cluster.ports import release_port, reserve_port
from embedlab.evidence.access import in_force
from embedlab.evidence.metrics import scrape_all
from embedlab.stacks.routers import router_venv

from ..commands import attach_args, run_embedlab

# Keys no test output could hold by chance.
KEY = "sk-embedlab-" + secrets.token_hex(16)
WRONG_KEY = "sk-wrong-" + secrets.token_hex(16)
PASSWORD = "pw-" + secrets.token_hex(16)
USER = "scraper"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "LITELLM_MASTER_KEY")}
    return {**env, **extra}


def _counts(urls: list[str]) -> list[float]:
    return [s.value for s in scrape_all(urls)]


def _scan(paths: list[Path], texts: list[str], secrets_: list[str]) -> None:
    """No secret in any file under `paths`, nor in `texts` (a run's stdout and stderr)."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    assert files, paths
    for secret in secrets_:
        leaked = [str(f) for f in files if secret.encode() in f.read_bytes()]
        assert not leaked, f"a secret is written in {leaked}"
        assert not any(secret in text for text in texts), "a secret is in a run's output"


def test_litellm_with_a_master_key_passes_with_the_key_and_stops_before_any_burst_without_it(
    tmp_path: Path,
) -> None:
    assert (router_venv("litellm") / ".stamp").exists(), "run `make routers`"
    spec = DeploymentSpec.pool(
        ["embed-model"], replicas=2, stack="litellm", env=(("LITELLM_MASTER_KEY", KEY),)
    )
    outputs = [tmp_path / "passed.json", tmp_path / "refused.json"]
    with Deployment(spec, run_dir=tmp_path / "run") as dep:
        frontend = dep.frontend_url
        # The proxy requires the key. LiteLLM 1.108.7 without a database refuses in its own way: a
        # request without a key is a 500 (its auth error handler imports prisma), a wrong key a 400
        # ("No connected db.": it looks the key up as a virtual key).
        assert httpx.get(f"{frontend}/v1/models", timeout=10).status_code in (401, 500)
        passed = run_embedlab(
            "scenario", "same-model", *attach_args(dep), "--json", outputs[0], env=_env(OPENAI_API_KEY=KEY)
        )
        assert passed.returncode == 0, passed.stderr
        assert passed.stdout.strip().splitlines()[-1] == "same-model on attached: PASSED"
        before = _counts(dep.system_urls)
        refused = run_embedlab(
            "scenario",
            "same-model",
            *attach_args(dep),
            "--json",
            outputs[1],
            env=_env(OPENAI_API_KEY=WRONG_KEY),
        )
        assert _counts(dep.system_urls) == before  # no request reached a worker
    assert in_force() == []  # the launched run's clients sent the key while it ran, and no longer
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert re.match(
        rf"embedlab scenario: error: the frontend at {re.escape(frontend)}/v1/models answered HTTP (401|400)",
        line,
    ), line
    assert "the API key from $OPENAI_API_KEY" in line and "check the key" in line, line
    assert not outputs[1].exists()
    texts = [passed.stdout, passed.stderr, refused.stdout, refused.stderr]
    _scan([tmp_path], texts, [KEY, WRONG_KEY])


# -- nginx: the workers' metrics over TLS, behind basic auth ---------------------------------------


def _tls_files(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, signer: ec.EllipticCurvePrivateKey, *, ca: bool,
             usage: x509.ObjectIdentifier | None = None, issuer: str = "embedlab test CA") -> x509.Certificate:  # fmt: skip
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        else:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
            )
        if usage is ExtendedKeyUsageOID.SERVER_AUTH:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    made = {
        "ca": cert("embedlab test CA", ca_key, ca_key, ca=True),
        "server": cert("127.0.0.1", server_key, ca_key, ca=False, usage=ExtendedKeyUsageOID.SERVER_AUTH),
        "client": cert("scraper", client_key, ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    }
    files = {}
    for role, certificate in made.items():
        files[role] = folder / f"{role}.pem"
        files[role].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    for role, key in (("server", server_key), ("client", client_key)):
        files[f"{role}-key"] = folder / f"{role}.key"
        files[f"{role}-key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return files


@pytest.fixture
def tls_metrics(tmp_path: Path) -> Iterator[tuple[Deployment, list[str], dict[str, Path]]]:
    """Two hash workers on the embedded stack; nginx serves each one's /metrics over TLS on a port of
    its own, behind basic auth, and asks for a client certificate the CA signed."""
    keep = tmp_path / "secrets"  # the servers' and the user's own files: not what a run writes
    keep.mkdir()
    tls = _tls_files(keep)
    digest = base64.b64encode(hashlib.sha1(PASSWORD.encode()).digest()).decode()
    (keep / "htpasswd").write_text(f"{USER}:{{SHA}}{digest}\n")
    (keep / "password").write_text(PASSWORD + "\n")
    with Deployment(DeploymentSpec.pool(["embed-model"], replicas=2), run_dir=tmp_path / "run") as dep:
        ports = [reserve_port() for _ in dep.system_urls]
        servers = "\n".join(
            f"""    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {tls["server"]}; ssl_certificate_key {tls["server-key"]};
        ssl_client_certificate {tls["ca"]}; ssl_verify_client on;
        auth_basic "metrics"; auth_basic_user_file {keep / "htpasswd"};
        location / {{ proxy_pass {url}; }}
    }}"""
            for port, url in zip(ports, dep.system_urls)
        )
        trust = ssl.create_default_context(cafile=tls["ca"])
        up = lambda: httpx.get(f"https://127.0.0.1:{ports[-1]}/", verify=trust).status_code == 400  # noqa: E731
        try:
            # No client certificate: nginx's 400 says it is up.
            with nginx(keep / "nginx", servers, up=up):
                yield dep, [f"https://127.0.0.1:{port}" for port in ports], tls
        finally:
            for port in ports:
                release_port(port)


@contextmanager
def nginx(conf: Path, servers: str, *, up: Callable[[], bool]) -> Iterator[None]:
    """Debian's nginx with `servers` (its `server` blocks) in `conf`, running as this user, until
    `up()` holds; stopped by its process, also on failure."""
    temps = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    for t in temps:
        (conf / t).mkdir(parents=True)
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {t}_temp_path {conf / t};" for t in temps)
    (conf / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\n{user}\npid {conf / 'nginx.pid'};\nerror_log stderr warn;\n"
        f"events {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n{temp}\n{servers}\n}}\n"
    )
    process = ManagedProcess(
        "nginx",
        ["/usr/sbin/nginx", "-p", str(conf), "-c", str(conf / "nginx.conf"), "-e", "stderr"],
        log_path=conf / "nginx.log",
    )
    try:
        process.start()
        process.wait_ready(up, timeout=15)
        yield
    finally:
        process.stop()


def _scrape_config(path: Path, tls: dict[str, Path], *, password_file: Path, ca: bool = True) -> Path:
    lines = [f"basic_auth:\n  username: {USER}\n  password_file: {password_file}", "tls_config:"]
    if ca:
        lines.append(f"  ca_file: {tls['ca']}")
    lines += [f"  cert_file: {tls['client']}", f"  key_file: {tls['client-key']}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_metrics_over_tls_behind_basic_auth_read_with_a_scrape_config(
    tls_metrics: tuple[Deployment, list[str], dict[str, Path]], tmp_path: Path
) -> None:
    dep, metrics, tls = tls_metrics
    good = _scrape_config(tmp_path / "scrape.yml", tls, password_file=tmp_path / "secrets" / "password")
    attach = ["--frontend-url", dep.frontend_url, *(a for url in metrics for a in ("--system-url", url))]
    out = tmp_path / "result.json"
    passed = run_embedlab(
        "scenario", "same-model", *attach, "--scrape-config", good, "--json", out, env=_env()
    )
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.strip().splitlines()[-1] == "same-model on attached: PASSED"

    # Without the CA: one line, naming the worker and why, and nothing sent.
    no_ca = _scrape_config(
        tmp_path / "no-ca.yml", tls, password_file=tmp_path / "secrets" / "password", ca=False
    )
    before = _counts(dep.system_urls)
    refused = run_embedlab("scenario", "same-model", *attach, "--scrape-config", no_ca, env=_env())
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert (
        f"worker 0's metrics at {metrics[0]}/metrics failed the TLS handshake: certificate verify failed"
        in line
    )
    assert "tls_config.ca_file" in line

    # A wrong password: the 401, from the library as from the command line.
    (tmp_path / "wrong").write_text("not-the-password\n")
    wrong = _scrape_config(tmp_path / "wrong.yml", tls, password_file=tmp_path / "wrong")
    plan = ScenarioPlan(
        scenario="same-model",
        frontend_url=dep.frontend_url,
        system_urls=tuple(metrics),
        scrape_config=str(wrong),
    )
    with pytest.raises(AccessError) as err:
        run_scenario(plan)
    assert err.value.status == 401 and err.value.url == f"{metrics[0]}/metrics"
    assert "\n" not in str(err.value) and f"basic auth as '{USER}'" in str(err.value)
    assert _counts(dep.system_urls) == before  # neither refused run sent a request
    texts = [passed.stdout, passed.stderr, refused.stdout, refused.stderr, str(err.value)]
    _scan([dep.run_dir, out, good, no_ca, wrong], texts, [PASSWORD])
