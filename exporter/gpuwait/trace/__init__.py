"""Recording Readings to a file and replaying them: see docs/trace-format.md."""
