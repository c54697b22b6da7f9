"""OpenAI-style error objects: what a client gets instead of a traceback."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses; becomes ``{"error": {...}}`` with an HTTP status code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param

    def body(self) -> dict[str, Any]:
        """The JSON body, in the shape the OpenAI API (and its clients) use."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad_param(param: str, message: str) -> ApiError:
    """A 400 for one request field."""
    return ApiError(400, message, param=param, code="invalid_value")


STATUS_KINDS = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
    429: ("rate_limit_error", "too_many_requests"),
    503: ("server_error", "model_not_ready"),
}


def from_status(status: int, message: str) -> ApiError:
    """An error for an HTTP status raised by the HTTP library itself (unknown path, body too large, bytes
    that are not HTTP)."""
    kind, code = STATUS_KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return ApiError(status, message, kind=kind, code=code)
