"""A thin client of the Confluent Schema Registry REST API.

It speaks the API Confluent's registry serves at its root and Apicurio Registry serves
under ``/apis/ccompat/v7``: fetch a schema by id, register, look up, read a subject's
latest version, check compatibility and read a subject's compatibility level. It is our
own (on :mod:`http.client`), not confluent-kafka's, for what a stream job needs:

- bounded: a whole exchange (connection, request, the answer's headers and body) takes
  at most ``timeout_s`` (plus a connection's own ``timeout_s`` when connecting is what
  is slow), and a body is read up to :data:`MAX_RESPONSE_BYTES`; a registry that cannot
  be reached (refused or dropped connections, timeouts, HTTP 5xx, 429) is retried with
  exponential back-off (0.1 s doubling to 5 s) for ``retry_for_s``, then
  :class:`SchemaRegistryUnavailable`; the clock and the sleep are injectable;
- cached: :meth:`SchemaRegistry.schema` keeps up to ``cache_size`` schemas by id (least
  recently used out first), so a job asks once per schema id; an id the registry does
  not know is asked once more after a short back-off (a follower a moment behind), then
  remembered as unknown for a few seconds (a flood of its records costs no requests);
- discreet: credentials (``auth=`` or ``user:password@`` in the URL) are sent only in
  the ``Authorization`` header, never in a message, log line or ``repr``; errors show
  :attr:`SchemaRegistry.redacted_url`;
- picklable: it travels to Spark workers inside a source or sink (caches stay behind);
- strict: an answer that is not what the API documents is an error naming the request,
  and a 404 counts as "unknown" only when it carries the registry's own error code
  (a wrong base URL is then not mistaken for an unknown schema).

No new runtime dependency: the standard library only. HTTP proxies from the
environment are not used, and redirects are not followed.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import socket
import ssl
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.version import __version__
from ...errors import ConfigurationError, LockgateError

#: the schema types of the API ("schemaType"); an answer without one means AVRO
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
#: the largest answer body read; a longer one is refused (a hostile or broken server)
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: back-off between attempts: FIRST_BACKOFF_S doubling up to MAX_BACKOFF_S
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
#: an id the registry does not know (404) is asked once more after this back-off before
#: it is declared unknown (a follower a moment behind the leader answers 404 for a new
#: schema); these re-asks sleep at most RECHECK_BUDGET_S per UNKNOWN_MEMORY_S in all (a
#: flood of distinct unknown ids does not hold a poll for minutes)
UNKNOWN_RECHECK_S = 0.5
RECHECK_BUDGET_S = 1.0
#: an id declared unknown is not asked again for this long (each record of it would
#: cost a request otherwise): it raises UnknownSchemaError at once
UNKNOWN_MEMORY_S = 5.0
#: the registry's error codes (the "error_code" of its JSON error bodies) for a subject, a
#: version, a schema that does not exist, and a subject without its own compatibility level
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_LEVEL_NOT_CONFIGURED = 40408

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = (
    "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
)
_MESSAGE_CHARS = 500


def _rebuild(cls: type, message: str, state: dict[str, Any]) -> BaseException:
    error = cls(message)
    error.__dict__.update(state)
    return error


class SchemaRegistryError(LockgateError, ConnectionError):
    """The registry refused a request or answered something the API does not document.

    The message names the registry by its redacted URL, the request (method and path)
    and the registry's answer. ``status`` is the HTTP status (None when there was none),
    ``url`` the redacted URL.
    """

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


class SchemaRegistryUnavailable(SchemaRegistryError):
    """The registry could not be reached (connection errors, timeouts, HTTP 5xx or 429)
    for ``retry_for_s``; the message has the last error."""


class UnknownSchemaError(SchemaRegistryError):
    """The registry does not know the schema id (``schema_id``) or subject (``subject``)."""

    schema_id: int | None = None
    subject: str | None = None


class IncompatibleSchemaError(SchemaRegistryError):
    """The registry refused to register a schema under ``subject`` because it breaks the
    subject's compatibility ``level`` (e.g. BACKWARD); ``messages`` are its reasons."""

    subject: str = ""
    level: str = ""
    messages: tuple[str, ...] = ()


