"""Units: SI inside the simulator; every conversion lives here.

Internally time is seconds, data is bytes, bandwidth is bytes/second and compute is FLOP/s.
Catalog fields carry their unit in their name (``hbm_bandwidth_TBps``, ``nic_bandwidth_Gbps``).
"""

MB = 1e6
GB = 1e9
TB = 1e12
MiB = 2.0**20
GiB = 2.0**30

US = 1e-6  # one microsecond in seconds

TFLOPS = 1e12


def gbps_to_bytes_per_s(gigabits_per_s: float) -> float:
    """Convert a link rate in Gb/s (decimal gigabits) to bytes/s."""
    return gigabits_per_s * 1e9 / 8.0


def tBps_to_bytes_per_s(terabytes_per_s: float) -> float:
    """Convert TB/s (decimal terabytes) to bytes/s."""
    return terabytes_per_s * TB


def us_to_s(microseconds: float) -> float:
    """Convert microseconds to seconds."""
    return microseconds * US

