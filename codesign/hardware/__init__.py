"""Hardware cost models: operator -> seconds on one GPU."""

from codesign.hardware.compute import ComputeModel

__all__ = ["ComputeModel"]