class InvalidSchemaError(SchemaRegistryError):
    """The registry refused the schema text itself (HTTP 422: not a valid schema of its
    type, or a reference it cannot resolve)."""


@dataclass(frozen=True)
class SchemaReference:
    """A schema another schema refers to: ``name`` as the referring schema names it (an
    Avro full name, a .proto import path, a JSON Schema $ref), found under ``subject`` at
    ``version`` (-1: the subject's latest version)."""

    name: str
    subject: str
    version: int

    def __post_init__(self) -> None:
        for what in ("name", "subject"):
            value = getattr(self, what)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(
                    f"SchemaReference.{what} must be a non-empty str, got {value!r}"
                )
        version = self.version
        if (
            isinstance(version, bool)
            or not isinstance(version, int)
            or not (version >= 1 or version == -1)
        ):
            raise ConfigurationError(
                f"SchemaReference.version must be an int >= 1 (or -1 for the latest "
                f"version), got {version!r}"
            )


@dataclass(frozen=True)
class Schema:
    """A schema as the registry stores it: ``schema`` is its text (Avro's JSON, .proto
    text, a JSON Schema's JSON; Protobuf schemas written by confluent-kafka's serializer
    may come back as a base64 serialized FileDescriptorProto), ``schema_type`` one of
    ``"AVRO"``, ``"PROTOBUF"``, ``"JSON"``, ``references`` the schemas it refers to."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not self.schema.strip():
            raise ConfigurationError(
                f"Schema.schema must be the schema's text (a non-empty str), got "
                f"{_short(self.schema)}; an Avro or JSON Schema given as a dict is "
                "json.dumps(...)"
            )
        if self.schema_type not in SCHEMA_TYPES:
            raise ConfigurationError(
                f"Schema.schema_type must be one of {', '.join(SCHEMA_TYPES)}, got "
                f"{self.schema_type!r}"
            )
        references = self.references
        if isinstance(references, list):
            references = tuple(references)
            object.__setattr__(self, "references", references)
        if not isinstance(references, tuple) or not all(
            isinstance(r, SchemaReference) for r in references
        ):
            raise ConfigurationError(
                f"Schema.references must be a tuple of SchemaReference, got {_short(references)}"
            )


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema the registry holds: its id and, when read from a subject, the subject and
    the version there."""

    schema_id: int
    schema: Schema
    subject: str | None = None
    version: int | None = None


