"""Test double for the HTTP server's tests: put this directory first on PYTHONPATH and the
exporter process it starts

- appends the hash of every ``bcrypt.checkpw`` call to the file named by
  ``GPUWAIT_TEST_BCRYPT_LOG``, one a line, so a test sees which hash (and cost) a request
  was checked against and whether a check ran at all;
- answers every metrics request ``GPUWAIT_TEST_RENDER_SECONDS`` more slowly, so a test can
  hold requests in flight and see the ones beyond the limit shed. The delay is taken once per
  request, where the server picks the format, since a scrape served from a rendering made
  before encodes little or nothing itself.
"""

import os

_log = os.environ.get("GPUWAIT_TEST_BCRYPT_LOG")
if _log:
    import threading

    import bcrypt

    _real_checkpw = bcrypt.checkpw
    _lock = threading.Lock()

    def checkpw(password, hashed):
        with _lock, open(_log, "a") as f:
            f.write(hashed.decode() + "\n")
        return _real_checkpw(password, hashed)

    bcrypt.checkpw = checkpw

_delay = float(os.environ.get("GPUWAIT_TEST_RENDER_SECONDS") or 0)
if _delay:
    import time

    # Patched before the server's module imports it by name.
    from gpuwait.exposition import encoding

    _real_negotiate = encoding.negotiate

    def negotiate(*args, **kwargs):
        time.sleep(_delay)
        return _real_negotiate(*args, **kwargs)

    encoding.negotiate = negotiate
