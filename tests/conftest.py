"""Shared test fixtures.

Tests run against the installed package (`pip install .`), which proves the
C extension ships; the header line says which copy was imported.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import noisescope

FIXTURES = Path(__file__).parent / "fixtures"
HOSTS = FIXTURES / "hosts"


def pytest_configure(config):
    """The signals the interrupt tests send, at their defaults for every child:
    processes inherit an ignored signal, and a suite started in the background
    by a script (`cmd &`: SIGINT and SIGQUIT ignored) or under nohup (SIGHUP)
    would leave every noisescope it starts deaf to them (as it should be: it
    keeps an ignored signal ignored), failing those tests for the wrong reason."""
    for number, default in ((signal.SIGINT, signal.default_int_handler),
                            (signal.SIGQUIT, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL)):
        if signal.getsignal(number) is signal.SIG_IGN:
            signal.signal(number, default)


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
