"""Credentials and TLS for a deployment the harness reads, in the words its users already have.

    target = attach(url, urls, scrape_config="scrape-auth.yml")  # the key: $OPENAI_API_KEY
    embedlab scenario same-model --frontend-url URL --system-url URL ... --scrape-config scrape-auth.yml

- **The frontend** takes an API key, sent as `Authorization: Bearer <key>` to its origin and
  nowhere else: `--api-key` (`attach(api_key=...)`), else `$OPENAI_API_KEY` where set, as
  OpenAI's own client reads it.
- **The workers' metrics** take the fields of Prometheus' own scrape config, in a small file
  given once per deployment (YAML, TOML or JSON) and used for every metrics URL of it:

      authorization: {type: Bearer, credentials_file: /run/secrets/scrape-token}
      basic_auth:    {username: prometheus, password_file: scrape-password}
      tls_config:    {ca_file: ca.pem, cert_file: client.pem, key_file: client.key}

  Prometheus' rules hold: at most one of `authorization` and `basic_auth`; a secret given
  inline or in its `_file`, not both; `cert_file` with `key_file`; a `ca_file` replaces the
  system's CAs; `insecure_skip_verify: true` checks nothing; a relative path is read from
  the file's folder. Any other field is an error that names it.
- **The Prometheus** the counters are read through (`--prometheus-url`) takes the same fields,
  in a file of its own (`--prometheus-http-config`, promtool's `--http.config.file`): sent with
  every request to its origin (queries, targets, the model probe) and nowhere else.

A secret lives in a `Secret`, which prints as `***` and has no JSON form, so a repr, a
result or a log line that takes one shows the mask. `granted(access)` puts an `Access` in
force for a block (a scenario run, a launched deployment's life): the clients that
`evidence.clients` makes meanwhile send each origin its own credentials and trust.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import json
import ssl
import threading
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError

__all__ = [
    "Access",
    "ScrapeAuth",
    "Secret",
    "context_for",
    "grant",
    "granted",
    "headers_for",
    "origin",
    "prometheus_access",
    "read_config",
]

# Prometheus' scrape-config fields that a file here takes, by block (its own names).
FIELDS: dict[str, tuple[str, ...]] = {
    "authorization": ("type", "credentials", "credentials_file"),
    "basic_auth": ("username", "username_file", "password", "password_file"),
    "tls_config": ("ca_file", "cert_file", "key_file", "insecure_skip_verify"),
}
# What a file of these fields is called where it says how to reach a Prometheus (`what` in messages).
HTTP_CONFIG = "Prometheus HTTP config"
# What Prometheus 3 calls the fields older configs still carry.
_RENAMED = {
    "bearer_token": "authorization.credentials",
    "bearer_token_file": "authorization.credentials_file",
}


class Secret:
    """A credential: `reveal()` gives it; `str`, `repr` and copies show `***`, and JSON refuses it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(self._value)

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self  # immutable; dataclasses.asdict deep-copies what it does not know


