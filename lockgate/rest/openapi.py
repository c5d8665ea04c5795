"""The OpenAPI 3 document of the REST API (``GET /openapi.json``), written by hand.

It describes what :mod:`.app` answers, errors included; the tests run schemathesis
against it on a live job, so a route or field that drifts from it fails them.
"""

from __future__ import annotations

import copy
from typing import Any

from ..core.version import __version__

STATUSES = ["CREATED", "RUNNING", "RESTARTING", "FINISHED", "CANCELED", "FAILED"]


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
    }


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
#: a sink's end-to-end latency (``latency_summary``): count and sum over the run, the
#: quantiles over about the last minute (null without samples there)
_LATENCY = {
    "count": INT,
    "sum_ms": NUM,
    "window_count": INT,
    "p50_ms": {"type": "number", "nullable": True},
    "p95_ms": {"type": "number", "nullable": True},
    "p99_ms": {"type": "number", "nullable": True},
    "max_ms": {"type": "number", "nullable": True},
}
#: a request's ``timeout``: seconds (0 < t <= a day) or null (the checkpoint timeout)
TIMEOUT = {
    "type": "number",
    "exclusiveMinimum": True,
    "minimum": 0,
    "maximum": 86_400,
    "nullable": True,
}

SCHEMAS: dict[str, Any] = {
    "Error": {**_obj({"error": STR}), "description": "What is wrong and how to fix it."},
    "JobSummary": _obj(
        {"id": STR, "name": STR, "status": {"type": "string", "enum": STATUSES}, "started_at": NUM}
    ),
    "Jobs": _obj({"jobs": {"type": "array", "items": _ref("JobSummary")}}),
    "Graph": _obj(
        {
            "vertices": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INT,
                        "name": STR,
                        "parallelism": INT,
                        "max_parallelism": INT,
                        "is_source": BOOL,
                        "operators": {
                            "type": "array",
                            "items": _obj({"uid": STR, "name": STR}),
                        },
                    }
                ),
            },
            "edges": {
                "type": "array",
                "items": _obj(
                    {
                        "source": INT,
                        "target": INT,
                        "partitioning": STR,
                        "side_output": _nullable(STR),
                    }
                ),
            },
        }
    ),
    "Job": _obj(
        {
            "id": STR,
            "name": STR,
            "status": {"type": "string", "enum": STATUSES},
            "started_at": NUM,
            "uptime_s": NUM,
            "restarts": INT,
            "graph": _ref("Graph"),
        }
    ),
    "Subtask": _obj(
        {
            "vertex": INT,
            "task": STR,
            "subtask": INT,
            "bytes_in": INT,
            "bytes_out": INT,
            "bytes_in_per_s": NUM,
            "bytes_out_per_s": NUM,
            "input_queue_fill": _nullable(NUM),
            "output_queue_fill": _nullable(NUM),
            "busy_ms_per_s": _nullable(NUM),
            "idle_ms_per_s": _nullable(NUM),
            "backpressured_ms_per_s": _nullable(NUM),
        },
        {"host": _nullable(STR)},
    ),
    "Metrics": _obj(
        {
            "time": NUM,
            "job": _obj(
                {
                    "name": STR,
                    "status": {"type": "string", "enum": STATUSES},
                    "started_at": NUM,
                    "uptime_s": NUM,
                    "attempt": INT,
                    "restarts": INT,
                }
            ),
            "vertices": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INT,
                        "name": STR,
                        "parallelism": INT,
                        "is_source": BOOL,
                        "is_sink": BOOL,
                        "records_in": NUM,
                        "records_out": NUM,
                        "records_in_per_s": NUM,
                        "records_out_per_s": NUM,
                        "bytes_in": NUM,
                        "bytes_out": NUM,
                        "bytes_in_per_s": NUM,
                        "bytes_out_per_s": NUM,
                        "busy_ms_per_s": _nullable(NUM),
                        "idle_ms_per_s": _nullable(NUM),
                        "backpressured_ms_per_s": _nullable(NUM),
                        "subtasks": {"type": "array", "items": _ref("Subtask")},
                    }
                ),
            },
            "operators": {
                "type": "array",
                "items": _obj(
                    {
                        "uid": STR,
                        "name": STR,
                        "vertex": INT,
                        "subtask": INT,
                        "records_in": INT,
                        "records_out": INT,
                        "records_in_per_s": NUM,
                        "records_out_per_s": NUM,
                        "watermark": _nullable(INT),
                        "watermark_lag_ms": _nullable(NUM),
                        "source_lag": _nullable(INT),
                        "keys": _nullable(INT),
                        "state_bytes": _nullable(INT),
                        "latency": _nullable(_ref("Latency")),
                    }
                ),
            },
            "latency": {
                "type": "array",
                "items": _obj(
                    {
                        "uid": STR,
                        "name": STR,
                        "subtasks": INT,
                        **_LATENCY,
                    }
                ),
            },
        }
    ),
    "Latency": _obj(_LATENCY),
    "Checkpoints": _obj(
        {
            "checkpoints": {
                "type": "array",
                "items": _obj(
                    {
                        "checkpoint_id": INT,
                        "trigger_timestamp": INT,
                        "status": {
                            "type": "string",
                            "enum": ["in_progress", "completed", "failed"],
                        },
                        "is_savepoint": BOOL,
                        "duration_ms": _nullable(NUM),
                        "state_size": INT,
                        "persisted_inflight_bytes": INT,
                        "failure_reason": _nullable(STR),
                        "external_path": _nullable(STR),
                        "subtasks": {
                            "type": "array",
                            "items": _obj({"vertex": INT, "subtask": INT}),
                        },
                    }
                ),
            }
        }
    ),
    "Watermarks": _obj(
        {
            "watermarks": {
                "type": "array",
                "items": _obj(
                    {
                        "operator": STR,
                        "uid": STR,
                        "subtask": INT,
                        "watermark": _nullable(INT),
                        "held_back_by": _nullable(STR),
                    }
                ),
            }
        }
    ),
    "Rescales": _obj(
        {
            # operator uid -> its parallelism now
            "parallelism": {"type": "object", "additionalProperties": INT},
            "autoscaling": _nullable({"type": "object"}),
            "rescales": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INT,
                        "time": NUM,
                        "direction": STR,
                        "old": {"type": "object", "additionalProperties": INT},
                        "new": {"type": "object", "additionalProperties": INT},
                        "reason": STR,
                        "status": {
                            "type": "string",
                            "enum": ["in progress", "applied", "failed", "rolled back"],
                        },
                        "savepoint": _nullable(STR),
                        "error": _nullable(STR),
                        "duration_ms": _nullable(NUM),
                        "evaluation": {"type": "array", "items": {"type": "object"}},
                    }
                ),
            },
        }
    ),
    "Exceptions": _obj(
        {
            "exceptions": {
                "type": "array",
                "items": _obj(
                    {
                        "time": NUM,
                        "attempt": INT,
                        "operator": _nullable(STR),
                        "error": STR,
                        "traceback": _nullable(STR),
                    },
                    {
                        "final": BOOL,
                        # where a lost process ran (a Spark slot's worker that died)
                        "slot": _nullable(INT),
                        "host": _nullable(STR),
                        "pid": _nullable(INT),
                        "signal": _nullable(INT),
                        "exit_code": _nullable(INT),
                    },
                ),
            }
        }
    ),
    "Progress": _obj(
        {
            "job": _nullable(STR),
            "status": _nullable(STR),
            "input_records_per_s": NUM,
            "output_records_per_s": NUM,
            "watermark": _nullable(INT),
            "last_checkpoint": _nullable(
                _obj(
                    {
                        "id": INT,
                        "duration_ms": _nullable(NUM),
                        "state_size": INT,
                        "is_savepoint": BOOL,
                    }
                )
            ),
            "most_backpressured": _nullable(_obj({"task": STR, "backpressured_ms_per_s": NUM})),
        }
    ),
    "SavepointRequest": {
        **_obj(
            {"path": {"type": "string", "minLength": 1}},
            {"timeout": TIMEOUT},
        ),
        "additionalProperties": False,
    },
    "StopRequest": {
        "type": "object",
        "properties": {
            # absent or null: the job's default savepoint folder (savepoint_dir)
            "path": _nullable({"type": "string", "minLength": 1}),
            "drain": BOOL,
            "timeout": TIMEOUT,
        },
        "additionalProperties": False,
    },
    "Location": _obj({"location": STR}),
    "Canceling": _obj({"status": {"type": "string", "enum": ["CANCELING"]}}),
}


