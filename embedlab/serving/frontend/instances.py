"""The frontend's instance table: model name -> live worker instances, kept alive by leases.

Pure logic with an injectable clock, so the rules (conflicts, same-model instances,
lease expiry) are unit-tested without a server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from ...defaults import LEASE_TTL_S
from ...errors import ConfigError
from ..registration import validate_endpoint


class RegistrationConflict(Exception):
    """A different model is already live on the requested endpoint path."""

    def __init__(self, *, requested: str, existing: str, endpoint: str) -> None:
        # Dynamo's wording, so that logs read the same on both stacks.
        self.message = (
            f"Cannot register model '{requested}' on endpoint '{endpoint_slashed(endpoint)}': "
            f"a different model '{existing}' is already registered there"
        )
        super().__init__(self.message)


def endpoint_slashed(endpoint: str) -> str:
    return endpoint.replace(".", "/")


@dataclass(slots=True, eq=False)
class Instance:
    instance_id: str
    endpoint: str
    model: str
    url: str
    weight: float = 1.0
    pid: int | None = None
    max_model_len: int | None = None
    registered_at: float = 0.0
    last_heartbeat: float = 0.0
    # Set when a dispatch to it could not connect; a heartbeat clears it. Keeps a dead
    # worker out of dispatch long before its lease lapses.
    suspect: bool = False
    inflight: int = 0
    label: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self.label = f"{self.endpoint}/{self.instance_id}"

    def describe(self, now: float) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "instance_id": self.instance_id,
            "address": self.url,
            "weight": self.weight,
            "pid": self.pid,
            "heartbeat_age_s": round(now - self.last_heartbeat, 3),
            "suspect": self.suspect,
            "inflight": self.inflight,
        }


class InstanceFields(TypedDict):
    """What a routing process's replica needs of each instance (inflight stays each process's own)."""

    instance_id: str
    endpoint: str
    model: str
    url: str
    weight: float
    pid: int | None
    max_model_len: int | None
    registered_at: float
    last_heartbeat: float
    suspect: bool


class TableSnapshot(TypedDict):
    known: list[str]
    instances: list[InstanceFields]


def instance_from(fields: InstanceFields) -> Instance:
    return Instance(**fields)


def instance_fields(instance: Instance) -> InstanceFields:
    return InstanceFields(
        instance_id=instance.instance_id,
        endpoint=instance.endpoint,
        model=instance.model,
        url=instance.url,
        weight=instance.weight,
        pid=instance.pid,
        max_model_len=instance.max_model_len,
        registered_at=instance.registered_at,
        last_heartbeat=instance.last_heartbeat,
        suspect=instance.suspect,
    )


class InstanceTable:
    """Model name -> instances. Not thread-safe: the frontend owns it on one event loop.

    With `embedlab frontend --processes N` one process owns the table and the others hold
    replicas (`snapshot` there, `apply_snapshot` here). Leases are compared with
    time.monotonic(), which is one clock for every process of the machine, so a lapsed
    lease leaves dispatch at the same instant in every replica.
    """

    def __init__(
        self,
        *,
        ttl: float = LEASE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        on_remove: Callable[[Instance], None] | None = None,
    ) -> None:
        if ttl <= 0:
            raise ConfigError("ttl must be positive")
        self.ttl = ttl
        self._clock = clock
        self._on_remove = on_remove
        self._instances: dict[str, Instance] = {}
        self._by_model: dict[str, list[Instance]] = {}
        # Models ever registered: a known model with nothing live is a 503, not a 404.
        self._known: set[str] = set()

    def register(
        self,
        *,
        instance_id: str,
        endpoint: str,
        model: str,
        url: str,
        weight: float = 1.0,
        pid: int | None = None,
        max_model_len: int | None = None,
    ) -> Instance:
        validate_endpoint(endpoint)
        if weight <= 0:
            raise ConfigError(f"weight must be positive, got {weight}")
        self.expire()
        for other in self._instances.values():
            if other.endpoint == endpoint and other.model != model and other.instance_id != instance_id:
                raise RegistrationConflict(requested=model, existing=other.model, endpoint=endpoint)
        self._drop(instance_id, notify=False)
        now = self._clock()
        instance = Instance(
            instance_id=instance_id,
            endpoint=endpoint,
            model=model,
            url=url.rstrip("/"),
            weight=float(weight),
            pid=pid,
            max_model_len=max_model_len,
            registered_at=now,
            last_heartbeat=now,
        )
        self._instances[instance_id] = instance
        self._by_model.setdefault(model, []).append(instance)
        self._known.add(model)
        return instance

    def heartbeat(self, instance_id: str) -> bool:
        """Renew a lease. False means the lease already lapsed: the worker must re-register."""
        instance = self._instances.get(instance_id)
        if instance is None or self._lapsed(instance, self._clock()):
            self._drop(instance_id)
            return False
        instance.last_heartbeat = self._clock()
        instance.suspect = False
        return True

    def deregister(self, instance_id: str) -> bool:
        return self._drop(instance_id) is not None

    def set_weight(self, instance_id: str, weight: float) -> bool:
        if weight <= 0:
            raise ConfigError(f"weight must be positive, got {weight}")
        instance = self._instances.get(instance_id)
        if instance is None:
            return False
        instance.weight = weight
        return True

    def mark_suspect(self, instance_id: str) -> None:
        instance = self._instances.get(instance_id)
        if instance is not None:
            instance.suspect = True

    def expire(self) -> list[Instance]:
        """Drop every instance whose lease lapsed; returns them."""
        now = self._clock()
        lapsed = [i for i in self._instances.values() if self._lapsed(i, now)]
        for instance in lapsed:
            self._drop(instance.instance_id)
        return lapsed

    def get(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id)

    def live(self, model: str) -> list[Instance]:
        """Instances that may take a request for `model` now."""
        instances = self._by_model.get(model)
        if not instances:
            return []
        now = self._clock()
        return [i for i in instances if not i.suspect and not self._lapsed(i, now)]

    def is_known(self, model: str) -> bool:
        return model in self._known

    def models(self) -> list[str]:
        """Models with at least one live instance, sorted."""
        return sorted(m for m in self._by_model if self.live(m))

    def instances(self) -> Iterable[Instance]:
        return tuple(self._instances.values())

    def describe(self) -> dict[str, list[dict[str, object]]]:
        now = self._clock()
        return {
            model: [i.describe(now) for i in instances if not self._lapsed(i, now)]
            for model, instances in sorted(self._by_model.items())
        }

    def snapshot(self) -> TableSnapshot:
        """The whole table as plain data, instances in registration order per model."""
        return TableSnapshot(
            known=sorted(self._known),
            instances=[instance_fields(i) for group in self._by_model.values() for i in group],
        )

    def apply_snapshot(self, snapshot: TableSnapshot) -> None:
        """Become a copy of `snapshot`; instances that stay keep their objects (and in-flight counts)."""
        old, self._instances, self._by_model = self._instances, {}, {}
        for fields in snapshot["instances"]:
            instance = old.get(fields["instance_id"])
            if instance is None or (instance.endpoint, instance.model, instance.url) != (
                fields["endpoint"],
                fields["model"],
                fields["url"],
            ):
                instance = instance_from(fields)
            else:  # the same worker: its lease and what it says of itself
                instance.weight = fields["weight"]
                instance.pid = fields["pid"]
                instance.max_model_len = fields["max_model_len"]
                instance.registered_at = fields["registered_at"]
                instance.last_heartbeat = fields["last_heartbeat"]
                instance.suspect = fields["suspect"]
            self._instances[instance.instance_id] = instance
            self._by_model.setdefault(instance.model, []).append(instance)
        self._known = set(snapshot["known"])
        if self._on_remove is not None:
            for instance_id, instance in old.items():
                if self._instances.get(instance_id) is not instance:
                    self._on_remove(instance)

    def _lapsed(self, instance: Instance, now: float) -> bool:
        return now - instance.last_heartbeat > self.ttl

    def _drop(self, instance_id: str, *, notify: bool = True) -> Instance | None:
        instance = self._instances.pop(instance_id, None)
        if instance is not None:
            siblings = self._by_model.get(instance.model, [])
            if instance in siblings:
                siblings.remove(instance)
            if not siblings:
                self._by_model.pop(instance.model, None)
            if notify and self._on_remove is not None:
                self._on_remove(instance)
        return instance
