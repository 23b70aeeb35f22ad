"""Exposure beyond loopback: a shared token guards the registry, remote workers need consent.

The frontend binds a real non-loopback address of this machine only here, only briefly,
and only with a token set. The token is a fresh random string per test session, so a
search for it in logs, command lines and reports can only find a leak.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from embedlab import Deployment, DeploymentSpec, same_model_load_balance
from embedlab.cluster.managed_process import ManagedProcess
from embedlab.cluster.ports import release_port, reserve_port
from embedlab.serving.frontend.app import FrontendConfig

from ..commands import run_embedlab

TOKEN_ENV = "EMBEDLAB_TOKEN"
TOKEN = f"embedlab-test-token-{secrets.token_hex(16)}"


def non_loopback_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing), else 0.0.0.0."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere
            address = sock.getsockname()[0]
        except OSError:
            address = ""
    if not address or ipaddress.ip_address(address).is_loopback:
        return "0.0.0.0"
    return address


HOST = non_loopback_address()
# A client reaches a 0.0.0.0 bind on loopback; a specific address, on that address.
REACH = "127.0.0.1" if HOST == "0.0.0.0" else HOST


def env_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != TOKEN_ENV}


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_error(response: httpx.Response, status: int, error_type: str) -> dict[str, object]:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == error_type
    assert TOKEN not in response.text
    return error


def assert_no_token_in(paths: list[Path]) -> None:
    assert paths, "nothing to search"
    leaks = [str(p) for p in paths if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [], f"the token appears in {leaks}"


def assert_no_token_in_cmdlines(pids: list[int]) -> None:
    # Command lines are readable by every user of the machine: the token travels in the environment.
    for pid in pids:
        assert TOKEN.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), (
            f"the token is in pid {pid}'s argv"
        )


@contextmanager
def exposed_frontend(tmp_path: Path, *extra: str) -> Iterator[tuple[str, ManagedProcess]]:
    port = reserve_port(HOST)
    proc = ManagedProcess(
        "frontend",
        [sys.executable, "-m", "embedlab", "frontend", "--host", HOST, "--port", str(port), *extra],
        log_path=tmp_path / "frontend.log",
        env={**os.environ, TOKEN_ENV: TOKEN},
    )
    url = f"http://{REACH}:{port}"
    try:
        proc.start()
        with httpx.Client(timeout=2) as client:
            proc.wait_ready(lambda: client.get(f"{url}/health").status_code == 200, timeout=60)
        yield url, proc
    finally:
        proc.stop()
        release_port(port)


def registration(instance_id: str, url: str, endpoint: str = "test.exposed.generate") -> dict[str, object]:
    return {"instance_id": instance_id, "endpoint": endpoint, "model": "exposed-model", "url": url}


# -- refusing to start ----------------------------------------------------------------------------


@pytest.mark.parametrize("host", sorted({HOST, "0.0.0.0"}))
@pytest.mark.parametrize("token", [None, ""], ids=["unset", "empty"])
def test_cli_refuses_a_non_loopback_bind_without_a_token(host: str, token: str | None) -> None:
    env = env_without_token()
    if token is not None:
        env[TOKEN_ENV] = token
    proc = run_embedlab("frontend", "--host", host, "--port", "0", timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {proc.stderr}"
    assert "refusing to bind" in lines[0] and TOKEN_ENV in lines[0] and host in lines[0]
    with pytest.raises(ValueError, match=TOKEN_ENV):
        FrontendConfig(host=host, port=0)


# -- with the token ---------------------------------------------------------------------------------


def test_registry_endpoints_need_the_token_and_remote_workers_are_refused(tmp_path: Path) -> None:
    with exposed_frontend(tmp_path) as (url, frontend), httpx.Client(base_url=url, timeout=10) as client:
        wrong = [
            {},
            auth("not-the-token"),
            {"Authorization": TOKEN},
            {"Authorization": f"bearer {TOKEN}"},
            auth(TOKEN[:-1]),
            auth(TOKEN + "x"),
            {"X-Token": TOKEN},
        ]
        calls = [
            ("POST", "/registry/instances", registration("i1", "http://127.0.0.1:9")),
            ("GET", "/registry/instances", None),
            ("PUT", "/registry/instances/i1/heartbeat", None),
            ("PUT", "/registry/instances/i1/weight", {"weight": 2}),
            ("DELETE", "/registry/instances/i1", None),
        ]
        for headers in wrong:
            for method, path, body in calls:
                error = assert_error(
                    client.request(method, path, json=body, headers=headers), 401, "authentication_error"
                )
                assert error["code"] == "invalid_token"
        assert "i1" not in client.get("/registry/instances", headers=auth()).text, (
            "a refused registration registered"
        )

        # With the token, every registry call works, in order.
        expected = [201, 200, 200, 200, 200]
        for (method, path, body), status in zip(calls, expected):
            response = client.request(method, path, json=body, headers=auth())
            assert response.status_code == status, (method, path, response.text)
        # The OpenAI surface stays open: clients of the API hold no registry token.
        assert client.get("/v1/models").status_code == 200

        # Only loopback request planes, even with the token.
        for remote in [
            f"http://{HOST}:9",
            "http://10.1.2.3:9",
            "http://192.0.2.7:9",
            "http://example.com:9",
            "http://127.0.0.1@example.com:9/",
            "http://0.0.0.0:9",
            "http://[::ffff:10.0.0.1]:9",
        ]:
            error = assert_error(
                client.post("/registry/instances", json=registration("r", remote), headers=auth()),
                403,
                "permission_error",
            )
            assert error["param"] == "url" and error["code"] == "remote_worker_refused"
        for local in ["http://127.0.0.1:9", "http://localhost:9", "http://[::1]:9", "http://127.5.6.7:9"]:
            response = client.post(
                "/registry/instances", json=registration(f"l-{local}", local), headers=auth()
            )
            assert response.status_code == 201, (local, response.text)
    assert_no_token_in([frontend.log_path])


def test_allow_remote_workers_accepts_a_remote_request_plane(tmp_path: Path) -> None:
    with exposed_frontend(tmp_path, "--allow-remote-workers") as (url, _):
        with httpx.Client(base_url=url, timeout=10) as client:
            response = client.post(
                "/registry/instances", json=registration("r", f"http://{HOST}:9"), headers=auth()
            )
            assert response.status_code == 201, response.text
            # The consent is for remote workers, not for skipping the token.
            assert_error(
                client.post("/registry/instances", json=registration("s", "http://10.1.2.3:9")),
                401,
                "authentication_error",
            )


def test_workers_register_with_the_token_from_their_environment_and_serve(tmp_path: Path) -> None:
    with exposed_frontend(tmp_path) as (url, frontend):

        def worker(name: str, env: dict[str, str]) -> ManagedProcess:
            port = reserve_port()
            argv = [
                sys.executable,
                "-m",
                "embedlab",
                "worker",
                "--served-model-name",
                "exposed-model",
                "--endpoint",
                f"test.{name}.generate",
                "--frontend-url",
                url,
                "--system-port",
                str(port),
                "--register-timeout",
                "30",
            ]
            return ManagedProcess(name, argv, log_path=tmp_path / f"{name}.log", env=env).start()

        good = worker("with-token", {**os.environ, TOKEN_ENV: TOKEN})
        bad = worker("without-token", env_without_token())
        try:
            # Refused registration: the worker exits non-zero with the frontend's reason.
            assert bad._popen is not None
            assert bad._popen.wait(timeout=60) != 0
            assert "Authorization: Bearer" in bad.log_tail()
            with httpx.Client(base_url=url, timeout=10) as client:
                good.wait_ready(
                    lambda: "exposed-model" in {m["id"] for m in client.get("/v1/models").json()["data"]},
                    timeout=60,
                    what="the frontend listed its model",
                )
                response = client.post("/v1/embeddings", json={"model": "exposed-model", "input": "hello"})
                assert response.status_code == 200 and response.headers["x-embedlab-worker"].startswith(
                    "test.with-token"
                )
            assert_no_token_in_cmdlines([p for p in (frontend.pid, good.pid) if p])
        finally:
            good.stop()
            bad.stop()
    assert_no_token_in([frontend.log_path, good.log_path, bad.log_path])


# -- a whole deployment and its reports, on loopback, with the token set ----------------------------


def test_deployment_with_a_token_end_to_end_leaks_it_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with Deployment(DeploymentSpec.same_model("m", workers=2, seed=0), run_dir=tmp_path / "run") as dep:
        # The frontend enforces the token it was given, on loopback too...
        assert httpx.get(f"{dep.frontend_url}/registry/instances", timeout=5).status_code == 401
        # ...so workers registered only because they inherited it, and the harness's own
        # registry calls must carry it.
        dep.steering.set_weights([1.0, 3.0])
        result = same_model_load_balance(dep)  # sized from the pool: 1:3 needs more than 40
        assert result.passed, result.summary()
        assert_no_token_in_cmdlines([p.pid for p in dep.processes if p.pid])
    assert TOKEN not in str(result.to_json())
    assert_no_token_in(sorted((tmp_path / "run").rglob("*")))


def test_regression_reports_never_contain_the_token(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        'notebooks = ["multi_model_dispatch"]\n[defaults]\nrequests = 5\n[[params]]\nname = "token"\nstack = "embedded"\n'
    )
    out = tmp_path / "outputs"
    proc = run_embedlab(
        "regress",
        "--matrix",
        str(matrix),
        "--out",
        str(out),
        "--timeout",
        "120",
        timeout=300,
        env={**os.environ, TOKEN_ENV: TOKEN},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert TOKEN not in proc.stdout + proc.stderr
    written = sorted(out.rglob("*"))
    assert any(p.suffix == ".html" for p in written) and any(p.suffix == ".ipynb" for p in written)
    assert any(p.suffix == ".log" for p in written), "the run's server logs are part of the search"
    assert_no_token_in(written)
