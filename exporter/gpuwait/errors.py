"""Typed errors. A parser raises only ParseError; a source raises only SourceError."""


class ParseError(ValueError):
    """Text that does not have the shape its format promises."""


class SourceError(Exception):
    """A whole source could not be read this tick. ``cause`` is a short, stable key for
    counting and for logging once per cause (e.g. ``missing:/proc/pressure/io``)."""

    def __init__(self, cause: str, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause
        self.detail = detail


class ConfigError(Exception):
    """A bad flag or configuration file; the message is one line that names the culprit."""
