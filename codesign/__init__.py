"""codesign: an end-to-end datacenter co-design simulator for large language models.

The public Python API::

    from codesign import simulate
    report = simulate(model="gpt3-175b", gpu="h100", num_gpus=1024, tp=8, pp=8)
    print(report.step_time_s, report.mfu)

Without a layout (``tp``, ``pp``, ``cp``, ``ep``, ``dp``, ``vpp``), ``simulate`` chooses the
fastest feasible plan as ``codesign simulate`` does (:func:`codesign.search.choose.simulate`);
:func:`codesign.api.simulate` simulates exactly the run it is given.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "simulate"]


def __getattr__(name: str) -> Any:
    """Import the API lazily so that ``import codesign.specs`` stays light."""
    if name == "simulate":
        from codesign.search.choose import simulate

        return simulate
    raise AttributeError(name)
