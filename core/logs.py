"""Logging: plain lines or one JSON object per line (CKL_LOG_FORMAT=json), each with the request id of the
request it belongs to (set by service/middleware.py, carried into worker threads by contextvars)."""
from __future__ import annotations

import contextvars
import json
import logging
import time

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if rid := request_id.get():
            entry["request_id"] = rid
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        return f"{line} [{rid}]" if (rid := request_id.get()) else line


def configure(log_format: str, level: int = logging.WARNING) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("ckl.access").setLevel(logging.INFO)  # shown when CKL_ACCESS_LOG is on
