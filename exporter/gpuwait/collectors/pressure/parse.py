"""/proc/pressure/<resource>: pressure stall information (PSI), kernel 4.20+. Every cgroup's
<resource>.pressure has the same format, so the parser lives in ``gpuwait.core.psi``."""

from gpuwait.core.psi import SCOPES, PressureLine, parse_pressure

__all__ = ["SCOPES", "PressureLine", "parse_pressure"]
