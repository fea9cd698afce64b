"""Logging set-up: every record carries the request id as `rid=...`; with LOG_FORMAT=json each
record is one JSON object on one line (the edge's per-request line adds token id, route,
status and timings as fields)."""

from __future__ import annotations

import json
import logging
import time

from memory_bridge.core.request_context import request_id_var

LOG_FORMAT = "[%(asctime)s] [%(levelname)s] [rid=%(rid)s] [%(name)s] %(message)s"
# The fields the edge's access line attaches (`extra=`): copied into the JSON object.
ACCESS_FIELDS = ("request_id", "token_id", "route", "method", "status", "duration_ms")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.rid = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "rid", "-"),
            "message": record.getMessage(),
        }
        for name in ACCESS_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = record.exc_info[0].__name__  # the class: a message may quote secrets
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def configure_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn installs its own handlers; route them through ours so they carry rid too.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
