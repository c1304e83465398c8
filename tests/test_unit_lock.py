"""Two processes on one experiment unit (issue 33 item 6): the second waits for the first, told who holds
the unit, instead of deleting its run folder or appending to its logs."""
from __future__ import annotations

import subprocess
import sys
import time

from seed_train.experiment import unit_lock

HOLD = """
import sys, time
from pathlib import Path
from seed_train.experiment import unit_lock
with unit_lock(Path(sys.argv[1]), lambda holder: None):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_process_waits_for_the_unit_and_is_told_who_holds_it(tmp_path):
    folder = tmp_path / "seed0" / "seed"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        told: list[str] = []
        t0 = time.perf_counter()
        with unit_lock(folder, told.append):
            waited = time.perf_counter() - t0
        assert told == [f"pid {holder.pid}"] and waited >= 0.5  # it waited for the holder to finish
    finally:
        holder.wait(timeout=30)
    told.clear()
    with unit_lock(folder, told.append):  # free again: no wait, nobody named
        pass
    assert told == []
