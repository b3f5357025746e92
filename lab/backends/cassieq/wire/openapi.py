"""The OpenAPI 3 document of CassieQ's queue API, served at ``/openapi.json``: built from
the same route table the server routes (``QueueApi.routes``), so a route cannot be served
without being described (a test checks both ways)."""

from __future__ import annotations

from typing import Any

from lab.backends.cassieq.wire.api import MAX_INT, MAX_SECONDS

NAME = {"type": "string", "pattern": r"^[a-zA-Z_\-0-9\.]+$"}
DEFINITION = {"type": "object", "properties": {
    "accountName": {"type": "string"}, "queueName": {"type": "string"}, "bucketSize": {"type": "integer"},
    "maxDeliveryCount": {"type": "integer"}, "status": {"type": "string"}, "version": {"type": "integer"},
    "repairWorkerPollFrequencySeconds": {"type": "integer"},
    "repairWorkerTombstonedBucketTimeoutSeconds": {"type": "integer"},
    "deleteBucketsAfterFinalization": {"type": "boolean"}, "queueStatsId": {"type": "string"},
    "dlqName": {"type": ["string", "null"]}, "strictFifo": {"type": "boolean"}, "id": {"type": "string"}}}
ERROR = {"type": "object", "required": ["reason", "operation", "message"], "properties": {
    "reason": {"type": "string", "enum": ["Error", "NotFound", "Conflict"]}, "operation": {"type": "string"},
    "message": {"type": "string"}, "queueName": {"type": "string"}}}
CREATE = {"type": "object", "required": ["queueName"], "properties": {
    # the original binds them to Java ints; null is the default
    "queueName": NAME, "bucketSize": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_INT},
    "maxDeliveryCount": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_INT},
    "repairWorkerPollSeconds": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_INT},
    "repairWorkerBucketFinalizeTimeSeconds": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT},
    "deleteBucketsAfterFinalize": {"type": ["boolean", "null"]}, "dlqName": {"oneOf": [NAME, {"type": "null"}]}}}
MESSAGE = {"type": "object", "properties": {"popReceipt": {"type": "string"}, "message": {"type": "string"},
                                            "deliveryCount": {"type": "integer"}, "messageTag": {"type": "string"}}}
SECONDS = {"type": "integer", "minimum": 0, "maximum": MAX_SECONDS}
UPDATE = {"type": "object", "properties": {"message": {"type": ["string", "null"]},
                                           "newInvisibilitySeconds": {"type": ["integer", "null"], "minimum": 0,
                                                                      "maximum": MAX_SECONDS}}}
