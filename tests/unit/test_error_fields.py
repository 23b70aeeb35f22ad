"""Errors by meaning, with the fields a caller reads instead of parsing the message."""

from __future__ import annotations

import socket

import pytest

from embedlab import DiscoveryError, EmbedlabError
from embedlab.cluster.etcd import discovered


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
