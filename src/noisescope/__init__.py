"""noisescope: measure operating-system noise on Linux CPUs, explain where it
comes from, compare configurations and predict what it costs at scale.

    >>> import noisescope
    >>> bundle = noisescope.load("noisescope-myhost-20261130T063836Z")
    >>> bundle.summaries["detour"][0]["noise_pct"]
    >>> bundle.detours.where(cpu=1).duration_ns
"""

__version__ = "0.1.0"


def load(path):
    """Open a result bundle; see noisescope.bundle.Bundle."""
    from .bundle import load as _load

    return _load(path)


__all__ = ["__version__", "load"]
