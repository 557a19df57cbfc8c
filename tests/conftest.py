"""Shared test fixtures.

Tests run against the installed package (`pip install .`), which proves the
C extension ships; the header line says which copy was imported.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import noisescope

FIXTURES = Path(__file__).parent / "fixtures"
HOSTS = FIXTURES / "hosts"


def pytest_report_header(config):
    return f"noisescope {noisescope.__version__} from {Path(noisescope.__file__).parent}"


@pytest.fixture(scope="session")
def live_facts():
    from noisescope.host import live_host_facts

    return live_host_facts()


@pytest.fixture(scope="session")
def measured_cpu(live_facts):
    """The CPU the ground-truth tests measure: the last one we may use."""
    from noisescope.host import default_cpus

    return default_cpus(live_facts)[-1]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
