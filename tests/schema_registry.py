"""A minimal Confluent Schema Registry over HTTP on loopback, for the Avro tests.

Real registries (Confluent's, Karapace) are not installable here; this one speaks the part of
the REST protocol the Confluent clients use: register a schema under a subject, get a schema by
id (404 with error code 40403 when unknown).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class SchemaRegistry:
    def __init__(self) -> None:
        self.schemas: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                """Quiet."""

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                found = re.match(r"^/schemas/ids/(\d+)", self.path)
                schema_id = int(found.group(1)) if found else 0
                if 1 <= schema_id <= len(registry.schemas):
                    self._reply(200, {"schema": registry.schemas[schema_id - 1]})
                else:
                    self._reply(404, {"error_code": 40403, "message": "Schema not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                schema = json.loads(self.rfile.read(length))["schema"]
                if re.match(r"^/subjects/[^/]+/versions", self.path):
                    if schema not in registry.schemas:
                        registry.schemas.append(schema)
                    self._reply(200, {"id": registry.schemas.index(schema) + 1})
                else:
                    self._reply(404, {"error_code": 404, "message": "not supported here"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> SchemaRegistry:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
