"""The frontend's registry endpoints as plain calls: bytes in, (status, JSON body) out.

Registration, heartbeat, deregistration, the live weight API and the listing, over the
instance table. No aiohttp here: the frontend's HTTP handlers call it in-process, and
with `--processes N` a routing process that took such a request hands the same call to
the process that owns the table, so every process answers exactly what one would.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from ..http import is_loopback_host
from ..openai import ApiError, bad_request, dumps, error_body, loads
from .instances import InstanceTable, RegistrationConflict
from .upstream import WorkerUrlError, parse_worker_url

log = logging.getLogger("embedlab.frontend")

OPS = ("register", "list", "heartbeat", "deregister", "weight")
# The calls that change what dispatch sees; every routing process must have the change
# before the call is answered.
CHANGES = ("register", "deregister", "weight")


def _positive(weight: object) -> bool:
    return not isinstance(weight, bool) and isinstance(weight, (int, float)) and weight > 0


class RegistryService:
    def __init__(self, instances: InstanceTable, *, token: str | None, allow_remote_workers: bool) -> None:
        self.instances = instances
        self.token = token
        self.allow_remote_workers = allow_remote_workers

    def call(self, op: str, instance_id: str, body: bytes, authorization: str) -> tuple[int, bytes]:
        """One registry request; errors come back as OpenAI error JSON with their status."""
        try:
            self.authorize(authorization)
            status, payload = getattr(self, f"_{op}")(instance_id, body)
        except ApiError as exc:
            return exc.status, exc.body()
        except Exception:
            log.exception("unhandled error in registry call %s", op)
            return 500, error_body("Internal server error", type="server_error")
        return status, dumps(payload)

    def authorize(self, given: str) -> None:
        """An ApiError 401 unless `given` carries the registry's token (where it has one)."""
        if not self.token:
            return
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            raise ApiError(
                401,
                "The registry needs 'Authorization: Bearer <token>'",
                type="authentication_error",
                code="invalid_token",
            )

    def _register(self, instance_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        payload = loads(body)
        if not isinstance(payload, dict):
            raise bad_request("A registration must be a JSON object")
        for name in ("instance_id", "endpoint", "model", "url"):
            if not isinstance(payload.get(name), str) or not payload[name]:
                raise bad_request(f"'{name}' must be a non-empty string", param=name)
        weight = payload.get("weight", 1.0)
        if not _positive(weight):
            raise bad_request("'weight' must be a positive number", param="weight")
        url = payload["url"]
        # Refuse here what the dispatch cannot use: a URL that does not parse ('http://h:abc',
        # 'http://[::1') or https (the upstream client speaks plain HTTP), accepted, would
        # fail every request for the model with a 502. The upstream client's own
        # parser decides, so that what registers is exactly what dispatch can connect to.
        try:
            host: str | None = parse_worker_url(url)[0]
            invalid: WorkerUrlError | None = None
        except WorkerUrlError as exc:
            host, invalid = exc.host, exc
        # A URL that names a remote host is refused as remote even when it is also
        # malformed: 'http://127.0.0.1@example.com:9' is a remote worker in disguise.
        if host is not None and not self.allow_remote_workers and not is_loopback_host(host):
            raise ApiError(
                403,
                f"Worker URL {url} is not on loopback; start the frontend with --allow-remote-workers to accept it",
                type="permission_error",
                param="url",
                code="remote_worker_refused",
            )
        if invalid is not None:
            raise bad_request(
                f"Bad 'url': {invalid}; it must be http://host:port, optionally with a trailing '/'",
                param="url",
            )
        pid = payload.get("pid")
        max_len = payload.get("max_model_len")
        try:
            instance = self.instances.register(
                instance_id=payload["instance_id"],
                endpoint=payload["endpoint"],
                model=payload["model"],
                url=url,
                weight=float(weight),
                pid=pid if isinstance(pid, int) else None,
                max_model_len=max_len if isinstance(max_len, int) else None,
            )
        except RegistrationConflict as exc:
            log.error("%s", exc.message)
            raise ApiError(
                409, exc.message, type="conflict_error", param="model", code="registration_conflict"
            ) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        log.info(
            "registered %s (model %s, weight %g, %s)",
            instance.label,
            instance.model,
            instance.weight,
            instance.url,
        )
        return 201, {"instance_id": instance.instance_id, "lease_ttl_s": self.instances.ttl}

    def _heartbeat(self, instance_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if not self.instances.heartbeat(instance_id):
            raise ApiError(
                404,
                f"No live lease for instance {instance_id}; register again",
                type="not_found_error",
                code="lease_unknown",
            )
        return 200, {"instance_id": instance_id, "lease_ttl_s": self.instances.ttl}

    def _deregister(self, instance_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if not self.instances.deregister(instance_id):
            raise ApiError(404, f"No instance {instance_id}", type="not_found_error", code="lease_unknown")
        log.info("deregistered %s", instance_id)
        return 200, {"instance_id": instance_id, "deregistered": True}

    def _weight(self, instance_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """Change one instance's routing weight live (experiments: weight sweeps)."""
        payload = loads(body)
        weight = payload.get("weight") if isinstance(payload, dict) else None
        if not _positive(weight):
            raise bad_request("'weight' must be a positive number", param="weight")
        assert isinstance(weight, (int, float))
        if not self.instances.set_weight(instance_id, float(weight)):
            raise ApiError(404, f"No instance {instance_id}", type="not_found_error", code="lease_unknown")
        log.info("weight of %s set to %g", instance_id, weight)
        return 200, {"instance_id": instance_id, "weight": float(weight)}

    def _list(self, instance_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        return 200, {"models": self.instances.describe()}
