"""What the workload source's Reading holds: the records of the spool, each with its owner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    pid: int
    starttime: int
    instance: int
    kind: str
    #: -1 when the process did not say (no RANK in its environment)
    rank: int
    job: str
    #: CLOCK_MONOTONIC seconds when the record was written
    at: float
    interval: float
    data_seconds: float
    compute_seconds: float
    comm_seconds: float
    steps: int
    samples: int
    requests: int


@dataclass(frozen=True, slots=True)
class OwnedRecord:
    record: WorkloadRecord
    #: the owner id of the process (gpuwait.owners), "" when it could not be read
    owner: str

    @property
    def key(self) -> str:
        return f"{self.record.pid}-{self.record.starttime}-{self.record.instance}"


@dataclass(frozen=True, slots=True)
class WorkloadData:
    records: tuple[OwnedRecord, ...] = ()
