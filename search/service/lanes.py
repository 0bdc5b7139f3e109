"""The web app's lanes of work: what a person waits for goes before what fills a cache.

`wherein serve` answers many requests at once on a few cores. A search whose text vectors
are known costs tens of ms of CPU; a thumbnail or preview is a photo decode, a mask a
vision pass. ServeSession gives each its own threads, so that a search never waits in a
queue behind them:

- searches: their own pool, each search on one thread: FAISS's OpenMP team splits one
  query's scan between threads, and among concurrent requests its spin-waiting cost more
  than it saved (a 1,000-vector scan: 0.07 ms of CPU alone, 2.9 ms with a team of 2, on 2
  busy cores; 200,000: 29 ms against 156 ms). Concurrent requests are the parallelism;
- a text the Searcher has not encoded lately: one encoding thread (the text tower runs
  one text at a time), so that searches whose texts are known never wait behind it;
- decoding (thumbnails, previews) and masks: their pool and their worker, at a lower CPU
  priority (``background``). When the cores are busy the scheduler gives a search's
  thread the CPU first; the background work still uses every idle moment.

A thread's priority is its nice value, which Linux keeps per thread (threads a background
thread starts, such as an interpreter's worker pool, inherit it). Elsewhere
``setpriority`` on a thread id would renice the whole process, so nothing changes there.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

# 10 of nice 0's weight 1024 is 110 (Linux CFS): ~10% of a busy core when a search wants it.
BACKGROUND_NICE = 10
MAX_NICE = 19


def background() -> bool:
    """Lower the calling thread's CPU priority by BACKGROUND_NICE (a pool's initializer).
    True when lowered; False where threads have no priority of their own (not Linux) or
    the system refused."""
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    with suppress(OSError):
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICE, now + BACKGROUND_NICE))
        return True
    return False


def thread_nice() -> int | None:
    """The calling thread's nice value (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def one_thread_searches() -> None:
    """Searches on the calling thread run FAISS single-threaded (OpenMP keeps the team size
    per thread: other threads keep theirs). A search pool's initializer."""
    import faiss

    faiss.omp_set_num_threads(1)


def search_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool whose threads each run one search at a time on one core."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=one_thread_searches)


def background_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool whose threads run at background priority."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=background)
