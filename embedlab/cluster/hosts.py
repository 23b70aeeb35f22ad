"""Simulated hosts: Linux network namespaces a run creates, owns and deletes.

    network = Network.create(run_id="ab12cd", hosts=3)     # host 0 is the harness's own
    network.hosts[1].wrap(argv)                            # run argv on host 1
    network.partition(1); network.heal(1)                  # its link down, then up
    network.destroy()

Host 0 is the harness's namespace. It owns the run's hub address (a /32 on its loopback
device, so that no one host's link going down takes it away), which every other host
reaches through its own veth pair: etcd and the frontend listen there.
Hosts 1..N-1 are namespaces joined to host 0 by one veth pair each, with a /30 of a
private /24 chosen at random per run (and checked unused), so two runs never collide.
Hosts reach host 0, and host 0 reaches them; hosts never reach each other (no forwarding).

Everything a run creates is registered with the watchdog before it exists, so a killed
harness leaves no namespace or link behind.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..defaults import HOST
from ..errors import ConfigError, NetworkError
from .managed_process import register_cleanup, unregister_cleanup

__all__ = ["Host", "Network", "can_make_namespaces"]

_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21  # `ip netns add` mounts /run/netns too


def can_make_namespaces() -> bool:
    """Root, or CAP_NET_ADMIN and CAP_SYS_ADMIN in the effective set (what `ip netns add` needs)."""
    if os.geteuid() == 0:
        return True
    try:
        for line in open("/proc/self/status"):
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
                return all(effective >> cap & 1 for cap in (_CAP_NET_ADMIN, _CAP_SYS_ADMIN))
    except OSError:
        pass
    return False


def _ip(*args: str, check: bool = True, host: int | None = None) -> subprocess.CompletedProcess[str]:
    """`ip ARGS`; a failure (with `check`) is a NetworkError that names `host`, where it concerns one."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        where = "" if host is None else f"host {host}: "
        raise NetworkError(
            f"{where}`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}",
            host=host,
            command=("ip", *args),
        )
    return proc


