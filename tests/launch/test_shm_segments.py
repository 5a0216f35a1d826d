"""MPICH shared-memory segments that killed jobs left in /dev/shm are removed before a
rank of hpcdist run starts: only this user's, made before the attempt started, that no
live process maps or holds open."""
import os
import subprocess
import sys
import time

import pytest

from hpcdist.launch.shm_segments import remove_stale_segments, stale_segments
from tests.helpers import subprocess_env

_HOLD = """
import mmap, sys, time
handle = open(sys.argv[1], "r+b")
view = mmap.mmap(handle.fileno(), 4096)
if sys.argv[2] == "map":
    handle.close()            # mapped only, as MPICH keeps its segment
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def holders():
    started = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _segment(directory, name):
    path = directory / name
    path.write_bytes(b"\0" * 4096)
    return str(path)


def _hold(path, how, holders):
    process = subprocess.Popen([sys.executable, "-c", _HOLD, path, how],
                               stdout=subprocess.PIPE, text=True)
    holders.append(process)
    assert process.stdout.readline().strip() == "ready"


def test_only_unused_segments_made_before_the_start_are_stale(tmp_path, holders):
    stale = _segment(tmp_path, "mpich_shm_1a2b3c_0")
    stale_vci = _segment(tmp_path, "mpich_vci_1a2b3c_0")
    mapped = _segment(tmp_path, "mpich_shm_4d5e_0")
    opened = _segment(tmp_path, "mpich_shm_4d5e_1")
    other = _segment(tmp_path, "psm2_shm_1")
    _hold(mapped, "map", holders)
    _hold(opened, "open", holders)
    time.sleep(0.05)
    started = time.time()
    time.sleep(0.05)
    new = _segment(tmp_path, "mpich_shm_99_0")  # the starting job's own
    assert sorted(stale_segments(str(tmp_path), started)) == sorted([stale, stale_vci])
    assert sorted(remove_stale_segments(str(tmp_path), started)) == sorted([stale, stale_vci])
    assert sorted(os.listdir(tmp_path)) == sorted(
        os.path.basename(p) for p in (mapped, opened, other, new))


def test_no_segment_no_scan(tmp_path):
    assert stale_segments(str(tmp_path / "missing")) == []
    assert remove_stale_segments(str(tmp_path)) == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_hpcdist_run_removes_what_a_killed_job_left(tmp_path):
    leftover = "/dev/shm/mpich_shm_hpcdisttest%d_0" % os.getpid()  # no MPICH world id
    with open(leftover, "wb") as handle:
        handle.write(b"\0" * 4096)
    try:
        done = subprocess.run([sys.executable, "-m", "hpcdist.cli.main", "run", "-n", "1", "--",
                               sys.executable, "-c", "print('rank ran')"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env=subprocess_env(), stdin=subprocess.DEVNULL)
        assert done.returncode == 0 and "rank ran" in done.stdout, done.stdout + done.stderr
        assert not os.path.exists(leftover)
    finally:
        if os.path.exists(leftover):
            os.unlink(leftover)
