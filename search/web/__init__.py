"""`wherein serve`: a local web app (FastAPI) over an index: search, browse, see the masks.

app.py builds the FastAPI app; routes/ holds its JSON API, one APIRouter per concern,
over the shared WebState of state.py; responses.py and hosts.py give every error one
JSON body and refuse foreign Host headers. files.py reads an indexed image only while
it is still the indexed content; masks.py keeps its results under INDEX/cache, beside
search/cache's thumbnails (masks are made on runner.py's one thread, asked-for ones
first); schemas.py ties the API to schemas/*.schema.json.
"""

# Shared by the app and `wherein serve`, whose import must stay light (no FastAPI).
DEFAULT_PREFETCH_MASKS = 4  # about the first row of hits a person sees
MALLOC_ARENAS = 2  # glibc's default is 8 per core: each thread's freed heap stays in its arena
MMAP_THRESHOLD = 1 << 20  # blocks this large (decoded photos, tensors) go back to the OS on free


def bound_malloc() -> bool:
    """Bound what glibc's malloc keeps of freed memory in this (server) process, before its
    threads start, as MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=1048576 would: with an
    arena per busy thread, and a threshold that rises to 32 MB once a large block is
    freed, the memory of finished requests (a decoded photo, a search's tensors) stays
    with the process and its RSS grows with the number of clients. A MALLOC_ARENA_MAX
    set by the user wins; elsewhere than glibc, nothing happens. True when set."""
    import ctypes
    import os

    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    # -8: M_ARENA_MAX; -3: M_MMAP_THRESHOLD (setting it also stops its rising)
    return bool(mallopt(-8, MALLOC_ARENAS)) and bool(mallopt(-3, MMAP_THRESHOLD))
