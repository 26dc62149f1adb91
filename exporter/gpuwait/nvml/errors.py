"""How NVML's errors are read: every error code sorted into what the gateway does about it.

The codes are taken from the pynvml module in use (nvidia-ml-py's NVML_ERROR_* constants),
never hard-coded, so a library that renumbers or adds codes is read right.
"""

from __future__ import annotations

import enum


class ErrorClass(enum.Enum):
    #: The GPU does not offer this (now): remember it, leave its series out.
    SKIP = "skip"
    #: This GPU is gone (fell off the bus, needs a reset): mark it down, probe it again later.
    DEVICE_GONE = "device_gone"
    #: The driver or the library is gone: take the backend down and re-initialise.
    DRIVER_GONE = "driver_gone"
    #: Anything else: this call failed this time; ask again next read.
    FAILED = "failed"


class Abandoned(Exception):
    """Unwinds a job whose deadline passed while it was inside a driver call."""


class _Empty:
    __slots__ = ()


#: Returned by a call whose error code means "nothing new" rather than "unsupported".
EMPTY = _Empty()


class Classifier:
    """Error codes of the pynvml module in use, sorted into ErrorClass."""

    def __init__(self, nv) -> None:
        self.nv = nv
        self.names = {getattr(nv, n): n[len("NVML_ERROR_"):] for n in dir(nv) if n.startswith("NVML_ERROR_")}
        self.skip_forever = {
            nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION, nv.NVML_ERROR_FUNCTION_NOT_FOUND,
            nv.NVML_ERROR_DEPRECATED,
            # An argument a GPU rejects (a link it does not have, a struct version it does not
            # know) will not become valid on the next read either.
            nv.NVML_ERROR_INVALID_ARGUMENT, nv.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        }
        #: Skipped too, but asked again after a while: these can be true only for now.
        self.skip_for_now = {nv.NVML_ERROR_NOT_FOUND, nv.NVML_ERROR_NO_DATA, nv.NVML_ERROR_NOT_READY}
        self.device_gone = {
            nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_RESET_REQUIRED, nv.NVML_ERROR_GPU_NOT_FOUND,
            nv.NVML_ERROR_UNKNOWN,
        }
        self.driver_gone = {
            nv.NVML_ERROR_DRIVER_NOT_LOADED, nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH, nv.NVML_ERROR_UNINITIALIZED,
        }

    def classify(self, code: int) -> ErrorClass:
        if code in self.skip_forever or code in self.skip_for_now:
            return ErrorClass.SKIP
        if code in self.device_gone:
            return ErrorClass.DEVICE_GONE
        if code in self.driver_gone:
            return ErrorClass.DRIVER_GONE
        return ErrorClass.FAILED

    def name(self, code: int) -> str:
        return self.names.get(code, f"ERROR_{code}")


def classify(error: BaseException, nv) -> ErrorClass:
    """The class of an NVMLError of the pynvml module ``nv`` (or of the library-mismatch
    error pynvml raises for an unversioned call the installed driver lacks)."""
    if isinstance(error, nv.NVMLLibraryMismatchError):
        return ErrorClass.SKIP
    return Classifier(nv).classify(error.value)


def call_name(key: str) -> str:
    """The call a key names, without the link, peer or MIG qualifier after the colon:
    what errors are counted and logged by, so that label values stay few."""
    return key.split(":", 1)[0]
