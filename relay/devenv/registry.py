"""A local stand-in for a Confluent Schema Registry, for development: the demo and the
tests serve it themselves, in a thread, on 127.0.0.1 (a free port).

Never for production (use Confluent Schema Registry, Karapace, Redpanda or Apicurio's
ccompat API there: docs/formats.md). Only the endpoints confluent-kafka's serializers and
deserializers call: register (``POST /subjects/{s}/versions``), look up
(``POST /subjects/{s}``), a schema by id (``GET /schemas/ids/{id}``), a subject's version
(``GET /subjects/{s}/versions/{v|latest}``). Schemas are kept as the client sends them
and compared as text (no normalisation, no compatibility checks). Basic auth is checked
when the server has a user; ``stop()`` closes it (a "registry outage").
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

_SUBJECT_VERSIONS = re.compile(r"^/subjects/(?P<s>[^/]+)/versions$")
_SUBJECT_VERSION = re.compile(r"^/subjects/(?P<s>[^/]+)/versions/(?P<v>latest|-1|\d+)$")
_SUBJECT = re.compile(r"^/subjects/(?P<s>[^/]+)$")
_SCHEMA_ID = re.compile(r"^/schemas/ids/(?P<id>\d+)$")


@dataclass
class RegistryState:
    schemas: list[dict[str, Any]] = field(default_factory=list)  # id - 1 → schema
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject → ids by version
    requests: list[str] = field(default_factory=list)  # "METHOD /path" as received
    lock: threading.Lock = field(default_factory=threading.Lock)

    def schema_id(self, schema: dict[str, Any]) -> int:
        for number, known in enumerate(self.schemas, start=1):
            if same_schema(known, schema):
                return number
        self.schemas.append(schema)
        return len(self.schemas)


def same_schema(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Equal as the registry compares them: Avro as parsed JSON, where a primitive type's
    name is its short form (the client sends ``{"type":"string"}`` for ``"string"``)."""
    if one["schemaType"] != other["schemaType"] or one["references"] != other["references"]:
        return False
    if one["schemaType"] != "AVRO":
        return bool(one["schema"] == other["schema"])
    return _avro(one["schema"]) == _avro(other["schema"])


def _avro(text: str) -> str:
    parsed = json.loads(text)
    if isinstance(parsed, dict) and set(parsed) == {"type"} and isinstance(parsed["type"], str):
        parsed = parsed["type"]
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


def _schema_of(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": body["schema"],
        "schemaType": body.get("schemaType", "AVRO"),
        "references": body.get("references") or [],
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: pytest shows failures, not every request

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._reply(status, {"error_code": code, "message": message})

    def _authorised(self) -> bool:
        user = self.server.user
        if user is None:
            return True
        expected = base64.b64encode(f"{user}:{self.server.password}".encode()).decode()
        if self.headers.get("Authorization") == f"Basic {expected}":
            return True
        self._error(401, 40101, "Unauthorized")
        return False

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        state = self.server.state
        with state.lock:
            state.requests.append(f"GET {path}")
        if not self._authorised():
            return
        if m := _SCHEMA_ID.match(path):
            number = int(m["id"])
            with state.lock:
                known = number <= len(state.schemas)
                schema = state.schemas[number - 1] if known else None
            if schema is None:
                self._error(404, 40403, f"Schema {number} not found")
            else:
                self._reply(200, {**schema, "id": number})
            return
        if m := _SUBJECT_VERSION.match(path):
            subject = unquote(m["s"])
            with state.lock:
                ids = list(state.subjects.get(subject, []))
            if not ids:
                self._error(404, 40401, f"Subject '{subject}' not found.")
                return
            version = len(ids) if m["v"] in ("latest", "-1") else int(m["v"])
            if not 1 <= version <= len(ids):
                self._error(404, 40402, f"Version {version} not found.")
                return
            self._reply(200, self._registered(subject, version, ids[version - 1]))
            return
        self._error(404, 404, f"no such endpoint in the local registry: GET {path}")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        state = self.server.state
        with state.lock:
            state.requests.append(f"POST {path}")
        if not self._authorised():
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if m := _SUBJECT_VERSIONS.match(path):
            subject = unquote(m["s"])
            with state.lock:
                number = state.schema_id(_schema_of(body))
                ids = state.subjects.setdefault(subject, [])
                if number not in ids:
                    ids.append(number)
                version = ids.index(number) + 1
            self._reply(200, self._registered(subject, version, number))
            return
        if m := _SUBJECT.match(path):
            subject = unquote(m["s"])
            wanted = _schema_of(body)
            with state.lock:
                ids = list(state.subjects.get(subject, []))
                found = [n for n in ids if same_schema(state.schemas[n - 1], wanted)]
            if not ids:
                self._error(404, 40401, f"Subject '{subject}' not found.")
            elif not found:
                self._error(404, 40403, "Schema not found")
            else:
                self._reply(200, self._registered(subject, ids.index(found[0]) + 1, found[0]))
            return
        self._error(404, 404, f"no such endpoint in the local registry: POST {path}")

    def _registered(self, subject: str, version: int, number: int) -> dict[str, Any]:
        with self.server.state.lock:
            schema = self.server.state.schemas[number - 1]
        return {"subject": subject, "version": version, "id": number, **schema}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    allow_reuse_address = True  # a registry restarted on its port

    def __init__(
        self, user: str | None, password: str | None, port: int, state: RegistryState | None
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.user = user
        self.password = password
        self.state = state or RegistryState()


class LocalRegistry:
    """A running stand-in registry on 127.0.0.1 (a free port)."""

    def __init__(
        self,
        user: str | None = None,
        password: str | None = None,
        *,
        port: int = 0,
        state: RegistryState | None = None,
    ) -> None:
        """``port``/``state``: another registry's, to bring it back after :meth:`stop`."""
        self._server = _Server(user, password, port, state)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = self._server.state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` as a deployment pipeline would; its id."""
        with self.state.lock:
            number = self.state.schema_id(
                {"schema": schema, "schemaType": schema_type, "references": []}
            )
            ids = self.state.subjects.setdefault(subject, [])
            if number not in ids:
                ids.append(number)
        return number

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextmanager
def local_registry(user: str | None = None, password: str | None = None) -> Iterator[LocalRegistry]:
    """A :class:`LocalRegistry` for the ``with`` block."""
    registry = LocalRegistry(user, password)
    try:
        yield registry
    finally:
        registry.stop()
