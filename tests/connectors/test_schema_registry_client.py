"""The Schema Registry client (issue 38) against the real registry ``scripts/services.sh``
starts (Apicurio Registry's Confluent-compatible API on 127.0.0.1:8081), never mocked:
register / look up / latest / by id round trips for Avro, Protobuf and JSON Schema, with
references; the bounded LRU cache of schemas by id; the compatibility rule refusing a
schema with the subject and the level named; unknown ids and subjects.

What the real registry cannot do on demand is played by small HTTP servers of this
file on loopback: an unreachable registry (a port nobody listens on), one that is down
for a while (503) or refuses (500 with its own error code, 400), credentials as they
arrive (the Authorization header), answers the API does not document, and a hostile
endless body. The retry tests inject the clock and the sleep: nothing really waits.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import pickle
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import pytest

import lockgate as lg
from lockgate.connectors.schema_registry import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistry,
    SchemaRegistryError,
    SchemaRegistryUnavailable,
    UnknownSchemaError,
)
from lockgate.errors import ConfigurationError

REGISTRY_URL = os.environ.get(
    "LOCKGATE_TEST_SCHEMA_REGISTRY", "http://127.0.0.1:8081/apis/ccompat/v7"
)
SECRET = "s3cr3t-Pa55word"


# ------------------------------------------------------------------------------ helpers


def unique(prefix: str) -> str:
    """A subject (or namespace) no other test uses: tests share one registry."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def put_config(subject: str, level: str) -> None:
    """Set ``subject``'s compatibility level (PUT /config/{subject}), as an operator would."""
    request = urllib.request.Request(
        f"{REGISTRY_URL}/config/{subject}",
        data=json.dumps({"compatibility": level}).encode(),
        method="PUT",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["compatibilityLevel"] == level


def avro_record(namespace: str, fields: list[dict[str, Any]], name: str = "Order") -> Schema:
    return Schema(
        json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": fields})
    )


def avro_v1(namespace: str) -> Schema:
    return avro_record(namespace, [{"name": "id", "type": "long"}, {"name": "a", "type": "int"}])


def proto_schema(package: str) -> Schema:
    return Schema(
        f'syntax = "proto3";\npackage {package};\n'
        'import "google/protobuf/timestamp.proto";\n'
        "message Order {\n  int64 id = 1;\n  string name = 2;\n"
        "  google.protobuf.Timestamp at = 3;\n}\n",
        "PROTOBUF",
    )


def json_schema(title: str) -> Schema:
    return Schema(
        json.dumps(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "title": title,
                "type": "object",
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                "required": ["id"],
            }
        ),
        "JSON",
    )


