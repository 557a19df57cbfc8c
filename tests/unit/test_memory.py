"""The process's allocator policy: large blocks handed back when freed."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

import noisescope

# A fresh process (mallopt is process-wide): it frees an 8 MB array, which by
# default raises glibc's mmap threshold to 8 MB, then allocates 1 MB and says
# whether that block was mapped on its own (given back when freed) or came
# from the heap.
CHILD = """
import ctypes, sys
import numpy as np
from noisescope.memory import hand_back_large_allocations

class MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo
large = np.ones(8 << 20, np.uint8)
del large
if sys.argv[1] == "policy":
    hand_back_large_allocations()
mapped = libc.mallinfo2().hblks
block = np.ones(1 << 20, np.uint8)
print(libc.mallinfo2().hblks - mapped)
"""


def mapped_blocks_for_one_array(policy: bool) -> int:
    # glibc's defaults (no tunables), and the noisescope under test
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("MALLOC_") and name != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = str(Path(noisescope.__file__).parent.parent)
    done = subprocess.run([sys.executable, "-c", CHILD, "policy" if policy else "default"],
                          capture_output=True, text=True, check=True, env=env)
    return int(done.stdout)


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc >= 2.33")
def test_a_large_array_freed_early_does_not_send_later_ones_to_the_heap():
    # without the policy the threshold follows the freed 8 MB: the 1 MB block is in the heap
    assert mapped_blocks_for_one_array(policy=False) == 0
    assert mapped_blocks_for_one_array(policy=True) == 1


def test_reading_a_spooled_table_hands_the_freed_heap_back_every_row_group(monkeypatch):
    """Reading (or writing) a spooled table batch by batch gives glibc's freed
    heap back every ROW_GROUP_ROWS rows: about once per row group, never per
    batch (a trim costs milliseconds), and not for a table shorter than one."""
    import numpy as np

    from noisescope import tables
    from noisescope.tables import ROW_GROUP_ROWS, SpooledTable, Table

    handed_back = []
    monkeypatch.setattr(tables, "release_free_memory", lambda: handed_back.append(True))
    batch_rows = ROW_GROUP_ROWS // 8

    def spooled(batches: int) -> SpooledTable:
        def source():
            for k in range(batches):
                yield Table({"cpu": np.zeros(batch_rows, np.int32),
                             "start_ns": np.arange(batch_rows, dtype=np.int64) + k * batch_rows})
        empty = Table({"cpu": np.zeros(0, np.int32), "start_ns": np.zeros(0, np.int64)})
        return SpooledTable.of(Path("unused.parquet"), empty, [(0, batches * batch_rows, source)])

    assert sum(batch.rows for batch in spooled(8 * 3).batches(0)) == 3 * ROW_GROUP_ROWS
    assert len(handed_back) == 3
    handed_back.clear()
    groups = list(spooled(8 * 3 + 4)._row_groups(range(1)))
    assert [g.num_rows for g in groups] == [ROW_GROUP_ROWS] * 3 + [ROW_GROUP_ROWS // 2]
    assert len(handed_back) == 3
    handed_back.clear()
    assert sum(batch.rows for batch in spooled(7).batches()) == 7 * batch_rows
    assert not handed_back
