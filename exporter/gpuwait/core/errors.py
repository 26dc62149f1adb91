"""Typed errors. A parser raises only ParseError; a source raises SourceError when it failed
and NoData when it works but the kernel has nothing for it to report."""


class ParseError(ValueError):
    """Text that does not have the shape its format promises."""


class SourceError(Exception):
    """A whole source could not be read this tick. ``cause`` is a short, stable key for
    counting and for logging once per cause (e.g. ``missing:/proc/pressure/io``)."""

    def __init__(self, cause: str, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause
        self.detail = detail


class NoData(Exception):
    """The source works, but the kernel has nothing for it to report: a kernel built without
    PSI (or booted with psi=0), no RDMA device, no NFS mount.

    Not a failure: the source stays up (``gpuwait_source_up 1``), ``gpuwait_source_no_data``
    is 1, nothing is counted in ``gpuwait_source_errors_total``, it is logged once, and the
    source is read again on its schedule, so a module loaded later is picked up. This is how
    node_exporter's collectors report an absent kernel feature (``ErrNoData`` in its
    collector/collector.go), rather than as a failed scrape. ``cause`` names what is absent
    (e.g. ``unavailable:/proc/pressure``)."""

    def __init__(self, cause: str, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause
        self.detail = detail


class ConfigError(Exception):
    """A bad flag or configuration file; the message is one line that names the culprit."""