@dataclass(frozen=True)
class Host:
    """One simulated host: where its processes run and the address its listeners bind."""

    index: int
    address: str  # its own address: listeners bind here, and the harness reaches them here
    hub: str  # host 0 as this host reaches it: etcd and the frontend's response stream
    namespace: str | None = None  # None: the harness's own namespace
    veth: str | None = None  # the host's end of its link to host 0

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv`, run on this host."""
        return ["ip", "netns", "exec", self.namespace, *argv] if self.namespace else list(argv)


@dataclass
class Network:
    """The hosts of one run. `Network.local()` is a single host on loopback and creates nothing."""

    hosts: list[Host]
    subnet: str | None = None
    hub: str | None = None  # the run's address on host 0's loopback device
    _made: list[str] = field(default_factory=list)  # namespaces, in creation order
    destroyed: bool = False

    @classmethod
    def local(cls) -> Network:
        return cls(hosts=[Host(index=0, address=HOST, hub=HOST)])

    @classmethod
    def create(cls, *, run_id: str, hosts: int) -> Network:
        """Host 0 plus `hosts - 1` namespaces. A failure halfway deletes what was made."""
        if hosts < 2:
            return cls.local()
        if not can_make_namespaces():
            raise ConfigError(
                f"hosts={hosts} needs network namespaces, which need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); "
                "run as root, or use hosts=1"
            )
        if shutil.which("ip") is None:
            raise ConfigError("hosts > 1 needs iproute2's `ip` command (apt-get install -y iproute2)")
        if hosts > 63:
            raise ConfigError(f"at most 63 hosts fit a run's /24, got {hosts}")
        subnet = _free_subnet()
        addresses = list(subnet.hosts())
        hub = str(addresses[0])  # .1, on the dummy link
        network = cls(hosts=[Host(index=0, address=hub, hub=hub)], subnet=str(subnet))
        try:
            network._add_hub(hub)
            for index in range(1, hosts):
                network._add_host(index, run_id=run_id, subnet=subnet)
        except BaseException:
            network.destroy()
            raise
        return network

    def _add_hub(self, hub: str) -> None:
        register_cleanup(("ip", "addr", "del", f"{hub}/32", "dev", "lo"))
        _ip("addr", "add", f"{hub}/32", "dev", "lo", host=0)
        self.hub = hub

    def _add_host(self, index: int, *, run_id: str, subnet: ipaddress.IPv4Network) -> None:
        # Host k owns the /30 at 4k: .4k+1 on host 0's side, .4k+2 on its own.
        base = int(subnet.network_address) + 4 * index
        outer, inner = str(ipaddress.ip_address(base + 1)), str(ipaddress.ip_address(base + 2))
        namespace, root_end, host_end = (
            f"embl-{run_id}-h{index}",
            f"embl{run_id}r{index}",
            f"embl{run_id}h{index}",
        )
        register_cleanup(("ip", "netns", "del", namespace))
        _ip("netns", "add", namespace, host=index)
        self._made.append(namespace)
        _ip("link", "add", root_end, "type", "veth", "peer", "name", host_end, host=index)
        _ip("link", "set", host_end, "netns", namespace, host=index)
        _ip("addr", "add", f"{outer}/30", "dev", root_end, host=index)
        _ip("link", "set", root_end, "up", host=index)
        _ip("-n", namespace, "addr", "add", f"{inner}/30", "dev", host_end, host=index)
        _ip("-n", namespace, "link", "set", "lo", "up", host=index)
        host = Host(index=index, address=inner, hub=self.hosts[0].address, namespace=namespace, veth=host_end)
        self.hosts.append(host)
        self.heal(index)

    def host(self, index: int) -> Host:
        if not 0 <= index < len(self.hosts):
            raise ConfigError(f"no host {index}; this run has hosts 0..{len(self.hosts) - 1}")
        return self.hosts[index]

    def partition(self, index: int) -> None:
        """Take host `index`'s link down: it reaches nothing, and nothing reaches it."""
        namespace, veth = self._link(index)
        _ip("-n", namespace, "link", "set", veth, "down", host=index)

    def heal(self, index: int) -> None:
        """Bring host `index`'s link up again, with its route to the hub (a link going down drops it)."""
        namespace, veth = self._link(index)
        assert self.subnet is not None
        peer = str(ipaddress.ip_address(int(ipaddress.ip_address(self.host(index).address)) - 1))
        _ip("-n", namespace, "link", "set", veth, "up", host=index)
        _ip("-n", namespace, "route", "replace", self.subnet, "via", peer, "dev", veth, host=index)

    def _link(self, index: int) -> tuple[str, str]:
        """Host `index`'s namespace and its end of the link to host 0."""
        host = self.host(index)
        if host.namespace is None or host.veth is None:
            raise ConfigError("host 0 is the harness's own: it has no link of its own to cut")
        return host.namespace, host.veth

    def destroy(self) -> None:
        """Delete every namespace (their veth ends go with them) and the hub address. Safe to repeat."""
        if self.destroyed:
            return
        for namespace in reversed(self._made):
            _ip("netns", "del", namespace, check=False)
            unregister_cleanup(("ip", "netns", "del", namespace))
        if self.hub is not None:
            _ip("addr", "del", f"{self.hub}/32", "dev", "lo", check=False)
            unregister_cleanup(("ip", "addr", "del", f"{self.hub}/32", "dev", "lo"))
        self._made.clear()
        self.destroyed = True


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of the pool that no address or route on this machine touches yet."""
    used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
    rng = random.Random(time.time_ns() ^ os.getpid())
    for _ in range(200):
        candidate = ipaddress.IPv4Network(f"10.{rng.randrange(128, 256)}.{rng.randrange(256)}.0/24")
        prefix = ".".join(str(candidate.network_address).split(".")[:3]) + "."
        if prefix not in used:
            return candidate
    raise ConfigError("no free private /24 for the run's hosts")
