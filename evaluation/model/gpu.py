"""GPUs: kernel residency, the driver's utilization samples, GPM, PCIe and NVLink bytes,
clocks, power, temperature and the clock-event reasons.

- NVML utilization (nvmlUtilization_t, nvmlDeviceGetSamples) is the percent of each sample
  period during which one or more kernels was executing; the period is between 1 s and 1/6 s
  depending on the product. These GPUs take the documented best case, 1/6 s, each with its
  own phase. A sample is stamped at the end of its period and is an integer percent. A copy
  engine moving bytes runs no kernel, so a GPU that only copies reads 0 %; a kernel that
  spins (an NCCL kernel waiting for its peers) counts as executing (cupy#3557).
- GPM (Hopper and newer; NVML GPM Enums): SM_UTIL is the percentage of SMs that were busy,
  DRAM_BW_UTIL the share of peak DRAM bandwidth, over the interval between two samples; the
  metrics are valid at >= 100 ms (NVIDIA/DCGM#310), which is the fast tier's interval. An NCCL
  kernel occupies one SM per channel, exclusively (NVIDIA/nccl#689, #1656), so a GPU waiting
  in a collective shows SM activity of about channels / SMs.
- PCIe copies move at the trained link's rate (generation x width) times the DMA
  efficiency; from pageable memory the driver stages through a pinned buffer (CUDA Runtime
  API, "API synchronization behavior"), at a lower rate.
- Power follows the work's intensity and the clock (about f^2.5); with a power limit below
  what the work draws, the driver lowers clocks until the draw fits (SwPowerCap: "the clocks
  have been optimized to ensure not to exceed currently set power limits"). Temperature
  follows the power through the cooling's thermal resistance with a time constant; above the
  slowdown temperature the clocks come down (SwThermalSlowdown). An external power brake
  (the chassis or power supply asserting it) halves the clocks at once
  (HwPowerBrakeSlowdown: "reducing the core clocks by a factor of 2 or more"). Kernels slow
  with the clock by how compute-bound they are.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: PCIe bytes per second per lane after line encoding, by generation
PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9}
#: share of the link a DMA copy reaches (TLP headers, flow control): pinned / pageable
PINNED_EFFICIENCY = 0.8
PAGEABLE_EFFICIENCY = 0.42

GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
#: the clock an asserted power brake leaves, as a share of the maximum
POWER_BRAKE_FACTOR = 0.5


@dataclass(frozen=True)
class GpuSpec:
    name: str
    architecture: str
    gpm: bool
    sms: int
    max_sm_hz: float
    idle_sm_hz: float
    memory_hz: float
    default_power_limit: float
    idle_watts: float
    #: draw at full clock and full intensity
    full_watts: float
    memory_bytes: float
    pcie_generation: int
    pcie_width: int
    nvlinks: int
    sample_period: float
    slowdown_celsius: float
    hw_slowdown_celsius: float
    #: NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES offered by the driver for this product
    pcie_counters: bool = True


H100_SXM = GpuSpec("NVIDIA H100 80GB HBM3", "hopper", True, 132, 1980e6, 345e6, 2619e6, 700.0, 72.0, 690.0,
                   81559 * 2**20, 5, 16, 18, 1 / 6, 87.0, 92.0)
A100_SXM = GpuSpec("NVIDIA A100-SXM4-80GB", "ampere", False, 108, 1410e6, 210e6, 1593e6, 400.0, 56.0, 392.0,
                   81920 * 2**20, 4, 16, 12, 1 / 6, 86.0, 92.0)
L40S = GpuSpec("NVIDIA L40S", "ada", False, 142, 2520e6, 210e6, 9001e6, 350.0, 34.0, 340.0,
               46068 * 2**20, 4, 16, 0, 1 / 6, 88.0, 93.0, pcie_counters=False)


class Kernel:
    """A stretch of back-to-back kernels on one stream: ``work`` seconds at full clock."""

    __slots__ = ("work", "left", "sm", "occ", "tensor", "dram", "power", "sens", "done", "finished", "tag", "after")

    def __init__(self, work: float, sm: float, occ: float, tensor: float, dram: float, power: float,
                 sens: float = 1.0, tag: str = "compute", after: "Copy | None" = None) -> None:
        self.work = work
        self.left = work
        self.sm = sm
        self.occ = occ
        self.tensor = tensor
        self.dram = dram
        self.power = power
        #: how much the kernels slow with the clock (1 compute-bound, ~0.3 memory-bound)
        self.sens = sens
        self.done = False
        self.finished = 0.0
        self.tag = tag
        #: a copy the kernel is queued behind on its stream: it starts when the copy ends
        self.after = after


class Resident:
    """A kernel that stays resident until told otherwise: an NCCL collective, which spins
    until its peers arrive and then moves data. ``end`` None while it waits."""

    __slots__ = ("start", "end", "sm", "dram", "power", "tag")

    def __init__(self, start: float, sm: float, dram: float, power: float, tag: str = "nccl") -> None:
        self.start = start
        self.end: float | None = None
        self.sm = sm
        self.dram = dram
        self.power = power
        self.tag = tag


class Copy:
    __slots__ = ("nbytes", "left", "direction", "efficiency", "done", "finished", "tag")

    def __init__(self, nbytes: float, direction: str, pinned: bool, tag: str = "copy") -> None:
        self.nbytes = nbytes
        self.left = float(nbytes)
        self.direction = direction  # "h2d" (GPU receives: rx) or "d2h" (tx)
        self.efficiency = PINNED_EFFICIENCY if pinned else PAGEABLE_EFFICIENCY
        self.done = False
        self.finished = 0.0
        self.tag = tag


class Gpu:
    def __init__(self, index: int, spec: GpuSpec, uuid: str, pci_bus_id: str, numa_node: int, rng,
                 uptime: float, ambient: float = 30.0, thermal_resistance: float | None = None,
                 power_limit: float | None = None, link: tuple[int, int] | None = None) -> None:
        self.index = index
        self.spec = spec
        self.uuid = uuid
        self.pci_bus_id = pci_bus_id
        self.numa_node = numa_node
        self.rng = rng
        self.ambient = ambient
        # sized so that a busy GPU with good airflow settles near 65 C
        self.r_thermal = thermal_resistance if thermal_resistance is not None else (65.0 - ambient) / spec.full_watts
        self.tau_thermal = 20.0
        self.power_limit = power_limit if power_limit is not None else spec.default_power_limit
        gen, width = link if link is not None else (spec.pcie_generation, spec.pcie_width)
        self.link_generation = gen
        self.link_width = width
        self.temperature = ambient + 8.0
        self.f_power = 1.0
        self.f_thermal = 1.0
        #: an external power brake asserted on the board
        self.power_brake = False
        self.intensity_avg = 0.0
        self.power = spec.idle_watts
        self.energy = uptime * spec.idle_watts * 1.5
        self.violation = {"power": 0.0, "thermal": 0.0}
        self.pcie = {"tx": uptime * 1e6, "rx": uptime * 4e6}
        self.pcie_replays = 0.0
        self.replay_rate = 0.0
        self.nvlink = [[uptime * 1e7, uptime * 1e7] for _ in range(spec.nvlinks)]
        self.pcie_now = (0.0, 0.0)
        self.stream: deque[Kernel] = deque()
        self.resident: Resident | None = None
        self.copies: list[Copy] = []
        self.processes: dict[int, float] = {}
        self.reserved_memory = 600 * 2**20
        # NVML sample buffer
        self.sample_period = spec.sample_period
        self._sample_end = rng.uniform(0, self.sample_period)
        self._bucket_busy = 0.0
        self._bucket_mem = 0.0
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=400)
        #: samples produced so far (the deque keeps only the latest)
        self.sample_count = 0
        # GPM accumulators since the last GPM read
        self._gpm = [0.0] * 6  # seconds, sm, occ, tensor, dram, busy
        self._gpm_bytes = [0.0, 0.0, 0.0, 0.0]  # pcie tx, rx, nvlink tx, rx
        self._gpm_primed = False
        # recent activity: last time a kernel ran, EMA of busy for process utilization
        self.last_busy = -1e9
        self.busy_ema = 0.0
        self.reasons = GPU_IDLE
        # what the last step did, for the truth's physics
        self.step_busy = 0.0
        self.step_sm = 0.0
        self.step_tags: dict[str, float] = {}

    # -- work ------------------------------------------------------------------------------
    def launch(self, kernel: Kernel) -> Kernel:
        self.stream.append(kernel)
        return kernel

    def copy(self, c: Copy) -> Copy:
        self.copies.append(c)
        return c

    def reside(self, r: Resident) -> Resident:
        self.resident = r
        return r

    def nvlink_traffic(self, nbytes_each_way: float) -> None:
        if not self.nvlink:
            return
        per = nbytes_each_way / len(self.nvlink)
        for cell in self.nvlink:
            cell[0] += per
            cell[1] += per
        self._gpm_bytes[2] += nbytes_each_way
        self._gpm_bytes[3] += nbytes_each_way

    @property
    def clock_factor(self) -> float:
        """The SM clock as a share of its maximum: the lowest that power, heat or a brake allow."""
        return min(self.f_power, self.f_thermal, POWER_BRAKE_FACTOR if self.power_brake else 1.0)

    @property
    def link_rate(self) -> float:
        return PCIE_LANE_BYTES[self.link_generation] * self.link_width

    # -- one step --------------------------------------------------------------------------
    def step(self, t: float, dt: float) -> None:
        f = self.clock_factor
        busy = sm = occ = tensor = dram = energy_int = 0.0
        tags: dict[str, float] = {}
        # Copies first: a kernel queued behind one starts when it ends, within this step.
        copy_busy = 0.0
        moved_now = {"tx": 0.0, "rx": 0.0}
        for direction in ("h2d", "d2h"):
            active = [c for c in self.copies if not c.done and c.direction == direction]
            if not active:
                continue
            # The copies of one direction share the link.
            share = self.link_rate / len(active)
            side = "rx" if direction == "h2d" else "tx"
            for c in active:
                rate = share * c.efficiency
                moved = min(c.left, rate * dt)
                c.left -= moved
                self.pcie[side] += moved
                moved_now[side] += moved
                self._gpm_bytes[0 if side == "tx" else 1] += moved
                copy_busy = max(copy_busy, moved / rate)
                if c.left <= 1e-6:
                    c.done = True
                    c.finished = t + moved / rate
        if self.copies:
            self.copies = [c for c in self.copies if not c.done]
            tags["copy"] = copy_busy
        remaining = dt
        while self.stream and remaining > 1e-12:
            k = self.stream[0]
            if k.after is not None:
                if not k.after.done:
                    break
                remaining = min(remaining, t + dt - k.after.finished)
                k.after = None
                if remaining <= 1e-12:
                    break
            rate = f ** k.sens
            run = min(k.left / rate, remaining)
            k.left -= run * rate
            busy += run
            sm += run * k.sm
            occ += run * k.occ
            tensor += run * k.tensor
            dram += run * k.dram
            energy_int += run * k.power
            tags[k.tag] = tags.get(k.tag, 0.0) + run
            remaining -= run
            if k.left <= 1e-12:
                k.done = True
                k.finished = t + dt - remaining
                self.stream.popleft()
        r = self.resident
        if r is not None:
            start = max(t, r.start)
            end = t + dt if r.end is None else min(t + dt, r.end)
            span = max(0.0, end - start)
            if span > 0:
                # The resident kernel overlaps the compute stream's kernels: busy is the union.
                busy = max(busy, span)
                sm += span * r.sm
                dram += span * r.dram
                occ += span * r.sm * 0.25
                energy_int += span * r.power
                tags[r.tag] = tags.get(r.tag, 0.0) + span
            if r.end is not None and r.end <= t + dt:
                self.resident = None
        busy = min(busy, dt)
        sm = min(sm, dt)
        dram = min(dram, dt)
        # background PCIe traffic of the driver and doorbells
        background_rx = 8e5 * dt + (4e6 * dt if busy > 0 else 0.0)
        self.pcie["tx"] += 2e5 * dt
        self.pcie["rx"] += background_rx
        #: bytes per second over this step, what nvmlDeviceGetPcieThroughput's 20 ms sample shows
        self.pcie_now = ((moved_now["tx"] + 2e5 * dt) / dt, (moved_now["rx"] + background_rx) / dt)
        mem = min(dt, dram * 1.3 + copy_busy * 0.3)
        # power, temperature, clocks
        intensity = energy_int / dt
        self.intensity_avg += (intensity - self.intensity_avg) * min(1.0, dt / 0.05)
        spec = self.spec
        dynamic = spec.full_watts - spec.idle_watts
        self.power = spec.idle_watts + dynamic * intensity * f ** 2.5 + 30.0 * (copy_busy / dt)
        if busy <= 0.0 and copy_busy <= 0.0:
            self.power = spec.idle_watts
        self.energy += self.power * dt
        want = spec.idle_watts + dynamic * self.intensity_avg
        if self.intensity_avg > 0.02 and want > self.power_limit:
            self.f_power = max(0.3, ((self.power_limit - spec.idle_watts) / (dynamic * self.intensity_avg)) ** 0.4)
        else:
            self.f_power = 1.0
        target = self.ambient + self.r_thermal * self.power
        self.temperature += (target - self.temperature) * (dt / self.tau_thermal)
        thermal_target = 1.0 - 0.08 * max(0.0, self.temperature - (spec.slowdown_celsius - 2.0))
        thermal_target = min(1.0, max(0.3, thermal_target))
        self.f_thermal += (thermal_target - self.f_thermal) * min(1.0, dt / 0.5)
        if busy > 0:
            self.last_busy = t + dt
            if self.f_power < 0.995:
                self.violation["power"] += dt
            if self.f_thermal < 0.995:
                self.violation["thermal"] += dt
        self.busy_ema += (busy / dt - self.busy_ema) * min(1.0, dt / 1.0)
        reasons = 0
        if t + dt - self.last_busy > 0.1:
            reasons |= GPU_IDLE
        else:
            if self.f_power < 0.995:
                reasons |= SW_POWER_CAP
            if self.f_thermal < 0.995:
                reasons |= SW_THERMAL
        if self.temperature >= spec.hw_slowdown_celsius:
            reasons |= HW_SLOWDOWN | HW_THERMAL
        if self.power_brake:
            reasons |= HW_SLOWDOWN | HW_POWER_BRAKE
        self.reasons = reasons
        self.pcie_replays += self.replay_rate * dt
        # driver utilization samples, stamped at the end of their period
        end = t + dt
        if end < self._sample_end:
            self._bucket_busy += busy
            self._bucket_mem += mem
        else:
            before = (self._sample_end - t) / dt
            self._bucket_busy += busy * before
            self._bucket_mem += mem * before
            p = self.sample_period
            self.samples.append((self._sample_end, min(100, int(100.0 * self._bucket_busy / p + 0.5)) / 100.0,
                                 min(100, int(100.0 * self._bucket_mem / p + 0.5)) / 100.0))
            self.sample_count += 1
            self._sample_end += p
            self._bucket_busy = busy * (1.0 - before)
            self._bucket_mem = mem * (1.0 - before)
        g = self._gpm
        g[0] += dt
        g[1] += sm
        g[2] += occ
        g[3] += tensor
        g[4] += dram
        g[5] += busy
        self.step_busy = busy
        self.step_sm = sm
        self.step_tags = tags

    # -- reads -----------------------------------------------------------------------------
    def gpm_read(self) -> dict[str, float] | None:
        """GPM metrics since the previous read; {} on the first (two samples are needed)."""
        if not self.spec.gpm:
            return None
        g, b = self._gpm, self._gpm_bytes
        span = g[0]
        out: dict[str, float] = {}
        if self._gpm_primed and span > 0:
            out = {"sm_active": round(g[1] / span, 4), "sm_occupancy": round(g[2] / span, 4),
                   "tensor_active": round(g[3] / span, 4), "dram_active": round(g[4] / span, 4),
                   "pcie_tx_bytes_per_second": round(b[0] / span, 1), "pcie_rx_bytes_per_second": round(b[1] / span, 1),
                   "nvlink_tx_bytes_per_second": round(b[2] / span, 1), "nvlink_rx_bytes_per_second": round(b[3] / span, 1)}
        self._gpm_primed = True
        self._gpm = [0.0] * 6
        self._gpm_bytes = [0.0, 0.0, 0.0, 0.0]
        return out

    def sm_clock(self, t: float) -> float:
        if t - self.last_busy > 1.0:
            return self.spec.idle_sm_hz
        return round(self.spec.max_sm_hz * self.clock_factor / 15e6) * 15e6

    def samples_since(self, count: int) -> list[tuple[float, float, float]]:
        """The samples produced after the first ``count``."""
        n = self.sample_count - count
        if n <= 0:
            return []
        return list(self.samples)[-n:] if n < len(self.samples) else list(self.samples)

    def memory_used(self) -> float:
        return self.reserved_memory + sum(self.processes.values())