@dataclass(frozen=True, kw_only=True)
class ScrapeAuth:
    """How the harness reads a deployment's metrics: Prometheus' scrape-config fields, read once.

    `ScrapeAuth.load(path)` reads a file; every secret is held as a `Secret`. `context` is the
    TLS trust the fields ask for (None: the system's, as for any other URL). The same fields
    say how to reach a Prometheus (its HTTP client config: `load(path, what=HTTP_CONFIG)`).
    """

    source: str = ""  # the file it was read from, as messages name it
    authorization_type: str = ""  # "Bearer" (or the scheme given); "": no authorization block
    credentials: Secret | None = None
    username: str = ""
    password: Secret | None = None
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure_skip_verify: bool = False
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    @classmethod
    def load(cls, path: str | Path, *, what: str = "scrape config") -> ScrapeAuth:
        """Read a scrape-config file (YAML, TOML or JSON, by its suffix); a mistake is a ConfigError
        naming it (and `what` it is: a scrape config, or a Prometheus HTTP config)."""
        path = Path(path).expanduser()
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
        return cls.parse(_decode(text, path), base=path.parent, source=str(path), what=what)

    @classmethod
    def parse(cls, data: Any, *, base: Path, source: str, what: str = "scrape config") -> ScrapeAuth:
        """From the decoded file: Prometheus' field names, paths relative to `base`."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a {what} is a mapping of {', '.join(FIELDS)}")
        for name in data:
            if name in _RENAMED:
                raise ConfigError(f"{source}: {name} is {_RENAMED[name]} in Prometheus 3; write it so")
            if name not in FIELDS:
                raise ConfigError(
                    f"{source}: unknown field {name!r}; a {what} here takes {', '.join(FIELDS)} "
                    "(Prometheus' names)"
                )
        blocks = {name: _block(data, name, source) for name in FIELDS}
        if blocks["authorization"] and blocks["basic_auth"]:
            raise ConfigError(f"{source}: at most one of authorization and basic_auth may be configured")
        read = _Reader(base, source)
        values: dict[str, Any] = {"source": source}
        auth = blocks["authorization"]
        if auth:
            kind = read.text(auth, "authorization.type") or "Bearer"
            if kind.lower() == "basic":
                raise ConfigError(f'{source}: authorization type cannot be "Basic": use basic_auth instead')
            values["authorization_type"] = kind
            values["credentials"] = read.secret(auth, "authorization", "credentials", "credentials_file")
        basic = blocks["basic_auth"]
        if basic:
            username = read.secret(basic, "basic_auth", "username", "username_file")
            values["username"] = username.reveal()
            values["password"] = read.secret(basic, "basic_auth", "password", "password_file", required=False)
        tls = blocks["tls_config"]
        for name in ("ca_file", "cert_file", "key_file"):
            if tls.get(name) is not None:
                values[name] = str(read.path(tls, f"tls_config.{name}"))
        skip = tls.get("insecure_skip_verify", False)
        if not isinstance(skip, bool):
            raise ConfigError(
                f"{source}: tls_config.insecure_skip_verify must be true or false, got {skip!r}"
            )
        values["insecure_skip_verify"] = skip
        if bool(values.get("cert_file")) != bool(values.get("key_file")):
            given, missing = (
                ("cert_file", "key_file") if values.get("cert_file") else ("key_file", "cert_file")
            )
            raise ConfigError(f"{source}: tls_config.{given} is given without tls_config.{missing}")
        made = cls(**values)
        return made._with_context()

    def _with_context(self) -> ScrapeAuth:
        if not (self.ca_file or self.cert_file or self.insecure_skip_verify):
            return self
        if self.ca_file:  # it replaces the system's CAs, as in Prometheus
            try:
                context = ssl.create_default_context(cafile=self.ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"{self.source}: tls_config.ca_file {self.ca_file} holds no PEM certificate: {exc}"
                ) from None
        else:  # the system's trust, as httpx has it
            context = httpx.create_ssl_context()
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"{self.source}: tls_config.cert_file {self.cert_file} and key_file {self.key_file} "
                    f"are not a certificate and its key: {exc}"
                ) from None
        object.__setattr__(self, "context", context)
        return self

    def headers(self) -> dict[str, str]:
        """The Authorization header a scrape sends, where the config gives one."""
        if self.credentials is not None:
            return {"Authorization": f"{self.authorization_type} {self.credentials.reveal()}"}
        if self.username:
            password = self.password.reveal() if self.password is not None else ""
            token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
            return {"Authorization": f"Basic {token}"}
        return {}

    def describe(self) -> str:
        """What it sends, for a message: never a secret."""
        parts = []
        if self.credentials is not None:
            parts.append(f"{self.authorization_type} credentials")
        if self.username:
            parts.append(f"basic auth as {self.username!r}")
        if self.insecure_skip_verify:
            parts.append("no certificate check (insecure_skip_verify)")
        elif self.ca_file:
            parts.append(f"CA {self.ca_file}")
        if self.cert_file:
            parts.append(f"client certificate {self.cert_file}")
        what = ", ".join(parts) or "no credentials"
        return f"{what}, from {self.source}" if self.source else what


class _Reader:
    """Reads a block's values: text, a path (relative to the config's folder), a secret inline or in its file."""

    def __init__(self, base: Path, source: str) -> None:
        self.base, self.source = base, source

    def text(self, block: Mapping[str, Any], name: str) -> str:
        value = block.get(name.rsplit(".", 1)[-1])
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ConfigError(f"{self.source}: {name} must be text, got {type(value).__name__}")
        return value

    def path(self, block: Mapping[str, Any], name: str) -> Path:
        path = Path(self.text(block, name)).expanduser()
        path = path if path.is_absolute() else self.base / path
        if not path.is_file():
            raise ConfigError(f"{self.source}: {name} {path} does not exist")
        return path

    def secret(
        self, block: Mapping[str, Any], where: str, inline: str, in_file: str, *, required: bool = True
    ) -> Secret:
        if block.get(inline) is not None and block.get(in_file) is not None:
            raise ConfigError(f"{self.source}: {where}: give {inline} or {in_file}, not both")
        if block.get(in_file) is not None:
            path = self.path(block, f"{where}.{in_file}")
            try:
                value = path.read_text().strip()  # as Prometheus trims it
            except OSError as exc:
                raise ConfigError(
                    f"{self.source}: cannot read {where}.{in_file} {path}: {exc.strerror}"
                ) from None
            if not value:
                raise ConfigError(f"{self.source}: {where}.{in_file} {path} is empty")
            return Secret(value)
        value = self.text(block, f"{where}.{inline}")
        if required and not value:
            raise ConfigError(f"{self.source}: {where} needs {inline} or {in_file}")
        return Secret(value)


def _block(data: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    block = data.get(name) or {}
    if not isinstance(block, Mapping):
        raise ConfigError(f"{source}: {name} must be a mapping of {', '.join(FIELDS[name])}")
    unknown = [key for key in block if key not in FIELDS[name]]
    if unknown:
        raise ConfigError(
            f"{source}: {name} has no field {unknown[0]!r} here; it takes {', '.join(FIELDS[name])}"
        )
    return block


def _decode(text: str, path: Path) -> Any:
    """A file's mapping, by its suffix: .toml, .json, else YAML (PyYAML, where installed; JSON is YAML too)."""
    try:
        if path.suffix == ".toml":
            return tomllib.loads(text)
        if path.suffix == ".json":
            return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid {path.suffix[1:].upper()}: {exc}") from None
    try:
        import yaml
    except ImportError:
        try:
            return json.loads(text)
        except ValueError:
            raise ConfigError(
                f"reading {path} as YAML needs PyYAML (pip install pyyaml); or write it as TOML or JSON"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None


Origin = tuple[str, str, int]
_PORTS = {"http": 80, "https": 443}


def origin(url: str | httpx.URL) -> Origin:
    """Scheme, host and port: what a credential is bound to."""
    parsed = httpx.URL(url) if isinstance(url, str) else url
    return parsed.scheme, parsed.host, parsed.port or _PORTS.get(parsed.scheme, 0)


@dataclass(frozen=True, kw_only=True)
class Access:
    """What the harness presents to one deployment: the frontend's key, the metrics' scrape config,
    the HTTP config of the Prometheus it reads them through.

    `frontend`'s origin gets `api_key`; the origins of `metrics` (every worker's metrics URLs)
    get `scrape`; `prometheus`'s origin gets `prometheus_auth` (queries, targets, the model
    probe). An origin that is a worker's and Prometheus' too gets Prometheus' HTTP config, where
    given; the frontend's, its key first and no trust of its own. `key_from` says where the key
    came from, as a message names it ("--api-key", "$OPENAI_API_KEY"), never the key itself.
    """

    frontend: str = ""
    api_key: Secret | None = None
    key_from: str = ""
    metrics: tuple[str, ...] = ()
    scrape: ScrapeAuth | None = None
    prometheus: str = ""
    prometheus_auth: ScrapeAuth | None = None
    # Their origins, parsed once: every request a client makes looks them up.
    _frontend: Origin | None = field(default=None, init=False, repr=False, compare=False)
    _metrics: frozenset[Origin] = field(default=frozenset(), init=False, repr=False, compare=False)
    _prometheus: Origin | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_frontend", origin(self.frontend) if self.frontend else None)
        object.__setattr__(self, "_metrics", frozenset(map(origin, self.metrics)))
        object.__setattr__(self, "_prometheus", origin(self.prometheus) if self.prometheus else None)

    @property
    def empty(self) -> bool:
        return not self.api_key and self.scrape is None and self.prometheus_auth is None

    def _is_frontend(self, at: Origin) -> bool:
        return self._frontend == at

    def _is_metrics(self, at: Origin) -> bool:
        return at in self._metrics

    def _auth_for(self, at: Origin) -> ScrapeAuth | None:
        """The fields an origin is read with: Prometheus' HTTP config, else a worker's scrape config."""
        if self._prometheus == at and self.prometheus_auth is not None:
            return self.prometheus_auth
        return self.scrape if self._is_metrics(at) else None

    def headers_for(self, url: str | httpx.URL) -> dict[str, str]:
        """The headers a request to `url` carries: the key to the frontend, the scrape config's to
        the metrics, the HTTP config's to Prometheus."""
        at = origin(url)
        if self.api_key and self._is_frontend(at):
            return {"Authorization": f"Bearer {self.api_key.reveal()}"}
        auth = self._auth_for(at)
        return auth.headers() if auth is not None else {}

    def context_for(self, url: str | httpx.URL) -> ssl.SSLContext | None:
        """The TLS trust for `url`, where the scrape config (or Prometheus' HTTP config) sets one for it."""
        at = origin(url)
        auth = None if self._is_frontend(at) else self._auth_for(at)
        return auth.context if auth is not None else None

    def secrets(self) -> list[str]:
        """Every secret it holds, to mask in what a server said back."""
        held = [
            self.api_key,
            *(
                secret
                for auth in (self.scrape, self.prometheus_auth)
                if auth is not None
                for secret in (auth.credentials, auth.password)
            ),
        ]
        return [s.reveal() for s in held if s]

    def metric_origins(self) -> list[str]:
        """The https origins the counters are read from (the workers' metrics, Prometheus) that have
        a trust of their own (`scheme://host:port`)."""
        found = set()
        for scheme, host, port in {*self._metrics, *((self._prometheus,) if self._prometheus else ())}:
            url = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
            if scheme == "https" and self.context_for(url) is not None:
                found.add(url)
        return sorted(found)


def read_config(config: str | Path | ScrapeAuth | None, what: str = "scrape config") -> ScrapeAuth | None:
    """A scrape config (or an HTTP config: `what`) given as a path, read now; or already read.
    "" or None: none."""
    if isinstance(config, (str, Path)):
        return ScrapeAuth.load(config, what=what) if str(config) else None
    return config


def access_for(
    frontend_url: str,
    metrics_urls: Sequence[str],
    *,
    api_key: str | None,
    key_from: str,
    scrape_config: str | Path | ScrapeAuth | None,
    prometheus_url: str = "",
    prometheus_http_config: str | Path | ScrapeAuth | None = None,
) -> Access:
    """An `Access` from what a user gives: a key (None or "": none), a scrape config (a path, or
    read) and, where the counters are read through Prometheus, its HTTP config (the same)."""
    return Access(
        frontend=frontend_url,
        api_key=Secret(api_key) if api_key else None,
        key_from=key_from if api_key else "",
        metrics=tuple(metrics_urls),
        scrape=read_config(scrape_config, "scrape config"),
        prometheus=prometheus_url,
        prometheus_auth=read_config(prometheus_http_config, HTTP_CONFIG),
    )


def prometheus_access(prometheus_url: str, http_config: str | Path | ScrapeAuth | None) -> Access | None:
    """What reaching the Prometheus at `prometheus_url` takes alone (None: nothing), for what is
    asked of it before a deployment is known: its targets, for discovery."""
    auth = read_config(http_config, HTTP_CONFIG)
    return None if auth is None else Access(prometheus=prometheus_url, prometheus_auth=auth)


# What is in force, newest last: a block's grant is withdrawn when it ends. A launched deployment's
# threads (restarts, steering) read it too, so it is the process's, behind a lock.
_LOCK = threading.Lock()
_GRANTED: list[tuple[object, Access]] = []


def grant(access: Access | None) -> Callable[[], None]:
    """Put `access` in force until the function returned is called (a launched deployment's life)."""
    if access is None or access.empty:
        return lambda: None
    token = object()
    with _LOCK:
        _GRANTED.append((token, access))

    def withdraw() -> None:
        with _LOCK:
            _GRANTED[:] = [(t, a) for t, a in _GRANTED if t is not token]

    return withdraw


@contextlib.contextmanager
def granted(access: Access | None) -> Iterator[None]:
    """`access` in force for the block (a scenario run on an attached deployment)."""
    withdraw = grant(access)
    try:
        yield
    finally:
        withdraw()


def in_force() -> list[Access]:
    """What is granted now, newest first."""
    with _LOCK:
        return [access for _, access in reversed(_GRANTED)]


def headers_for(url: str | httpx.URL) -> dict[str, str]:
    """The credentials in force for `url` (the newest grant that names its origin)."""
    for access in in_force():
        headers = access.headers_for(url)
        if headers:
            return headers
    return {}


def context_for(url: str | httpx.URL) -> ssl.SSLContext | None:
    """The TLS trust in force for `url`, None where nothing sets one."""
    for access in in_force():
        context = access.context_for(url)
        if context is not None:
            return context
    return None
