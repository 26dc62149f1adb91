"""Machinery every collector shares: the plugin types, the registry of collectors, options
and settings, the sampler and its window rings, window statistics, the one pseudo-file
reader, and the facts several modules rely on. Nothing here imports a collector, the
analysis or the exposition, except the registry, whose job is to list them.

How "absent" is spelled, in every layer:

* A payload (``Reading.data``) holds ``None`` for a value that could not be read: a counter
  an older kernel does not print, a driver without a PMA, an NVML call a GPU does not offer.
* A window column holds NaN where a sample has no value (``ColumnRing`` fills the rows a
  key is missing from with NaN, so series that appear or vanish stay aligned).
* A window statistic is ``None`` when the window does not allow it (fewer than two samples,
  a counter that never moved), never NaN.
* The NVML layer answers ``nvml.values.NA`` inside a job that queries a GPU; the gateway
  turns NA into ``None`` in the ``DeviceResult`` it hands back, so no NA leaves ``nvml/``
  except through a job's own code.
* The exposition leaves out every sample whose value is ``None`` or NaN: the series is
  absent, never published as NaN.
"""
