from __future__ import annotations

import pytest

from embedlab.serving.frontend.instances import InstanceTable, RegistrationConflict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reg(registry: InstanceTable, instance_id: str, endpoint: str, model: str, weight: float = 1.0) -> None:
    registry.register(
        instance_id=instance_id,
        endpoint=endpoint,
        model=model,
        url=f"http://127.0.0.1:1/{instance_id}",
        weight=weight,
    )


def test_conflict_message_is_exact() -> None:
    registry = InstanceTable()
    reg(registry, "i1", "ns.comp.ep", "A")
    with pytest.raises(RegistrationConflict) as err:
        reg(registry, "i2", "ns.comp.ep", "B")
    assert err.value.message == (
        "Cannot register model 'B' on endpoint 'ns/comp/ep': a different model 'A' is already registered there"
    )
    assert registry.models() == ["A"]


def test_same_model_same_endpoint_is_another_instance() -> None:
    registry = InstanceTable()
    reg(registry, "i1", "ns.comp.ep", "A")
    reg(registry, "i2", "ns.comp.ep", "A")
    assert [i.instance_id for i in registry.live("A")] == ["i1", "i2"]


def test_conflict_clears_once_the_other_model_leaves() -> None:
    clock = Clock()
    registry = InstanceTable(ttl=3.0, clock=clock)
    reg(registry, "i1", "ns.comp.ep", "A")
    clock.now += 3.5  # A's lease lapsed
    reg(registry, "i2", "ns.comp.ep", "B")
    assert registry.models() == ["B"]


def test_lease_expiry_takes_instance_out_of_dispatch() -> None:
    clock = Clock()
    registry = InstanceTable(ttl=3.0, clock=clock)
    reg(registry, "i1", "ns.a.ep", "A")
    reg(registry, "i2", "ns.b.ep", "A")
    clock.now += 2.0
    assert registry.heartbeat("i2")
    clock.now += 1.5  # i1: 3.5 s without heartbeat; i2: 1.5 s
    assert [i.instance_id for i in registry.live("A")] == ["i2"]
    assert [i.instance_id for i in registry.expire()] == ["i1"]
    assert not registry.heartbeat("i1"), "a lapsed lease must re-register"


def test_known_model_without_instances_stays_known() -> None:
    registry = InstanceTable()
    reg(registry, "i1", "ns.a.ep", "A")
    assert registry.deregister("i1")
    assert registry.models() == []
    assert registry.is_known("A") and not registry.is_known("B")


def test_suspect_instance_returns_on_heartbeat() -> None:
    registry = InstanceTable()
    reg(registry, "i1", "ns.a.ep", "A")
    registry.mark_suspect("i1")
    assert registry.live("A") == []
    registry.heartbeat("i1")
    assert len(registry.live("A")) == 1


@pytest.mark.parametrize("endpoint", ["ns.comp", "ns..ep", "a.b.c.d", ""])
def test_malformed_endpoint_is_rejected(endpoint: str) -> None:
    with pytest.raises(ValueError):
        reg(InstanceTable(), "i1", endpoint, "A")


def test_on_remove_hook_sees_departures_but_not_reregistration() -> None:
    gone: list[str] = []
    registry = InstanceTable(on_remove=lambda i: gone.append(i.instance_id))
    reg(registry, "i1", "ns.a.ep", "A")
    reg(registry, "i1", "ns.a.ep", "A")
    assert gone == []
    registry.deregister("i1")
    assert gone == ["i1"]
