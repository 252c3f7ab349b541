"""Units: SI inside the simulator; every conversion lives here.

Internally time is seconds, data is bytes, bandwidth is bytes/second and compute is FLOP/s.
Catalog fields carry their unit in their name (``hbm_bandwidth_TBps``, ``nic_bandwidth_Gbps``).
"""

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30

US = 1e-6  # one microsecond in seconds
NS = 1e-9
MS = 1e-3

TFLOPS = 1e12


def gbps_to_bytes_per_s(gigabits_per_s: float) -> float:
    """Convert a link rate in Gb/s (decimal gigabits) to bytes/s."""
    return gigabits_per_s * 1e9 / 8.0


def gBps_to_bytes_per_s(gigabytes_per_s: float) -> float:
    """Convert GB/s (decimal gigabytes) to bytes/s."""
    return gigabytes_per_s * GB


def tBps_to_bytes_per_s(terabytes_per_s: float) -> float:
    """Convert TB/s (decimal terabytes) to bytes/s."""
    return terabytes_per_s * TB


def us_to_s(microseconds: float) -> float:
    """Convert microseconds to seconds."""
    return microseconds * US


DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp4": 0.5,
}
