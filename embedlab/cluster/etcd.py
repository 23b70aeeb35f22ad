"""etcd for one run, and what Dynamo keeps in it, read without an etcd client library.

    argv = etcd_argv(data_dir=run_dir / "etcd", client_port=pc, peer_port=pp, hosts=["127.0.0.1"])
    discovered(f"http://127.0.0.1:{pc}", namespace="ns")  # the instances the cluster believes live

Debian's `etcd-server` (3.4) serves its v3 API as JSON on the client URL (the gRPC
gateway), so listing keys is one POST with base64 keys.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError, DiscoveryError
from ..evidence import clients

__all__ = ["DiscoveredInstance", "discovered", "etcd_argv", "etcd_binary"]

INSTANCES_PREFIX = "v1/instances/"  # Dynamo 1.6: v1/instances/<namespace>/<component>/<endpoint>/<id>


def etcd_binary() -> str:
    found = shutil.which("etcd")
    if found is None:
        raise ConfigError(
            "discovery on etcd needs Debian's etcd-server: `make test` and `make run` install it "
            "(or apt-get install -y etcd-server)"
        )
    return found


def etcd_argv(
    *, data_dir: Path, client_port: int, peer_port: int, hosts: Sequence[str], name: str = "embedlab"
) -> list[str]:
    """One etcd member on `hosts` (its client port on each), peers on loopback only."""
    clients_urls = ",".join(f"http://{h}:{client_port}" for h in dict.fromkeys(hosts))
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        etcd_binary(),
        "--name",
        name,
        "--data-dir",
        str(data_dir),
        "--listen-client-urls",
        clients_urls,
        "--advertise-client-urls",
        clients_urls,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"{name}={peer}",
        "--log-level",
        "warn",
    ]


@dataclass(frozen=True)
class DiscoveredInstance:
    """One instance etcd lists: the endpoint path, its id (the lease), and where it listens."""

    namespace: str
    component: str
    endpoint: str
    instance_id: str
    address: str | None
    lease: str | None

    @property
    def path(self) -> str:
        return f"{self.namespace}.{self.component}.{self.endpoint}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _range_end(prefix: str) -> str:
    """The end of a prefix range: the prefix with its last byte incremented, as etcdctl --prefix does."""
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


def _address(value: Any) -> str | None:
    """`host:port` of an instance's request plane: Dynamo 1.6 writes {"transport": {"tcp": "host:port/path"}}."""
    transport = value.get("transport") if isinstance(value, dict) else None
    if isinstance(transport, dict):
        for address in transport.values():
            if isinstance(address, str):
                return address.split("/", 1)[0]
    return None


def discovered(
    endpoint: str, *, namespace: str | None = None, timeout: float = 5.0
) -> list[DiscoveredInstance]:
    """The instances registered in etcd at `endpoint`, under `namespace` (all where None)."""
    prefix = INSTANCES_PREFIX + (f"{namespace}/" if namespace else "")
    url = endpoint.rstrip("/") + "/v3/kv/range"
    try:
        with clients.client(timeout=timeout) as client:
            response = client.post(url, json={"key": _b64(prefix), "range_end": _range_end(prefix)})
            response.raise_for_status()
            body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DiscoveryError(
            f"cannot list instances in etcd at {url}: {exc.__class__.__name__}: {exc}", url=url
        ) from exc
    found = []
    for kv in body.get("kvs", []):
        key = base64.b64decode(kv["key"]).decode(errors="replace")
        parts = key[len(INSTANCES_PREFIX) :].split("/")
        if len(parts) < 4:
            continue
        try:
            value = json.loads(base64.b64decode(kv.get("value", "")) or b"null")
        except ValueError:
            value = None
        found.append(
            DiscoveredInstance(
                namespace=parts[0],
                component=parts[1],
                endpoint=parts[2],
                instance_id=parts[3],
                address=_address(value),
                lease=kv.get("lease"),
            )
        )
    return found
