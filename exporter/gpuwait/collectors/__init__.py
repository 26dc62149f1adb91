"""One package per collector: its parser(s), payload, source, window statistics, metrics and
options. ``gpuwait.core.registry`` lists them; nothing here imports them all."""
