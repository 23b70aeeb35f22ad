"""Errors by meaning, with the fields a caller reads instead of parsing the message."""

from __future__ import annotations

import shutil
import socket

import pytest

from embedlab import DiscoveryError, EmbedlabError, NetworkError
from embedlab.cluster.etcd import discovered
from embedlab.cluster.hosts import Host, Network


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_etcd_that_cannot_be_listed_is_a_discovery_error_with_its_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(DiscoveryError, match="cannot list instances in etcd") as err:
        discovered(url, timeout=1.0)
    assert err.value.url == f"{url}/v3/kv/range"
    assert isinstance(err.value, EmbedlabError)


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip")
def test_a_link_that_cannot_be_changed_is_a_network_error_naming_its_host() -> None:
    # A host whose namespace does not exist: `ip -n` fails, as it would for one deleted under the run.
    gone = Host(index=1, address="10.254.1.10", hub="10.254.1.1", namespace="embl-no-such-ns-h1", veth="nope")
    network = Network(
        hosts=[Host(index=0, address="10.254.1.1", hub="10.254.1.1"), gone], subnet="10.254.1.0/24"
    )
    with pytest.raises(
        NetworkError, match=r"^host 1: `ip -n embl-no-such-ns-h1 link set nope down` failed"
    ) as err:
        network.partition(1)
    assert err.value.host == 1 and err.value.command[:3] == ("ip", "-n", "embl-no-such-ns-h1")