class SchemaRegistry:
    """A client of a Schema Registry's REST API (Confluent's, or a compatible one).

    ``url``: the API's base, e.g. ``http://127.0.0.1:8081/apis/ccompat/v7`` (Apicurio)
    or ``https://registry.example:8081`` (Confluent); http or https with a host, no query.
    ``auth``: ``(user, password)`` for HTTP basic authentication, or a str sent as a
    bearer token; ``user:password@`` in the URL also works (``auth=`` keeps the secret out
    of the URL string). ``cache_size``: schemas kept by id. ``timeout_s``: the bound of
    each socket operation and of reading an answer. ``retry_for_s``: how long an
    unreachable registry is retried before :class:`SchemaRegistryUnavailable` (0: one
    attempt). ``clock``/``sleep``: monotonic seconds and the pause between attempts
    (tests inject them).

    Thread-safe; picklable (credentials travel, caches do not).
    """

    def __init__(
        self,
        url: str,
        *,
        auth: tuple[str, str] | str | None = None,
        cache_size: int = 1000,
        timeout_s: float = 10.0,
        retry_for_s: float = 60.0,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        scheme, host, port, path, netloc, url_credentials = _parse_url(url)
        if url_credentials is not None and auth is not None:
            raise ConfigurationError(
                "SchemaRegistry: the URL has user:password@ and auth= is given too; give the "
                "credentials once, preferably as auth=(user, password) with a URL without them"
            )
        if auth is None and url_credentials is not None:
            auth = url_credentials
        self._authorization = _authorization(auth)
        self._scheme = scheme
        self._host = host
        self._port = port
        self._base_path = path
        self._redacted_url = urllib.parse.urlunsplit(
            (scheme, ("***@" if url_credentials is not None else "") + netloc, path, "", "")
        )
        self.cache_size = _positive_int("cache_size", cache_size)
        self.timeout_s = _seconds("timeout_s", timeout_s, allow_zero=False)
        self.retry_for_s = _seconds("retry_for_s", retry_for_s, allow_zero=True)
        for what, function in (("clock", clock), ("sleep", sleep)):
            if function is not None and not callable(function):
                raise ConfigurationError(
                    f"SchemaRegistry: {what} must be callable or None, got {function!r}"
                )
        self._clock = clock
        self._sleep = sleep
        self._init_local()

    def _init_local(self) -> None:
        self._lock = threading.Lock()
        self._by_id: OrderedDict[int, RegisteredSchema] = OrderedDict()
        self._ssl_context: ssl.SSLContext | None = None
        #: ids declared unknown: id -> (until when, the error to raise again)
        self._unknown: OrderedDict[int, tuple[float, SchemaRegistryError]] = OrderedDict()
        #: the re-asks' sleeping in the current UNKNOWN_MEMORY_S window: (its start, spent)
        self._recheck_window = (-math.inf, 0.0)

    # --- pickling: everything but the caches, the lock and the TLS context ----------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for local in ("_lock", "_by_id", "_ssl_context", "_unknown", "_recheck_window"):
            state.pop(local, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_local()

    def __repr__(self) -> str:
        auth = ", auth=***" if self._authorization is not None else ""
        return f"SchemaRegistry({self._redacted_url!r}{auth})"

    @property
    def redacted_url(self) -> str:
        """The base URL, with ``***@`` in place of any ``user:password@``."""
        return self._redacted_url

    # --- the API --------------------------------------------------------------------------
    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema with id ``schema_id`` (``GET /schemas/ids/{id}``), from the cache
        when it was fetched before; :class:`UnknownSchemaError` when the registry does not
        know the id: asked once more after :data:`UNKNOWN_RECHECK_S` (a registry follower
        a moment behind), then remembered as unknown for :data:`UNKNOWN_MEMORY_S` (no
        request for it until then)."""
        _check_schema_id(schema_id)
        clock = self._clock or time.monotonic
        with self._lock:
            found = self._by_id.get(schema_id)
            if found is not None:
                self._by_id.move_to_end(schema_id)
                return found
            known_unknown = self._unknown.get(schema_id)
            if known_unknown is not None:
                if clock() < known_unknown[0]:
                    raise _again(known_unknown[1])
                del self._unknown[schema_id]
        path = f"/schemas/ids/{schema_id}"
        status, body = self._request("GET", path, what=f"fetching schema id {schema_id}")
        if status == 404 and _error_code(body) == SCHEMA_NOT_FOUND and self._may_recheck(clock()):
            (self._sleep or time.sleep)(UNKNOWN_RECHECK_S)
            status, body = self._request("GET", path, what=f"fetching schema id {schema_id}")
        if status == 404 and _error_code(body) == SCHEMA_NOT_FOUND:
            error = self._error(
                UnknownSchemaError,
                f"the registry does not know schema id {schema_id}",
                "GET",
                path,
                status,
                body,
                schema_id=schema_id,
            )
            with self._lock:
                self._unknown[schema_id] = (clock() + UNKNOWN_MEMORY_S, error)
                self._unknown.move_to_end(schema_id)
                while len(self._unknown) > self.cache_size:
                    self._unknown.popitem(last=False)
            raise _again(error)
        answer = self._expect_object("GET", path, status, body)
        registered = RegisteredSchema(
            schema_id=schema_id, schema=self._schema_of(answer, "GET", path, default_type="AVRO")
        )
        with self._lock:
            self._by_id[schema_id] = registered
            self._by_id.move_to_end(schema_id)
            while len(self._by_id) > self.cache_size:
                self._by_id.popitem(last=False)
        return registered

    def _may_recheck(self, now: float) -> bool:
        """Whether a 404 may be asked once more after :data:`UNKNOWN_RECHECK_S` (within
        :data:`RECHECK_BUDGET_S` of sleeping per :data:`UNKNOWN_MEMORY_S`), counting it."""
        with self._lock:
            start, spent = self._recheck_window
            if now - start >= UNKNOWN_MEMORY_S:
                start, spent = now, 0.0
            if spent + UNKNOWN_RECHECK_S > RECHECK_BUDGET_S:
                self._recheck_window = (start, spent)
                return False
            self._recheck_window = (start, spent + UNKNOWN_RECHECK_S)
            return True

    def register(self, subject: str, schema: Schema) -> int:
        """Register ``schema`` under ``subject`` (``POST /subjects/{s}/versions``) and
        return its id (the existing id when the subject already holds it, compared
        normalized: ``?normalize=true``). The registry
        applies the subject's compatibility rule: :class:`IncompatibleSchemaError` (naming
        the subject, the level and the registry's reasons) when it breaks it,
        :class:`InvalidSchemaError` when the registry refuses the schema's text."""
        _check_subject(subject)
        _check_schema(schema)
        path = f"/subjects/{_quote(subject)}/versions?normalize=true"
        what = f"registering a {schema.schema_type} schema under subject {subject!r}"
        status, body = self._request("POST", path, _schema_body(schema), what=what)
        if status == 409:
            raise self._incompatible(subject, schema, status, body, path)
        if status == 422:
            raise self._invalid(schema, what, path, status, body)
        answer = self._expect_object("POST", path, status, body)
        return self._int_field(answer, "id", "POST", path)

    def lookup(self, subject: str, schema: Schema) -> RegisteredSchema | None:
        """The version of ``subject`` that holds ``schema`` (``POST /subjects/{s}``), or
        None when the subject does not exist or does not hold it. The registry compares
        normalized schemas (``?normalize=true``): the same schema written with other
        whitespace is found."""
        _check_subject(subject)
        _check_schema(schema)
        path = f"/subjects/{_quote(subject)}?normalize=true"
        what = f"looking up a {schema.schema_type} schema under subject {subject!r}"
        status, body = self._request("POST", path, _schema_body(schema), what=what)
        if status == 404 and _error_code(body) in (SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND):
            return None
        if status == 422:
            raise self._invalid(schema, what, path, status, body)
        answer = self._expect_object("POST", path, status, body)
        # Apicurio's answer has no schemaType: it is the type of the schema it matched
        return self._registered(answer, "POST", path, default_type=schema.schema_type)

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The latest version of ``subject`` (``GET /subjects/{s}/versions/latest``), or
        None when the subject has none."""
        _check_subject(subject)
        path = f"/subjects/{_quote(subject)}/versions/latest"
        status, body = self._request("GET", path, what=f"reading subject {subject!r}")
        if status == 404 and _error_code(body) in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND):
            return None
        answer = self._expect_object("GET", path, status, body)
        return self._registered(answer, "GET", path, default_type="AVRO")

    def version(self, subject: str, version: int) -> RegisteredSchema | None:
        """Version ``version`` of ``subject`` (``GET /subjects/{s}/versions/{v}``; -1:
        the latest), or None when the subject or that version does not exist (what a
        schema's :class:`SchemaReference` names)."""
        _check_subject(subject)
        if (
            isinstance(version, bool)
            or not isinstance(version, int)
            or not (version >= 1 or version == -1)
        ):
            raise ConfigurationError(
                f"SchemaRegistry.version: version must be an int >= 1 (or -1 for the "
                f"latest), got {version!r}"
            )
        label = "latest" if version == -1 else str(version)
        path = f"/subjects/{_quote(subject)}/versions/{label}"
        status, body = self._request(
            "GET", path, what=f"reading version {label} of subject {subject!r}"
        )
        if status == 404 and _error_code(body) in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND):
            return None
        answer = self._expect_object("GET", path, status, body)
        return self._registered(answer, "GET", path, default_type="AVRO")

    def incompatibilities(self, subject: str, schema: Schema) -> list[str]:
        """Why ``schema`` breaks ``subject``'s compatibility rule against its latest
        version (``POST /compatibility/subjects/{s}/versions/latest?verbose=true``): []
        when it is compatible or the subject has no version yet, otherwise the registry's
        messages (one generic message when it gives none, as Apicurio does)."""
        _check_subject(subject)
        _check_schema(schema)
        compatible, messages = self._check_compatibility(subject, schema)
        if compatible:
            return []
        return messages or [
            f"the registry reports the schema incompatible with the latest version of "
            f"subject {subject!r} (it gave no details)"
        ]

    def _check_compatibility(self, subject: str, schema: Schema) -> tuple[bool, list[str]]:
        """(compatible, the registry's messages) of the verbose compatibility check."""
        path = f"/compatibility/subjects/{_quote(subject)}/versions/latest?verbose=true"
        what = f"checking a {schema.schema_type} schema's compatibility with subject {subject!r}"
        status, body = self._request("POST", path, _schema_body(schema), what=what)
        if status == 404 and _error_code(body) in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND):
            return True, []
        if status == 422:
            raise self._invalid(schema, what, path, status, body)
        answer = self._expect_object("POST", path, status, body)
        compatible = answer.get("is_compatible")
        if not isinstance(compatible, bool):
            raise self._malformed("POST", path, "'is_compatible' is not a boolean", body)
        messages = answer.get("messages")
        if messages is None:
            messages = []
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise self._malformed("POST", path, "'messages' is not a list of strings", body)
        return compatible, list(messages)

    def compatibility_level(self, subject: str) -> str:
        """The compatibility level that applies to ``subject`` (e.g. ``"BACKWARD"``):
        its own (``GET /config/{s}?defaultToGlobal=true``), else the registry's global one
        (``GET /config``)."""
        _check_subject(subject)
        path = f"/config/{_quote(subject)}?defaultToGlobal=true"
        what = f"reading subject {subject!r}'s compatibility level"
        status, body = self._request("GET", path, what=what)
        if status == 404 and _error_code(body) in (SUBJECT_NOT_FOUND, SUBJECT_LEVEL_NOT_CONFIGURED):
            path = "/config"
            status, body = self._request("GET", path, what="reading the global compatibility level")
        answer = self._expect_object("GET", path, status, body)
        level = answer.get("compatibilityLevel", answer.get("compatibility"))
        if not isinstance(level, str) or not level:
            raise self._malformed("GET", path, "'compatibilityLevel' is not a string", body)
        return level

    # --- answers --------------------------------------------------------------------------
    def _registered(
        self, answer: dict[str, Any], method: str, path: str, *, default_type: str
    ) -> RegisteredSchema:
        schema = self._schema_of(answer, method, path, default_type=default_type)
        subject = answer.get("subject")
        if not isinstance(subject, str):
            raise self._malformed(method, path, "'subject' is not a string", answer)
        return RegisteredSchema(
            schema_id=self._int_field(answer, "id", method, path),
            schema=schema,
            subject=subject,
            version=self._int_field(answer, "version", method, path),
        )

    def _schema_of(
        self, answer: dict[str, Any], method: str, path: str, *, default_type: str
    ) -> Schema:
        text = answer.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise self._malformed(method, path, "'schema' is not a non-empty string", answer)
        schema_type = answer.get("schemaType") or default_type
        if schema_type not in SCHEMA_TYPES:
            raise self._malformed(
                method,
                path,
                f"schema type {schema_type!r} is not one of {', '.join(SCHEMA_TYPES)}",
                answer,
            )
        raw_references = answer.get("references") or []
        if not isinstance(raw_references, list):
            raise self._malformed(method, path, "'references' is not a list", answer)
        references = []
        for raw in raw_references:
            try:
                if not isinstance(raw, dict):
                    raise ConfigurationError("not an object")
                fields: dict[str, Any] = {k: raw.get(k) for k in ("name", "subject", "version")}
                references.append(SchemaReference(**fields))
            except ConfigurationError as e:
                raise self._malformed(
                    method, path, f"a reference is not a name, subject and version ({e})", answer
                ) from None
        return Schema(schema=text, schema_type=schema_type, references=tuple(references))

    def _int_field(self, answer: dict[str, Any], key: str, method: str, path: str) -> int:
        value = answer.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._malformed(method, path, f"{key!r} is not a non-negative int", answer)
        return value

    def _expect_object(self, method: str, path: str, status: int, body: bytes) -> dict[str, Any]:
        """The JSON object of a 200 answer; any other answer is an error naming it."""
        if status != 200:
            raise self._error(SchemaRegistryError, _status_hint(status), method, path, status, body)
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            raise self._malformed(method, path, "the body is not JSON", body) from None
        if not isinstance(answer, dict):
            raise self._malformed(method, path, "the body is not a JSON object", body)
        return answer

    def _malformed(self, method: str, path: str, what: str, body: object) -> SchemaRegistryError:
        return SchemaRegistryError(
            f"schema registry {self._redacted_url} answered {method} {path} with "
            f"something the Schema Registry API does not document: {what} "
            f"(the answer: {_short(body)}); is the URL the API's base (for Apicurio "
            "Registry: .../apis/ccompat/v7)?",
            url=self._redacted_url,
            status=200,
        )

    def _error(
        self,
        cls: type[SchemaRegistryError],
        what: str,
        method: str,
        path: str,
        status: int,
        body: bytes,
        **attributes: Any,
    ) -> SchemaRegistryError:
        error = cls(
            f"schema registry {self._redacted_url}: {what} ({method} {path}: "
            f"HTTP {status}: {_registry_message(body)})",
            url=self._redacted_url,
            status=status,
        )
        error.__dict__.update(attributes)
        return error

    def _invalid(
        self, schema: Schema, what: str, path: str, status: int, body: bytes
    ) -> SchemaRegistryError:
        hint = ""
        if schema.schema_type == "JSON" and "discover artifact type" in _registry_message(body):
            hint = (
                '; Apicurio Registry recognises a JSON Schema only with a "$schema" or '
                '"properties" keyword'
            )
        return self._error(
            InvalidSchemaError,
            f"the registry refused the schema ({what}{hint})",
            "POST",
            path,
            status,
            body,
        )

    def _incompatible(
        self, subject: str, schema: Schema, status: int, body: bytes, path: str
    ) -> IncompatibleSchemaError:
        try:
            level = self.compatibility_level(subject)
        except SchemaRegistryError as e:
            level = f"unknown (reading it failed: {e})"
        messages = [_error_body(body)[1] or _registry_message(body)]
        try:  # Confluent's registry details the reasons here (Apicurio: in the 409's message)
            _, reasons = self._check_compatibility(subject, schema)
            messages += [m for m in reasons if m not in messages]
        except SchemaRegistryError:
            pass
        error = IncompatibleSchemaError(
            f"schema registry {self._redacted_url}: the {schema.schema_type} schema is "
            f"incompatible with subject {subject!r} under its compatibility level {level} "
            f"(POST {path}: HTTP {status}): {'; '.join(messages)}",
            url=self._redacted_url,
            status=status,
        )
        error.subject = subject
        error.level = level
        error.messages = tuple(messages)
        return error

    # --- HTTP -----------------------------------------------------------------------------
    def _request(
        self, method: str, path: str, payload: dict[str, Any] | None = None, *, what: str
    ) -> tuple[int, bytes]:
        """(status, body) of the first answer that is not to be retried; connection
        errors, timeouts, 429 and the 5xx of an unavailable registry are retried with
        back-off until ``retry_for_s`` has passed, then SchemaRegistryUnavailable."""
        clock = self._clock or time.monotonic
        sleep = self._sleep or time.sleep
        data = None if payload is None else json.dumps(payload).encode()
        deadline = clock() + self.retry_for_s
        backoff = FIRST_BACKOFF_S
        attempts = 0
        while True:
            attempts += 1
            try:
                status, body = self._send(method, path, data)
            except SchemaRegistryError:
                raise
            except (OSError, http.client.HTTPException) as e:
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            else:
                if not _retryable(status, body):
                    return status, body
                last = f"HTTP {status}: {_registry_message(body)}"
            now = clock()
            if now >= deadline:
                raise SchemaRegistryUnavailable(
                    f"schema registry {self._redacted_url} is unavailable ({what}, "
                    f"{method} {path}): {attempts} attempt(s) in "
                    f"{self.retry_for_s:g} s (retry_for_s) failed, the last with {last}",
                    url=self._redacted_url,
                )
            sleep(min(backoff, deadline - now))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _send(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        """One exchange on a fresh connection: (status, body)."""
        connection: http.client.HTTPConnection
        if self._scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout_s, context=self._ssl_context
            )
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        headers = {
            "Accept": _ACCEPT,
            "User-Agent": f"lockgate/{__version__}",
            "Connection": "close",
        }
        if data is not None:
            headers["Content-Type"] = _CONTENT_TYPE
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        # one deadline for the whole exchange: a server trickling its header lines (each
        # byte within the socket's timeout) is cut off when it passes (the socket shut
        # down under the blocked read)
        deadline = time.monotonic() + self.timeout_s
        late = f"the answer did not arrive within {self.timeout_s:g} s (timeout_s)"
        cutter = threading.Timer(self.timeout_s, _cut, (connection,))
        cutter.daemon = True
        cutter.start()
        try:
            connection.request(method, self._base_path + path, body=data, headers=headers)
            sock = connection.sock
            response = connection.getresponse()
            length = response.getheader("Content-Length")
            if length is not None and length.strip().isdigit() and int(length) > MAX_RESPONSE_BYTES:
                raise self._too_large(method, path, response.status, f"Content-Length {length}")
            return response.status, self._read_body(response, sock, method, path, deadline)
        except SchemaRegistryError:
            raise  # a ConnectionError too, but the registry's answer, not a late one
        except (OSError, http.client.HTTPException) as e:
            if time.monotonic() >= deadline:
                raise TimeoutError(late) from e
            raise
        finally:
            cutter.cancel()
            connection.close()

    def _read_body(
        self,
        response: http.client.HTTPResponse,
        sock: Any,
        method: str,
        path: str,
        deadline: float,
    ) -> bytes:
        chunks: list[bytes] = []
        size = 0
        late = f"the answer's body did not arrive within {self.timeout_s:g} s (timeout_s)"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(late)
            if sock is not None:
                sock.settimeout(remaining)
            try:
                chunk = response.read1(65536)
            except TimeoutError:
                raise TimeoutError(late) from None
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise self._too_large(method, path, response.status, "a longer body")
            chunks.append(chunk)

    def _too_large(self, method: str, path: str, status: int, seen: str) -> SchemaRegistryError:
        return SchemaRegistryError(
            f"schema registry {self._redacted_url} answered {method} {path} "
            f"(HTTP {status}) with {seen}: more than the {MAX_RESPONSE_BYTES} bytes "
            "(MAX_RESPONSE_BYTES) a Schema Registry answer may have; refused (is the URL the "
            "registry's?)",
            url=self._redacted_url,
            status=status,
        )


# --- helpers ------------------------------------------------------------------------------
def _cut(connection: http.client.HTTPConnection) -> None:
    """Shut down ``connection``'s socket: a read blocked on it returns at once (the
    exchange's deadline passed)."""
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def _again(error: SchemaRegistryError) -> SchemaRegistryError:
    """A fresh copy of ``error`` (its message and attributes) to raise again: a raised
    exception keeps its traceback, and one kept to raise again must not grow it."""
    copy = type(error)(str(error), url=error.url, status=error.status)
    copy.__dict__.update(error.__dict__)
    return copy


def _parse_url(url: object) -> tuple[str, str, int | None, str, str, tuple[str, str] | None]:
    """(scheme, host, port, path without a trailing /, netloc without credentials,
    (user, password) or None) of a registry URL; ConfigurationError when it is not one."""
    fix = "give the API's base URL, e.g. 'http://127.0.0.1:8081/apis/ccompat/v7'"
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"SchemaRegistry: url must be a non-empty str, got {url!r}; {fix}")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise ConfigurationError(
            "SchemaRegistry: the url contains whitespace or control characters; " + fix
        )
    parts = urllib.parse.urlsplit(url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    shown = urllib.parse.urlunsplit(
        (parts.scheme, ("***@" if userinfo else "") + hostport, parts.path, "", "")
    )
    if parts.scheme not in ("http", "https"):
        raise ConfigurationError(
            f"SchemaRegistry: the url {shown!r} is not http:// or https://; {fix}"
        )
    try:
        host = parts.hostname
        port = parts.port
    except ValueError as e:
        raise ConfigurationError(f"SchemaRegistry: the url {shown!r} has {e}; {fix}") from None
    if not host:
        raise ConfigurationError(f"SchemaRegistry: the url {shown!r} has no host; {fix}")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise ConfigurationError(
            f"SchemaRegistry: the url {shown!r} has a query or fragment; the base URL has none. "
            + fix
        )
    credentials = None
    if userinfo:
        user, colon, password = userinfo.partition(":")
        user = urllib.parse.unquote(user)
        if not user:
            raise ConfigurationError(
                f"SchemaRegistry: the url {shown!r} has credentials without a user name; "
                "give auth=(user, password) and a URL without user:password@"
            )
        credentials = (user, urllib.parse.unquote(password) if colon else "")
    return parts.scheme, host, port, parts.path.rstrip("/"), hostport, credentials


def _authorization(auth: object) -> str | None:
    """The Authorization header's value for ``auth``."""
    if auth is None:
        return None
    if isinstance(auth, str):
        if not auth or any(ord(c) < 0x21 or ord(c) == 0x7F for c in auth):
            raise ConfigurationError(
                "SchemaRegistry: auth as a str is a bearer token: it must be non-empty, without "
                "whitespace or control characters (for basic authentication give "
                "auth=(user, password))"
            )
        return f"Bearer {auth}"
    if (
        isinstance(auth, tuple)
        and len(auth) == 2
        and all(isinstance(part, str) for part in auth)
        and auth[0]
        and ":" not in auth[0]
    ):
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
        return f"Basic {token}"
    raise ConfigurationError(
        "SchemaRegistry: auth must be None, (user, password) as two str with a non-empty user "
        "without ':' (HTTP basic authentication), or a bearer token str; got a "
        f"{type(auth).__name__} that is none of them"
    )


def _positive_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"SchemaRegistry: {what} must be an int >= 1, got {value!r}")
    return value


