"""Facts that more than one part of gpuwait relies on, declared once.

Each is a property of the hardware, the driver or gpuwait's own vocabulary, not a tuning
knob: the sources are cited next to them.
"""

from __future__ import annotations

# -- the verdict's vocabulary ---------------------------------------------------------------

#: Every cause a GPU's idle time is attributed to, and a verdict can name (A14).
CAUSES = ("data_pipeline", "storage", "host_transfer", "network", "sync", "insufficient_work", "throttled", "none")
#: Causes with evidence of their own, in the order an idle sample is tested against them.
#: Host-side starvation comes first (it is upstream of everything), then the PCIe copy,
#: then a peer still computing (sync), then the network the collective runs over.
EVIDENCE_ORDER = ("storage", "data_pipeline", "host_transfer", "sync", "network")
#: Causes that are a wait something upstream of the GPU can be fixed for (not "throttled",
#: a busy GPU slowed down, nor "none").
WAIT_CAUSES = ("data_pipeline", "storage", "host_transfer", "network", "sync", "insufficient_work")

# -- PCIe ------------------------------------------------------------------------------------

#: Usable bytes per second per lane and direction, by PCIe generation: the transfer rate
#: less the line encoding, per the PCI Express Base Specification (rev. 6.0, chapter 4):
#: 2.5 and 5.0 GT/s use 8b/10b, 8.0, 16.0 and 32.0 GT/s use 128b/130b, and 64.0 GT/s
#: (PAM4) sends 256-byte FLITs of which 242 bytes carry TLPs and DLLPs (the other 14 are
#: CRC and FEC). Protocol overhead above that (TLP headers, flow control) is not deducted:
#: it depends on the payload size, and this is the ceiling a copy is compared against.
PCIE_TRANSFERS_PER_SECOND = {1: 2.5e9, 2: 5.0e9, 3: 8.0e9, 4: 16.0e9, 5: 32.0e9, 6: 64.0e9}
PCIE_ENCODING_EFFICIENCY = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
PCIE_LANE_BYTES_PER_SECOND = {
    generation: rate * PCIE_ENCODING_EFFICIENCY[generation] / 8
    for generation, rate in PCIE_TRANSFERS_PER_SECOND.items()
}


def pcie_link_capacity(generation: int | None, width: int | None) -> float | None:
    """Bytes per second one direction of a link carries at its trained generation and width;
    None for a generation or width that is unknown (or a generation this table predates)."""
    per_lane = PCIE_LANE_BYTES_PER_SECOND.get(generation or 0)
    if per_lane is None or not width or width <= 0:
        return None
    return per_lane * width


# -- NVML clock-event reasons ----------------------------------------------------------------

#: Bits of nvmlDeviceGetCurrentClocksEventReasons (nvmlClocksEventReason* in nvml.h), named
#: as gpuwait labels them. The values are the driver's ABI; a test holds them to pynvml's.
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
#: The reasons that hold a GPU below the clocks it asked for: power cap, hardware slowdown,
#: software and hardware thermal slowdown, power brake (NVML's nvmlClocksEventReason docs;
#: idle, application clocks, sync boost and display clocks are the GPU's own choice).
CLOCK_LIMIT_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
CLOCK_REASON_BITS = {name: bit for bit, name in CLOCK_EVENT_REASONS}
CLOCK_LIMIT_BITS = sum(CLOCK_REASON_BITS[name] for name in CLOCK_LIMIT_REASONS)