def _json(schema: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Bad request: the body or a field is wrong (the error says which and how).",
        401: "No or a wrong token.",
        404: "No job with this id here.",
        408: "The request body did not arrive in time.",
        409: "The job cannot do it now: ended, not running, no checkpointing, or the "
        "savepoint failed.",
        413: "The request body is too large.",
        504: "The savepoint or stop did not complete within 'timeout'.",
    }
    return {str(c): _json("Error", text[c]) for c in codes}


JOB_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The job's id (GET /api/v1/jobs lists it).",
    "schema": {"type": "string"},
}


def _get(summary: str, schema: str, *, job: bool = True) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": _json(schema, summary), **_errors(*((401, 404) if job else (401,)))},
    }
    if job:
        op["parameters"] = [JOB_ID]
    return {"get": op}


def _post(summary: str, request: str | None, ok: str, status: int, errors: tuple[int, ...]) -> Any:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [JOB_ID],
        "responses": {str(status): _json(ok, summary), **_errors(*errors)},
    }
    if request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(request)}},
        }
    return {"post": op}


_DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "lockgate job REST API",
        "version": __version__,
        "description": (
            "One running lockgate job, served by its driver. Every request needs the job's "
            "token (JobClient.rest_token) as 'Authorization: Bearer <token>'; no cookie "
            "authenticates (only the dashboard's page, / and /static/..., is served without "
            'it). Errors are JSON {"error": "..."}.'
        ),
    },
    "security": [{"bearer": []}],
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": SCHEMAS,
    },
    "paths": {
        "/api/v1/jobs": _get("The job this server serves.", "Jobs", job=False),
        "/api/v1/jobs/{id}": _get("The job: status, uptime, restarts and graph.", "Job"),
        "/api/v1/jobs/{id}/metrics": _get("Live metrics per task and operator.", "Metrics"),
        "/api/v1/jobs/{id}/checkpoints": _get("Checkpoint history.", "Checkpoints"),
        "/api/v1/jobs/{id}/watermarks": _get(
            "Each operator subtask's watermark and what holds it back.", "Watermarks"
        ),
        "/api/v1/jobs/{id}/exceptions": _get("Failures so far, with tracebacks.", "Exceptions"),
        "/api/v1/jobs/{id}/rescales": _get(
            "Each operator's parallelism now, the autoscaler's settings and its decisions.",
            "Rescales",
        ),
        "/api/v1/jobs/{id}/progress": _get("A progress summary.", "Progress"),
        "/api/v1/jobs/{id}/savepoints": _post(
            "Take a savepoint into 'path'; the job goes on.",
            "SavepointRequest",
            "Location",
            200,
            (400, 401, 404, 408, 409, 413, 504),
        ),
        "/api/v1/jobs/{id}/stop": _post(
            "Take a savepoint into 'path' (absent or null: a new folder in the job's default "
            "savepoint folder, checkpoint_config.savepoint_dir; 409 when it has none), then "
            "stop the job (drain: end the input first).",
            "StopRequest",
            "Location",
            200,
            (400, 401, 404, 408, 409, 413, 504),
        ),
        "/api/v1/jobs/{id}/cancel": _post(
            "Cancel the job (returns at once).", None, "Canceling", 202, (401, 404, 409, 413)
        ),
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics of the job (text format 0.0.4).",
                "responses": {
                    "200": {
                        "description": "Prometheus text.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(401),
                },
            }
        },
    },
}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3 document (a fresh copy)."""
    return copy.deepcopy(_DOCUMENT)
