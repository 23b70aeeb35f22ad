"""A link that `ip` cannot change is a `NetworkError` naming its host and the command (`ip` runs,
and fails, for a namespace that does not exist; the errors of pure logic: tests/unit/test_error_fields.py)."""

from __future__ import annotations

import shutil

import pytest

from embedlab import NetworkError
from embedlab.cluster.hosts import Host, Network

from ..requires import missing


def test_a_link_that_cannot_be_changed_is_a_network_error_naming_its_host() -> None:
    if shutil.which("ip") is None:
        missing("ip", "iproute2's ip is missing: `make cluster-debs` installs it")
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
