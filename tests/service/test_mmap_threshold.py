"""A service process pins glibc's mmap threshold (`runtime.pin_mmap_threshold`, called by
`give_back_memory`): a large block freed must not raise it, so later large blocks are still
mapped on their own and go back to the system when freed. Without the pin, the first snapshot's
multi-MB buffers raised it for good and a service's RSS after a long history grew with it
(docs/performance.md, "RSS after the run: what grew")."""

from __future__ import annotations

import subprocess
import sys

import pytest

# In a child process: the pin is for the life of a process, and says nothing about this one.
PROBE = """
import ctypes, sys
from services.common.runtime import pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "pinned" and not pin_mmap_threshold():
    sys.exit(3)
libc.free(libc.malloc(8 << 20))  # a snapshot-sized buffer, freed (glibc's dynamic threshold rises to it)
before = libc.mallinfo2().hblkhd
block = libc.malloc(1 << 20)  # a 1 MB one after it: mapped on its own, or in the heap?
print(libc.mallinfo2().hblkhd - before >= 1 << 20)
libc.free(block)
"""


def mapped_alone(mode: str) -> bool:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60)
    if done.returncode == 3:
        pytest.skip("no glibc mallopt here")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_freed_large_block_does_not_raise_the_mmap_threshold() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).mallinfo2  # noqa: B018 (glibc 2.33+)
    except AttributeError:
        pytest.skip("no mallinfo2 (not glibc 2.33+)")
    assert not mapped_alone("dynamic")  # glibc's own rule: the 1 MB block lands in the heap
    assert mapped_alone("pinned")
