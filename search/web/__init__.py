"""`wherein serve`: a local web app (FastAPI) over an index: search, browse, see the masks.

A front-end, as the CLI is: it parses requests and renders answers, and leaves the work
to the service (search/service/serve.py's ServeSession: the index, the files' records,
thumbnails, masks, videos). It imports only wherein.search.service, wherein.schemas and
itself (tests/unit/test_layers.py keeps it so).

app.py builds the FastAPI app; routes/ holds its JSON API, one APIRouter per concern,
reaching the session through state.py; responses.py and hosts.py give every error one
JSON body and refuse foreign Host headers; ranges.py and videos.py answer HTTP byte
ranges and validators; schemas.py ties the API to schemas/*.schema.json.
"""

MALLOC_ARENAS = 2  # glibc's default is 8 per core: each thread's freed heap stays in its arena
# Blocks this large (decoded photos, tensors, encoded JPEGs) are mapped on their own and go
# back to the OS on free. glibc's own starting value, held: at 1 MB the blocks between 128 KB
# and 1 MB (thumbnail and mask buffers) fragmented the arenas, ~10 MB more RSS after each
# round of the load test at the same CPU time (bench/results/serve.md).
MMAP_THRESHOLD = 128 << 10


def bound_malloc() -> bool:
    """Bound what glibc's malloc keeps of freed memory in this (server) process, before its
    threads start, as MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 would: with an
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
