"""The REST API matches its OpenAPI document (issue 21, item 2): schemathesis loads
``/openapi.json`` from a running job's server (with the token) and checks every GET
operation with generated requests (positive and negative), and the savepoint, stop and
cancel operations with negative requests only (bodies the schema rejects must be
rejected, so no generated savepoint is ever written and the job is never stopped).
Bounded: a few examples per operation, no shrinking, a fixed seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from rest_jobs import job_id, numbers_job, start, stop

import lockgate as lg
from lockgate.rest import openapi_document

EXAMPLES = 15


def test_the_document_is_a_valid_openapi_3_document() -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    operations = sorted(op.ok().label for op in schema.get_all_operations())
    assert operations == [
        "GET /api/v1/jobs",
        "GET /api/v1/jobs/{id}",
        "GET /api/v1/jobs/{id}/checkpoints",
        "GET /api/v1/jobs/{id}/exceptions",
        "GET /api/v1/jobs/{id}/metrics",
        "GET /api/v1/jobs/{id}/progress",
        "GET /api/v1/jobs/{id}/rescales",
        "GET /api/v1/jobs/{id}/watermarks",
        "GET /metrics",
        "POST /api/v1/jobs/{id}/cancel",
        "POST /api/v1/jobs/{id}/savepoints",
        "POST /api/v1/jobs/{id}/stop",
    ]


def _would_run(case: Any) -> bool:
    """Whether a generated savepoint / stop request is one the job would carry out
    (negative generation sometimes negates another part and keeps a valid body)."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("path"), str):
        return False
    timeout = body.get("timeout")
    return (
        set(body) <= {"path", "timeout", "drain"}
        and body["path"].strip() != ""
        and (
            timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool))
        )
        and isinstance(body.get("drain", False), bool)
    )


def _check(
    operation: Any,
    mode: Any,
    url: str,
    headers: dict[str, str],
    keep: Any = None,
    **fixed: Any,
) -> None:
    strategy = operation.as_strategy(generation_mode=mode, **fixed)
    if keep is not None:
        strategy = strategy.filter(keep)

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=strategy)
    def run(case: Any) -> None:
        case.call_and_validate(base_url=url, headers=headers)

    run()


@pytest.mark.hang_guard(300)
def test_schemathesis_finds_the_api_as_its_document_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a relative savepoint path a generated request might carry would land here
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
    try:
        assert client.rest_url is not None and client.rest_token is not None
        headers = {"Authorization": f"Bearer {client.rest_token}"}
        schema = schemathesis.openapi.from_url(f"{client.rest_url}/openapi.json", headers=headers)
        jid = job_id(client)
        checked = []
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.method.upper() == "GET":
                _check(operation, schemathesis.GenerationMode.POSITIVE, client.rest_url, headers)
                if "{id}" in operation.path:
                    _check(
                        operation,
                        schemathesis.GenerationMode.POSITIVE,
                        client.rest_url,
                        headers,
                        path_parameters={"id": jid},
                    )
            elif "cancel" not in operation.path:
                # bodies the schema rejects, aimed at the real job: all must get 4xx
                _check(
                    operation,
                    schemathesis.GenerationMode.NEGATIVE,
                    client.rest_url,
                    headers,
                    keep=lambda case: not _would_run(case),
                    path_parameters={"id": jid},
                )
            else:
                # cancel has no body: check it on unknown ids only (404), the job runs on
                _check(operation, schemathesis.GenerationMode.POSITIVE, client.rest_url, headers)
            checked.append(operation.label)
        assert len(checked) == 12
        assert client.running, "a generated request stopped the job"
        assert not list(cwd.iterdir()), "a generated request wrote a savepoint"
    finally:
        stop(client)