class CountingRegistry(SchemaRegistry):
    """The client, counting the HTTP exchanges it makes (the paths, in order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[str] = []

    def _send(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        self.requests.append(f"{method} {path}")
        return super()._send(method, path, data)


class FakeClock:
    """A monotonic clock that only the injected sleep moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def unused_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeApi:
    """An HTTP server on loopback whose answers a test scripts: ``handle(request)``
    answers each request; it records the requests (method, path, headers)."""

    def __init__(self, handle: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                fake.seen.append((self.command, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                handle(self)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.port = int(self.server.server_address[1])

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}/apis/ccompat/v7"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def fake_api() -> Iterator[Callable[..., FakeApi]]:
    made: list[FakeApi] = []

    def make(handle: Callable[[http.server.BaseHTTPRequestHandler], None]) -> FakeApi:
        api = FakeApi(handle)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def answer(handler: http.server.BaseHTTPRequestHandler, status: int, body: object) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


AVRO_TEXT = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


def schema_by_id(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Answers GET /schemas/ids/{id} as the API does."""
    answer(handler, 200, {"schema": AVRO_TEXT})


# ---------------------------------------------------------------- the real registry


@pytest.mark.parametrize(
    "make_schema",
    [
        lambda u: avro_v1(f"lg.t{u}"),
        lambda u: proto_schema(f"lg.t{u}"),
        lambda u: json_schema(f"Order{u}"),
    ],
    ids=["AVRO", "PROTOBUF", "JSON"],
)
def test_register_lookup_latest_and_by_id_round_trip(make_schema: Callable[[str], Schema]) -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-roundtrip")
    schema = make_schema(uuid.uuid4().hex[:8])
    assert registry.latest(subject) is None
    assert registry.lookup(subject, schema) is None

    schema_id = registry.register(subject, schema)
    assert isinstance(schema_id, int)
    # registering the same schema again is idempotent: the same id, no new version
    assert registry.register(subject, schema) == schema_id

    expected = RegisteredSchema(schema_id, schema, subject, 1)
    assert registry.lookup(subject, schema) == expected
    assert registry.latest(subject) == expected
    by_id = registry.schema(schema_id)
    assert by_id == RegisteredSchema(schema_id, schema)
    assert by_id.schema.schema_type == schema.schema_type
    # the same schema under another subject has the same id (ids name contents)
    assert registry.register(unique("lg-roundtrip-other"), schema) == schema_id


def test_the_same_schema_written_with_other_whitespace_is_found_and_not_registered_again() -> None:
    """A sink with ``auto_register=False`` looks up the schema text it was given, which
    rarely has the registered text's exact whitespace: lookups and registrations compare
    normalized schemas."""
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-normalize")
    fields = [{"name": "id", "type": "long"}]
    compact = Schema(
        json.dumps({"type": "record", "name": "N", "fields": fields}, separators=(",", ":"))
    )
    spaced = Schema(json.dumps({"type": "record", "name": "N", "fields": fields}, indent=2))
    schema_id = registry.register(subject, compact)
    found = registry.lookup(subject, spaced)
    assert found is not None and (found.schema_id, found.version) == (schema_id, 1)
    assert registry.register(subject, spaced) == schema_id
    latest = registry.latest(subject)
    assert latest is not None and latest.version == 1, "a second version was registered"


def test_references_round_trip() -> None:
    """Avro named types and .proto imports in other subjects, as references."""
    registry = SchemaRegistry(REGISTRY_URL)
    u = uuid.uuid4().hex[:8]
    address_subject = unique("lg-address")
    registry.register(
        address_subject,
        avro_record(f"lg.r{u}", [{"name": "city", "type": "string"}], name="Address"),
    )
    person = Schema(
        json.dumps(
            {
                "type": "record",
                "name": "Person",
                "namespace": f"lg.r{u}",
                "fields": [{"name": "home", "type": f"lg.r{u}.Address"}],
            }
        ),
        references=(SchemaReference(f"lg.r{u}.Address", address_subject, 1),),
    )
    person_subject = unique("lg-person")
    person_id = registry.register(person_subject, person)
    assert registry.schema(person_id).schema == person
    assert registry.latest(person_subject) == RegisteredSchema(person_id, person, person_subject, 1)

    money_subject = unique("lg-money")
    registry.register(
        money_subject,
        Schema(
            f'syntax = "proto3";\npackage lg.m{u};\nmessage Money {{ int64 cents = 1; }}\n',
            "PROTOBUF",
        ),
    )
    order = Schema(
        f'syntax = "proto3";\npackage lg.o{u};\nimport "money{u}.proto";\n'
        'import "google/protobuf/timestamp.proto";\n'
        f"message Order {{ lg.m{u}.Money total = 1; google.protobuf.Timestamp at = 2; }}\n",
        "PROTOBUF",
        (SchemaReference(f"money{u}.proto", money_subject, 1),),
    )
    order_id = registry.register(unique("lg-order"), order)
    assert registry.schema(order_id).schema == order


def test_a_cached_schema_is_not_fetched_again_and_the_cache_is_bounded_lru() -> None:
    registry = CountingRegistry(REGISTRY_URL, cache_size=2)
    ids = [registry.register(unique("lg-cache"), avro_v1(f"lg.c{uuid.uuid4().hex[:8]}"))]
    ids += [registry.register(unique("lg-cache"), avro_v1(f"lg.c{uuid.uuid4().hex[:8]}"))]
    ids += [registry.register(unique("lg-cache"), avro_v1(f"lg.c{uuid.uuid4().hex[:8]}"))]
    a, b, c = ids
    assert len(set(ids)) == 3
    registry.requests.clear()

    first = registry.schema(a)
    assert registry.requests == [f"GET /schemas/ids/{a}"]
    assert registry.schema(a) is first  # from the cache: no request
    assert registry.requests == [f"GET /schemas/ids/{a}"]

    registry.schema(b)
    registry.schema(a)  # a is now the most recently used
    registry.schema(c)  # evicts b, the least recently used (cache_size=2)
    assert registry.requests == [f"GET /schemas/ids/{i}" for i in (a, b, c)]
    assert len(registry._by_id) == 2

    registry.requests.clear()
    registry.schema(a)
    registry.schema(c)
    assert registry.requests == []  # both still cached
    registry.schema(b)
    assert registry.requests == [f"GET /schemas/ids/{b}"]  # b was evicted, fetched again
    assert len(registry._by_id) == 2


@pytest.mark.parametrize("level", ["BACKWARD", "FULL"])
def test_an_incompatible_schema_is_refused_naming_subject_and_level(level: str) -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-compat")
    namespace = f"lg.x{uuid.uuid4().hex[:8]}"
    v1 = avro_v1(namespace)
    v1_id = registry.register(subject, v1)
    put_config(subject, level)
    assert registry.compatibility_level(subject) == level

    # a new field without a default: readers of v2 cannot read v1's records
    breaking = avro_record(
        namespace,
        [
            {"name": "id", "type": "long"},
            {"name": "a", "type": "int"},
            {"name": "b", "type": "string"},
        ],
    )
    reasons = registry.incompatibilities(subject, breaking)
    assert reasons and all(isinstance(r, str) and r for r in reasons)
    with pytest.raises(IncompatibleSchemaError) as caught:
        registry.register(subject, breaking)
    error = caught.value
    assert error.subject == subject and error.level == level and error.status == 409
    assert subject in str(error) and level in str(error)
    assert REGISTRY_URL in str(error)
    assert error.messages and all(isinstance(m, str) and m for m in error.messages)
    assert registry.latest(subject) == RegisteredSchema(v1_id, v1, subject, 1)  # not registered

    # a new field with a default is compatible either way
    evolved = avro_record(
        namespace,
        [
            {"name": "id", "type": "long"},
            {"name": "a", "type": "int"},
            {"name": "b", "type": "string", "default": ""},
        ],
    )
    assert registry.incompatibilities(subject, evolved) == []
    v2_id = registry.register(subject, evolved)
    assert registry.latest(subject) == RegisteredSchema(v2_id, evolved, subject, 2)


def test_a_subject_without_versions_is_compatible_with_anything_and_has_the_global_level() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-new")
    assert registry.incompatibilities(subject, avro_v1("lg.n")) == []
    # scripts/services.sh sets the registry's global level to BACKWARD (Confluent's default)
    assert registry.compatibility_level(subject) == "BACKWARD"


def test_an_invalid_schema_is_refused_with_invalid_schema_error() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-invalid")
    with pytest.raises(InvalidSchemaError, match=r"refused the schema .*HTTP 422"):
        registry.register(subject, Schema('{"type": "record", "name": "R", "fields": 7}'))
    # Apicurio recognises a JSON Schema by "$schema" or "properties": the message says so
    with pytest.raises(InvalidSchemaError, match=r'"\$schema" or "properties"'):
        registry.register(subject, Schema('{"type": "object"}', "JSON"))


def test_an_unknown_id_raises_unknown_schema_error_and_unknown_subjects_are_none() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    with pytest.raises(UnknownSchemaError, match=r"does not know schema id 4294967295") as caught:
        registry.schema(2**32 - 1)
    assert caught.value.schema_id == 2**32 - 1 and caught.value.status == 404
    assert len(registry._by_id) == 0  # an unknown id is not cached: it may be registered later
    subject = unique("lg-missing")
    assert registry.latest(subject) is None
    assert registry.lookup(subject, avro_v1("lg.m")) is None


def test_an_unknown_id_is_asked_once_more_then_remembered_for_a_few_seconds() -> None:
    """Each record with an unknown schema id cost an HTTP request (10,000 such records:
    a flood), and a 404 from a registry follower a moment behind was final. Now the
    first 404 of an id is asked once more after UNKNOWN_RECHECK_S (the injected
    sleep), then the id is remembered as unknown for UNKNOWN_MEMORY_S (the injected
    clock): no request for it until then; afterwards it is asked again."""
    from lockgate.connectors.schema_registry import client as client_module

    fake = FakeClock()
    registry = CountingRegistry(REGISTRY_URL, clock=fake.clock, sleep=fake.sleep)
    unknown = 2**32 - 3
    path = f"GET /schemas/ids/{unknown}"
    for _ in range(1000):
        with pytest.raises(UnknownSchemaError, match=f"does not know schema id {unknown}") as e:
            registry.schema(unknown)
        assert e.value.schema_id == unknown and e.value.status == 404
    assert registry.requests == [path, path], "asked, then once more after the back-off"
    assert fake.sleeps == [client_module.UNKNOWN_RECHECK_S]
    assert 0 < client_module.UNKNOWN_RECHECK_S <= 1
    fake.now += client_module.UNKNOWN_MEMORY_S - 0.01
    with pytest.raises(UnknownSchemaError):
        registry.schema(unknown)
    assert len(registry.requests) == 2
    fake.now += 0.02
    with pytest.raises(UnknownSchemaError):
        registry.schema(unknown)
    assert registry.requests == [path] * 4
    # the memory does not travel with the client (it is per process)
    assert pickle.loads(pickle.dumps(registry))._unknown == {}


def test_distinct_unknown_ids_do_not_make_the_client_sleep_for_each(
    fake_api: Callable[..., FakeApi],
) -> None:
    """A flood of distinct unknown ids: each is asked (one request), but the re-asks
    after a back-off are bounded per UNKNOWN_MEMORY_S (at most 1 s of sleeping), so a
    poll of such records is not held for minutes."""
    from lockgate.connectors.schema_registry import client as client_module

    api = fake_api(lambda h: answer(h, 404, {"error_code": 40403, "message": "Schema not found"}))
    fake = FakeClock()
    registry = SchemaRegistry(api.url(), clock=fake.clock, sleep=fake.sleep)
    for schema_id in range(1, 201):
        with pytest.raises(UnknownSchemaError):
            registry.schema(schema_id)
    assert sum(fake.sleeps) <= 1.0, fake.sleeps
    assert len(api.seen) == 200 + len(fake.sleeps)
    assert client_module.UNKNOWN_MEMORY_S >= 1


def test_a_brief_404_of_a_registry_behind_is_not_final(fake_api: Callable[..., FakeApi]) -> None:
    """A follower that has not yet seen a new schema answers 404 for a moment: the id
    asked once more after the back-off is found, and its records are not malformed."""
    answers = iter([404, 200])

    def behind(h: http.server.BaseHTTPRequestHandler) -> None:
        if next(answers, 200) == 404:
            answer(h, 404, {"error_code": 40403, "message": "Schema not found"})
        else:
            schema_by_id(h)

    api = fake_api(behind)
    fake = FakeClock()
    registry = SchemaRegistry(api.url(), clock=fake.clock, sleep=fake.sleep)
    assert registry.schema(5).schema.schema == AVRO_TEXT
    assert [path for _, path, _ in api.seen] == ["/apis/ccompat/v7/schemas/ids/5"] * 2
    assert len(fake.sleeps) == 1


def test_a_subjects_version_is_read_as_a_reference_names_it() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    subject = unique("lg-version")
    schema_id = registry.register(subject, avro_v1("lg.v"))
    found = registry.version(subject, 1)
    assert found is not None and found.schema_id == schema_id and found.version == 1
    assert found.subject == subject and json.loads(found.schema.schema)["name"] == "Order"
    latest = registry.version(subject, -1)
    assert latest is not None and latest.schema_id == schema_id
    assert registry.version(subject, 99) is None
    assert registry.version(unique("lg-none"), 1) is None
    with pytest.raises(ConfigurationError, match="version must be an int >= 1"):
        registry.version(subject, 0)


def test_a_wrong_base_url_is_not_mistaken_for_an_unknown_schema() -> None:
    """The registry's root without /apis/ccompat/v7 answers 404 for every id: without the
    registry's own error code that is a wrong URL, not an unknown schema (a reader would
    otherwise send every record to the dead-letter output)."""
    root = REGISTRY_URL.rsplit("/apis/", 1)[0]
    registry = SchemaRegistry(root, retry_for_s=0)
    with pytest.raises(SchemaRegistryError, match=r"is the URL the API's base") as caught:
        registry.schema(1)
    assert not isinstance(caught.value, UnknownSchemaError)
    with pytest.raises(SchemaRegistryError, match=r"is the URL the API's base"):
        registry.latest(unique("lg-wrong-url"))


def test_lg_connectors_exports_the_client() -> None:
    assert lg.connectors.SchemaRegistry is SchemaRegistry
    assert lg.connectors.Schema is Schema
    assert lg.connectors.SchemaRegistry(REGISTRY_URL).redacted_url == REGISTRY_URL


# -------------------------------------------------------- unreachable, flaky, refusing


def test_an_unreachable_registry_is_retried_with_backoff_then_unavailable() -> None:
    clock = FakeClock()
    url = f"http://lg-user:{SECRET}@127.0.0.1:{unused_port()}/apis/ccompat/v7"
    registry = SchemaRegistry(url, retry_for_s=30, clock=clock.clock, sleep=clock.sleep)
    started = time.monotonic()
    with pytest.raises(SchemaRegistryUnavailable) as caught:
        registry.schema(7)
    assert time.monotonic() - started < 20  # refused connections: nothing really waited
    # 0.1 s doubling, capped at 5 s, until retry_for_s has passed on the injected clock
    assert clock.sleeps[:6] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2])
    assert max(clock.sleeps) == 5.0
    assert sum(clock.sleeps) == pytest.approx(30.0)
    message = str(caught.value)
    redacted = url.replace(f"lg-user:{SECRET}@", "***@")
    assert redacted in message and "GET /schemas/ids/7" in message
    assert f"{len(clock.sleeps) + 1} attempt(s)" in message
    assert "ConnectionRefusedError" in message
    assert SECRET not in message and "lg-user" not in message
    assert SECRET not in repr(registry) and SECRET not in repr(caught.value)
    assert SECRET not in str(pickle.loads(pickle.dumps(caught.value)))
    assert isinstance(pickle.loads(pickle.dumps(caught.value)), SchemaRegistryUnavailable)


def test_retry_for_s_zero_makes_one_attempt() -> None:
    clock = FakeClock()
    registry = SchemaRegistry(
        f"http://127.0.0.1:{unused_port()}", retry_for_s=0, clock=clock.clock, sleep=clock.sleep
    )
    with pytest.raises(SchemaRegistryUnavailable, match=r"1 attempt\(s\)"):
        registry.latest("x")
    assert clock.sleeps == []


def test_5xx_and_429_are_retried_until_the_registry_answers(
    fake_api: Callable[..., FakeApi],
) -> None:
    statuses = iter([503, 429, 502])

    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        status = next(statuses, 200)
        if status == 200:
            schema_by_id(h)
        else:
            answer(h, status, b"<html>busy</html>")

    api = fake_api(handle)
    clock = FakeClock()
    registry = SchemaRegistry(api.url(), clock=clock.clock, sleep=clock.sleep)
    assert registry.schema(3).schema.schema == AVRO_TEXT
    assert len(api.seen) == 4
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4])


def test_a_registry_that_stays_down_fails_with_its_last_answer(
    fake_api: Callable[..., FakeApi],
) -> None:
    api = fake_api(lambda h: answer(h, 503, {"message": "store unavailable", "error_code": 50001}))
    clock = FakeClock()
    registry = SchemaRegistry(api.url(), retry_for_s=2, clock=clock.clock, sleep=clock.sleep)
    with pytest.raises(SchemaRegistryUnavailable, match=r"HTTP 503: store unavailable"):
        registry.register("s", avro_v1("lg.d"))
    assert sum(clock.sleeps) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"message": "bad request", "error_code": 400}),
        (401, {"message": "unauthorized", "error_code": 401}),
        # Apicurio's answer to a schema of another type than the subject's: deterministic
        (500, {"message": "#: unknown type: [record]", "error_code": 0}),
    ],
)
def test_a_refusal_is_not_retried(
    fake_api: Callable[..., FakeApi], status: int, body: dict[str, Any]
) -> None:
    api = fake_api(lambda h: answer(h, status, body))
    clock = FakeClock()
    registry = SchemaRegistry(api.url(), clock=clock.clock, sleep=clock.sleep)
    with pytest.raises(SchemaRegistryError) as caught:
        registry.register("lg-s", avro_v1("lg.r"))
    assert not isinstance(caught.value, SchemaRegistryUnavailable)
    assert caught.value.status == status
    assert body["message"] in str(caught.value)
    assert "POST /subjects/lg-s/versions" in str(caught.value)
    assert len(api.seen) == 1 and clock.sleeps == []


# ------------------------------------------------------------------------- credentials


@pytest.mark.parametrize("where", ["auth", "url"])
def test_basic_auth_is_sent_and_never_shown(fake_api: Callable[..., FakeApi], where: str) -> None:
    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        if h.path.endswith("/schemas/ids/1"):
            schema_by_id(h)
        else:
            answer(h, 401, {"message": "unauthorized", "error_code": 40101})

    api = fake_api(handle)
    if where == "auth":
        registry = SchemaRegistry(api.url(), auth=("lg-user", SECRET), retry_for_s=0)
    else:
        registry = SchemaRegistry(api.url(f"lg-user:{SECRET}@"), retry_for_s=0)
    assert registry.schema(1).schema.schema == AVRO_TEXT
    expected = "Basic " + base64.b64encode(f"lg-user:{SECRET}".encode()).decode()
    method, path, headers = api.seen[0]
    assert (method, path) == ("GET", "/apis/ccompat/v7/schemas/ids/1")
    assert headers["Authorization"] == expected

    with pytest.raises(SchemaRegistryError, match=r"refused the credentials") as caught:
        registry.latest("lg-s")
    assert api.seen[1][2]["Authorization"] == expected
    for shown in (str(caught.value), repr(caught.value), repr(registry), registry.redacted_url):
        assert SECRET not in shown and expected not in shown
    assert "auth=***" in repr(registry)


def test_a_bearer_token_is_sent(fake_api: Callable[..., FakeApi]) -> None:
    api = fake_api(schema_by_id)
    registry = SchemaRegistry(api.url(), auth=SECRET)
    registry.schema(1)
    assert api.seen[0][2]["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(registry)


def test_the_client_pickles_without_its_caches() -> None:
    registry = SchemaRegistry(REGISTRY_URL, auth=("lg-user", SECRET), cache_size=7)
    namespace = f"lg.p{uuid.uuid4().hex[:8]}"
    schema_id = registry.register(unique("lg-pickle"), avro_v1(namespace))
    registry.schema(schema_id)
    assert len(registry._by_id) == 1
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
        data = dumps(registry)
        assert namespace.encode() not in data  # the cached schema stayed behind
        copy = loads(data)
        assert len(copy._by_id) == 0 and copy.cache_size == 7
        assert copy.redacted_url == registry.redacted_url
        assert copy.schema(schema_id) == registry.schema(schema_id)  # works, fills its own cache
        assert len(copy._by_id) == 1


# --------------------------------------------------------------------- hostile answers


def test_an_endless_body_is_refused_at_the_bound(fake_api: Callable[..., FakeApi]) -> None:
    sent = [0]

    def endless(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        chunk = b"[" * 65536
        try:  # at most 4x the bound (16 MiB), so the server never runs away either
            while sent[0] < 4 * 16 * 1024 * 1024:
                h.wfile.write(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass

    api = fake_api(endless)
    clock = FakeClock()
    registry = SchemaRegistry(api.url(), clock=clock.clock, sleep=clock.sleep)
    with pytest.raises(SchemaRegistryError, match=r"more than the 16777216 bytes") as caught:
        registry.schema(1)
    assert "GET /schemas/ids/1" in str(caught.value)
    assert not isinstance(caught.value, SchemaRegistryUnavailable)
    assert len(api.seen) == 1 and clock.sleeps == []  # refused, not retried
    assert sent[0] < 4 * 16 * 1024 * 1024  # the client stopped reading at the bound


def test_a_declared_huge_body_is_refused_before_reading(fake_api: Callable[..., FakeApi]) -> None:
    def huge(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(2**40))
        h.end_headers()
        h.wfile.write(b"{")

    api = fake_api(huge)
    registry = SchemaRegistry(api.url(), retry_for_s=0)
    with pytest.raises(SchemaRegistryError, match=r"Content-Length 1099511627776"):
        registry.schema(1)


def test_a_body_that_drips_is_bounded_by_timeout_s(fake_api: Callable[..., FakeApi]) -> None:
    stop = threading.Event()

    def drip(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        try:
            while not stop.wait(0.05):
                h.wfile.write(b" ")
                h.wfile.flush()
        except OSError:
            pass

    api = fake_api(drip)
    registry = SchemaRegistry(api.url(), timeout_s=0.5, retry_for_s=0)
    started = time.monotonic()
    try:
        with pytest.raises(SchemaRegistryUnavailable, match=r"did not arrive within 0.5 s"):
            registry.schema(1)
    finally:
        stop.set()
    assert time.monotonic() - started < 15


def test_headers_that_trickle_are_bounded_by_timeout_s(fake_api: Callable[..., FakeApi]) -> None:
    """A server sending its header lines a byte at a time (each within the socket's
    timeout) held a request far past timeout_s: only the body had a total deadline.
    One deadline bounds the whole exchange."""
    stop = threading.Event()

    def trickle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        try:
            while not stop.wait(0.05):  # one header line, a byte at a time
                h.wfile.write(b"a")
                h.wfile.flush()
        except OSError:
            pass

    api = fake_api(trickle)
    registry = SchemaRegistry(api.url(), timeout_s=0.5, retry_for_s=0)
    started = time.monotonic()
    try:
        with pytest.raises(SchemaRegistryUnavailable, match=r"within 0.5 s \(timeout_s\)"):
            registry.schema(1)
    finally:
        stop.set()
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("path_answered", "body", "call", "what"),
    [
        ("/schemas/ids/1", b"<html>not json</html>", lambda r: r.schema(1), "is not JSON"),
        ("/schemas/ids/1", b"[1, 2]", lambda r: r.schema(1), "not a JSON object"),
        ("/schemas/ids/1", b'{"schema": 7}', lambda r: r.schema(1), "'schema' is not"),
        (
            "/schemas/ids/1",
            b'{"schema": "x", "schemaType": "XML"}',
            lambda r: r.schema(1),
            "schema type 'XML'",
        ),
        (
            "/schemas/ids/1",
            b'{"schema": "x", "references": [{"name": "a"}]}',
            lambda r: r.schema(1),
            "a reference is not",
        ),
        (
            "/subjects/s/versions?normalize=true",
            b'{"id": "7"}',
            lambda r: r.register("s", avro_v1("lg.h")),
            "'id' is not a non-negative int",
        ),
        (
            "/subjects/s/versions?normalize=true",
            b'{"id": true}',
            lambda r: r.register("s", avro_v1("lg.h")),
            "'id' is not a non-negative int",
        ),
        (
            "/subjects/s/versions/latest",
            b'{"id": 1, "schema": "x", "subject": "s", "version": null}',
            lambda r: r.latest("s"),
            "'version' is not",
        ),
        (
            "/compatibility/subjects/s/versions/latest?verbose=true",
            b'{"is_compatible": "no"}',
            lambda r: r.incompatibilities("s", avro_v1("lg.h")),
            "'is_compatible' is not a boolean",
        ),
        (
            "/config/s?defaultToGlobal=true",
            b"{}",
            lambda r: r.compatibility_level("s"),
            "'compatibilityLevel' is not",
        ),
        ("/schemas/ids/1", b"[" * 100_000, lambda r: r.schema(1), "is not JSON"),
    ],
)
def test_an_answer_the_api_does_not_document_is_an_error_naming_the_path(
    fake_api: Callable[..., FakeApi],
    path_answered: str,
    body: bytes,
    call: Callable[[SchemaRegistry], Any],
    what: str,
) -> None:
    api = fake_api(lambda h: answer(h, 200, body))
    registry = SchemaRegistry(api.url(), retry_for_s=0)
    with pytest.raises(SchemaRegistryError) as caught:
        call(registry)
    message = str(caught.value)
    assert what in message
    assert path_answered in message and api.url() in message
    assert api.seen[0][1] == "/apis/ccompat/v7" + path_answered
    assert len(registry._by_id) == 0


def test_schema_type_absent_means_avro(fake_api: Callable[..., FakeApi]) -> None:
    api = fake_api(schema_by_id)
    assert SchemaRegistry(api.url()).schema(1).schema.schema_type == "AVRO"


# ------------------------------------------------------------------------ arguments


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("", "non-empty str"),
        (None, "non-empty str"),
        ("127.0.0.1:8081", "not http:// or https://"),
        ("ftp://127.0.0.1:8081", "not http:// or https://"),
        ("http:///apis/ccompat/v7", "has no host"),
        ("http://127.0.0.1:99999", "out of range"),
        ("http://127.0.0.1:8081/apis?x=1", "query or fragment"),
        ("http://127.0.0.1:8081/apis#x", "query or fragment"),
        ("http://127.0.0.1:8081/ apis", "whitespace or control"),
        ("http://:pw@127.0.0.1:8081", "without a user name"),
    ],
)
def test_a_bad_url_is_refused_saying_how_to_fix_it(url: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as caught:
        SchemaRegistry(url)
    assert "http://127.0.0.1:8081/apis/ccompat/v7" in str(caught.value) or "auth=" in str(
        caught.value
    )


def test_a_bad_url_with_credentials_does_not_show_them() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SchemaRegistry(f"ftp://lg-user:{SECRET}@127.0.0.1:8081")
    assert SECRET not in str(caught.value) and "***@" in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cache_size": 0}, r"cache_size must be an int >= 1"),
        ({"cache_size": True}, r"cache_size must be an int >= 1"),
        ({"cache_size": 1.5}, r"cache_size must be an int >= 1"),
        ({"timeout_s": 0}, r"timeout_s must be a finite number of seconds > 0"),
        ({"timeout_s": float("nan")}, r"timeout_s must be a finite"),
        ({"timeout_s": "10"}, r"timeout_s must be a finite"),
        ({"retry_for_s": -1}, r"retry_for_s must be a finite number of seconds >= 0"),
        ({"retry_for_s": float("inf")}, r"retry_for_s must be a finite"),
        ({"clock": 5}, r"clock must be callable"),
        ({"sleep": "x"}, r"sleep must be callable"),
        ({"auth": ("user", "pw", "x")}, r"auth must be None, \(user, password\)"),
        ({"auth": ("us:er", "pw")}, r"without ':'"),
        ({"auth": ("", "pw")}, r"non-empty user"),
        ({"auth": ["user", "pw"]}, r"auth must be None"),
        ({"auth": ""}, r"bearer token: it must be non-empty"),
        ({"auth": "tok\r\nX-Evil: 1"}, r"without whitespace or control"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as caught:
        SchemaRegistry(REGISTRY_URL, **kwargs)
    assert "pw" not in str(caught.value).replace("password", "")


def test_credentials_twice_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"give the credentials once") as caught:
        SchemaRegistry(f"http://u:{SECRET}@127.0.0.1:8081", auth=("u", SECRET))
    assert SECRET not in str(caught.value)


def test_bad_call_arguments_are_refused() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    for bad_id in (-1, 2**32, True, "1", 1.0):
        with pytest.raises(ConfigurationError, match=r"schema id is an int in \[0, 2\*\*32\)"):
            registry.schema(bad_id)  # type: ignore[arg-type]
    for bad_subject in ("", None, "a\nb"):
        with pytest.raises(ConfigurationError, match=r"subject"):
            registry.latest(bad_subject)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"expected a lockgate Schema"):
        registry.register("s", '{"type": "string"}')  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Schema(""), r"Schema.schema must be the schema's text"),
        (lambda: Schema({"type": "string"}), r"json.dumps"),  # type: ignore[arg-type]
        (lambda: Schema('"string"', "XML"), r"schema_type must be one of AVRO, PROTOBUF, JSON"),
        (lambda: Schema('"string"', references=("x",)), r"tuple of SchemaReference"),  # type: ignore[arg-type]
        (lambda: SchemaReference("", "s", 1), r"SchemaReference.name must be a non-empty str"),
        (lambda: SchemaReference("n", "s", 0), r"version must be an int >= 1"),
        (lambda: SchemaReference("n", "s", True), r"version must be an int >= 1"),
    ],
)
def test_bad_schemas_are_refused(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_schemas_are_values() -> None:
    reference = SchemaReference("n", "s", -1)  # -1: the subject's latest version
    a = Schema('"string"', references=[reference])  # type: ignore[arg-type]
    assert a.references == (reference,)
    assert a == Schema('"string"', "AVRO", (reference,))
    assert hash(a) == hash(Schema('"string"', "AVRO", (reference,)))
