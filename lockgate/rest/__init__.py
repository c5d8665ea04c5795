"""A running job's REST API, Prometheus metrics and dashboard, served by its driver.

``JobClient`` starts one server per job when ``ExecutionConfig.rest_enabled`` (the
default): on ``rest_bind`` (default ``127.0.0.1``) and ``rest_port`` (default 0: any
free port); ``client.rest_url`` and ``client.rest_token`` say where and how to reach
it. Every request needs the token (:mod:`.auth`); the routes are in :mod:`.app`, the
OpenAPI document in :mod:`.openapi`, the Prometheus collector in :mod:`.prometheus`
and the serving thread in :mod:`.server`. See ``docs/rest-api.md``.
"""

from .app import BODY_TIMEOUT_S, MAX_BODY_BYTES, STATIC_DIR, build_app
from .auth import REQUEST_HEADER, TOKEN_COOKIE, TokenAuth, tokens_equal
from .openapi import openapi_document
from .prometheus import JobCollector, prometheus_text
from .server import RestServer, start_rest_server

__all__ = [
    "BODY_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "REQUEST_HEADER",
    "STATIC_DIR",
    "TOKEN_COOKIE",
    "JobCollector",
    "RestServer",
    "TokenAuth",
    "build_app",
    "openapi_document",
    "prometheus_text",
    "start_rest_server",
    "tokens_equal",
]