def _seconds(what: str, value: object, *, allow_zero: bool) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"SchemaRegistry: {what} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


def _check_schema_id(schema_id: object) -> None:
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id < 2**32:
        raise ConfigurationError(
            f"a schema id is an int in [0, 2**32) (4 bytes of the wire format), got {schema_id!r}"
        )


def _check_subject(subject: object) -> None:
    if not isinstance(subject, str) or not subject:
        raise ConfigurationError(f"a subject must be a non-empty str, got {subject!r}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in subject):
        raise ConfigurationError(f"the subject {subject!r} contains control characters")


def _check_schema(schema: object) -> None:
    if not isinstance(schema, Schema):
        raise ConfigurationError(
            f"expected a lockgate Schema(schema_text, schema_type), got {type(schema).__name__}"
        )


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _schema_body(schema: Schema) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema.schema}
    if schema.schema_type != "AVRO":  # registries older than Confluent 5.5 know only Avro
        body["schemaType"] = schema.schema_type
    if schema.references:
        body["references"] = [
            {"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references
        ]
    return body


def _error_body(body: bytes) -> tuple[int | None, str | None]:
    """(error_code, message) of the registry's JSON error body, (None, None) otherwise."""
    if len(body) > 64 * 1024:
        return None, None
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(answer, dict):
        return None, None
    code = answer.get("error_code")
    message = answer.get("message")
    return (
        code if isinstance(code, int) and not isinstance(code, bool) else None,
        message if isinstance(message, str) else None,
    )


def _error_code(body: bytes) -> int | None:
    return _error_body(body)[0]


def _registry_message(body: bytes) -> str:
    code, message = _error_body(body)
    if message is not None:
        text = message if len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS] + "..."
        return f"{text} (error code {code})" if code is not None else text
    if not body:
        return "an empty body"
    return f"the body {_short(body)}"


def _retryable(status: int, body: bytes) -> bool:
    """429 and the 5xx of an unavailable registry or a proxy in front of it. A 5xx that
    carries the registry's own error with a code outside Confluent's 5xxxx server errors
    is the registry's deterministic answer (Apicurio's 500 with error code 0 for a schema
    of another type than the subject's): not retried."""
    if status == 429:
        return True
    if status < 500:
        return False
    code, message = _error_body(body)
    if code is None or message is None:
        return True
    return 50000 <= code < 60000 or code == status


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "the registry refused the credentials (check auth=)"
    if status == 404:
        return "not found; is the URL the API's base (for Apicurio Registry: .../apis/ccompat/v7)?"
    if 300 <= status < 400:
        return "the registry redirects (redirects are not followed: give the URL it redirects to)"
    return "unexpected answer"


def _short(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value[: _MESSAGE_CHARS + 1]))
    else:
        text = repr(value)
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."
