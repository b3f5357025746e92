"""CassieQ's ``/openapi.json`` against the server that serves it: the document describes
exactly the routes served and is a valid OpenAPI 3.1 document, and schemathesis, driven by
it against a live ``lab serve cassieq`` (examples, coverage, fuzzing and stateful phases,
every check), finds no server error and nothing the document gets wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import jsonschema
import pytest

from lab.backends.cassieq.client import AdminClient
from lab.backends.cassieq.wire.api import QueueApi
from lab.worlds.live.processes import ServerProcess

ACCOUNT = "fuzzed"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
#: schemathesis's failure codes for a 5xx: the one thing the API must never answer
SERVER_ERRORS = {"ST101", "ST102"}
#: findings explained and left as they are (printed by the test, reported upstream):
KNOWN = {
    # a JSON number with a zero fraction (731.0) is an integer to JSON Schema, and the
    # original's Jackson took it; the lab's server wants the integer spelling (core/model.py
    # _whole, wire/api.py's update). And a pop receipt's pattern admits Base64 that does
    # not decode to "<monoton>:<version>:<tag>" (no schema can say that): a 400.
    "ST202",
    # lab.design.http answers a method it does not know (QUERY) with 400, not 405
    "ST204",
}
MAX_EXAMPLES = 40


def _routes() -> set[tuple[str, str]]:
    api = QueueApi(None, None, None)  # the route table needs no store: it is the class's
    return {(path, method.lower()) for method, path, *_ in api.routes()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A live API node on SQLite, and the primary key of an account made through its admin API."""
    node = ServerProcess("cassieq", tmp_path_factory.mktemp("openapi") / "api").start()
    try:
        with AdminClient(f"http://127.0.0.1:{node.ports['admin']}") as admin:
            key = admin.create_account(ACCOUNT)["keys"]["primary"]
        yield f"http://127.0.0.1:{node.ports['http']}", key
    finally:
        node.stop()


@pytest.fixture(scope="module")
def document(server: tuple[str, str]) -> dict[str, Any]:
    response = httpx.get(f"{server[0]}/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def test_the_document_describes_exactly_the_served_routes(document: dict[str, Any]) -> None:
    described = {(path, method) for path, item in document["paths"].items() for method in item
                 if method in HTTP_METHODS}
    assert described == _routes()
    for path, item in document["paths"].items():
        names = {segment[1:-1] for segment in path.split("/") if segment.startswith("{")}
        for method, operation in item.items():
            in_path = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert in_path == names, (method, path)
            assert {"401", "403", "503"} <= set(operation["responses"]), (method, path)


def test_every_route_answers_as_described(server: tuple[str, str], document: dict[str, Any]) -> None:
    """The routes are really there: without credentials each one is a 401 (auth runs first),
    a method the document does not list on a path is a 405, and a path it lacks a 404."""
    url, _ = server
    for path, method in sorted(_routes()):
        concrete = path.replace("{accountName}", ACCOUNT).replace("{queueName}", "q")
        assert httpx.request(method.upper(), url + concrete).status_code == 401, (method, path)
    listed = {path: set(item) for path, item in document["paths"].items()}
    for path, methods in listed.items():
        concrete = path.replace("{accountName}", ACCOUNT).replace("{queueName}", "q")
        for method in sorted({"get", "put", "post", "delete"} - methods):
            assert httpx.request(method.upper(), url + concrete).status_code == 405, (method, path)
    assert httpx.get(f"{url}/api/v1/accounts/{ACCOUNT}/topics").status_code == 404


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    # schemathesis ships the OpenAPI Initiative's schema of 3.1 documents (2022-10-07)
    from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

    assert document["openapi"].startswith("3.1.")
    OPENAPI_31_VALIDATOR.validate(document)
    # that schema leaves the Schema Objects alone: in 3.1 they are JSON Schema 2020-12
    for schema in _schemas(document):
        jsonschema.Draft202012Validator.check_schema(schema)
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    for item in document["paths"].values():
        for operation in item.values():
            for answer in operation["responses"].values():
                for link in answer.get("links", {}).values():
                    assert link["operationId"] in ids


def _schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every Schema Object of the document (parameters' and media types' ``schema``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema" and isinstance(value, dict):
                yield value
            else:
                yield from _schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schemas(value)


def test_schemathesis_finds_no_server_error(server: tuple[str, str], tmp_path: Path) -> None:
    """Every operation, every phase (stateful through the document's links and the ones it
    infers), every check; ``accountName`` pinned to the account whose key is sent, so the
    requests get past authentication. Fails on any 5xx, and on any finding but the known ones."""
    url, key = server
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\naccountName = "{ACCOUNT}"\n')
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", f"{url}/openapi.json",
               "--header", f"Authorization: Key {key}", "--checks", "all", "--max-examples", str(MAX_EXAMPLES),
               "--seed", "1", "--generation-database", "none", "--request-timeout", "10", "--no-color",
               "--report", "json", "--report-json-path", str(report)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(report.read_text())
    failures = {f["code"]: f for f in result["failures"]}
    print(f"\nschemathesis {result['schemathesis_version']}: {result['test_cases']['generated']} cases over "
          f"{result['operations']['tested']} operations in {result['running_time']:.1f} s; phases "
          f"{ {name: phase['status'] for name, phase in result['phases'].items()} }")
    for code, failure in sorted(failures.items()):
        print(f"  {code} {failure['title']} ×{failure['count']}: {', '.join(failure['operations'])}")

    assert result["complete"] and not result["errors"], done.stdout[-3000:]
    assert result["operations"]["tested"] == result["operations"]["selected"] == len(_routes())
    assert result["phases"]["stateful"]["status"] != "skip"
    assert not SERVER_ERRORS & set(failures), done.stdout[-6000:]
    assert set(failures) <= KNOWN, done.stdout[-6000:]