#: standard Base64 of "<monoton>:<version>:<tag>" (padding optional); '+' and '/' URL-encoded
RECEIPT = {"type": "string", "pattern": "^[A-Za-z0-9+/]+={0,2}$"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _answer(description: str, schema: dict[str, Any] | None = None,
            links: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, **(_json(schema) if schema else {}), **({"links": links} if links else {})}


def operation_id(operation: str, method: str) -> str:
    """The document's id of an operation (the original named two methods "Delete")."""
    return f"{operation}_{method.lower()}" if operation == "Delete" else operation


def _links(parameters: dict[str, str], *operations: str) -> dict[str, Any]:
    """OpenAPI links: the operations a response leads to, and where their parameters come from
    (what a stateful client, such as schemathesis's, follows)."""
    return {op[0].upper() + op[1:]: {"operationId": op, "parameters": parameters} for op in operations}


#: the queue a create named, and the queue a request's path named
CREATED = {"path.accountName": "$request.path.accountName", "path.queueName": "$request.body#/queueName"}
SAME_QUEUE = {"path.accountName": "$request.path.accountName", "path.queueName": "$request.path.queueName"}
LEASED = {**SAME_QUEUE, "query.popReceipt": "$response.body#/popReceipt"}
QUEUE_USES = ("putMessage", "getMessage", "getQueueDefinition", "getQueueStatistics", operation_id("Delete", "DELETE"))


def _query(name: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


#: what each operation takes and answers, beyond the path parameters and the auth answers
OPERATIONS: dict[str, dict[str, Any]] = {
    "getQueues": {"summary": "List the account's Active queues",
                  "responses": {"200": _answer("the queue definitions", {"type": "array", "items": DEFINITION})}},
    "createQueue": {"summary": "Create a queue",
                    "parameters": [_query("errorIfExists", {"type": "boolean"})],
                    "requestBody": {"required": True, **_json(CREATE)},
                    "responses": {"201": _answer("created", links=_links(CREATED, *QUEUE_USES)),
                                  "200": _answer("it already exists", links=_links(CREATED, *QUEUE_USES)),
                                  "409": _answer("it exists and errorIfExists=true", ERROR),
                                  "422": _answer("bad create options", ERROR)}},
    "getQueueDefinition": {"summary": "A queue's definition",
                           "responses": {"200": _answer("the definition", DEFINITION),
                                         "404": _answer("no Active queue", ERROR)}},
    "getQueueStatistics": {"summary": "A queue's size",
                           "responses": {"200": _answer("the size", {"type": "object", "properties": {
                               "size": {"type": "integer"}}}), "404": _answer("no Active queue", ERROR)}},
    "Delete": {"summary": "Delete a queue (synchronously)",
               "responses": {"200": _answer("deleted"), "404": _answer("no Active queue", ERROR),
                             "409": _answer("another delete is running", ERROR)}},
    "putMessage": {"summary": "Put a message (the body, verbatim, as UTF-8 text)",
                   "parameters": [_query("initialInvisibilitySeconds", SECONDS)],
                   "requestBody": {"required": False, "content": {"text/plain": {"schema": {"type": "string"}}}},
                   "responses": {"201": _answer("stored", links=_links(SAME_QUEUE, "getMessage")),
                                 "400": _answer("bad parameters", ERROR),
                                 "404": _answer("no Active queue", ERROR)}},
    "getMessage": {"summary": "Lease the next message",
                   "parameters": [_query("invisibilityTimeSeconds", SECONDS)],
                   "responses": {"200": _answer("a message, invisible for the lease", MESSAGE,
                                         _links(LEASED, "ackMessage", "updateMessage")),
                                 "204": _answer("nothing available"), "400": _answer("bad parameters", ERROR),
                                 "404": _answer("no Active queue", ERROR)}},
    "updateMessage": {"summary": "Change a leased message's body and lease (0 s: nack)",
                      "parameters": [_query("popReceipt", RECEIPT, required=True)],
                      "requestBody": {"required": False, **_json(UPDATE)},
                      "responses": {"200": _answer("the new pop receipt", {"type": "object", "properties": {
                          "popReceipt": {"type": "string"}, "messageTag": {"type": "string"}}},
                          _links(LEASED, "ackMessage")),
                          "400": _answer("a missing or malformed receipt", ERROR),
                          "404": _answer("no Active queue", ERROR), "409": _answer("a stale receipt", ERROR),
                          "422": _answer("a bad body", ERROR)}},
    "ackMessage": {"summary": "Ack a leased message",
                   "parameters": [_query("popReceipt", RECEIPT, required=True)],
                   "responses": {"204": _answer("acked"), "400": _answer("a missing or malformed receipt", ERROR),
                                 "404": _answer("no Active queue", ERROR),
                                 "409": _answer("the message was leased again, or is gone", ERROR)}},
}

#: answers every operation may give (an operation's own description of one comes first)
COMMON_ANSWERS = {"400": _answer("a malformed path or query parameter (a name outside the name rule, a number "
                               "that is not a whole number in range, a flag that is not true or false)", ERROR),
                "401": {"description": "no credentials, or credentials that do not authenticate"},
                "403": {"description": "the credentials lack the endpoint's permission level"},
                "503": {"description": "the store is unavailable: whether the request applied is unknown"}}


def document(routes: list[tuple[str, str, Any, str, Any]]) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (method, path, level, operation, handler)."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, level, operation, _ in routes:
        names = [segment[1:-1] for segment in path.split("/") if segment.startswith("{")]
        described = OPERATIONS[operation]
        paths.setdefault(path, {})[method.lower()] = {
            "operationId": operation_id(operation, method),
            "summary": described["summary"],
            "description": f"Needs permission level {level.level_name} ({level.short_form}).",
            "parameters": [{"name": n, "in": "path", "required": True, "schema": NAME} for n in names]
            + described.get("parameters", []),
            **({"requestBody": described["requestBody"]} if "requestBody" in described else {}),
            "responses": {**COMMON_ANSWERS, **described["responses"]},
            "security": [{"key": []}, {"signed": []}, {"query": []}],
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "CassieQ (queue-lab reference)", "version": "0.12-lab",
                 "description": "The queue API of the original CassieQ (spec §1), with the lab's fixes."},
        "paths": paths,
        "components": {"securitySchemes": {
            "key": {"type": "apiKey", "in": "header", "name": "Authorization",
                    "description": "Authorization: Key <account key>"},
            "signed": {"type": "apiKey", "in": "header", "name": "Authorization",
                       "description": "Authorization: Signed <sig>, with x-cassieq-request-time"},
            "query": {"type": "apiKey", "in": "query", "name": "sig",
                      "description": "signed query claims auth, q, st, et, sig"}}},
    }
