"""CPU time of one never-repeated web search, in-process: the page of 48 built from a block of
200 ranked hits (what `wherein serve` does), against the whole block built (what the CLI's
`search -k 200` does, and the web did before).

    .venv/bin/python bench/bench_search_cpu.py --images 200 --queries 300

Builds bench_serve's synthetic photos and indexes them with the stand-in models (or uses
--index/--models), then runs varied queries (bench_serve.varied_query: the known texts with
random weights and signs, so the text vectors are cached and every search is a full one)
through the search service on one thread with FAISS single-threaded, as a search thread of
the web app runs them. Each search is followed by what the route does with its page: each
hit's file looked at, its JSON form. Prints the thread's CPU time per search (median,
mean) and the Searcher's own timings (median), for the page built alone and the whole
block built, interleaved so that the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import make_photos, varied_query, wherein  # noqa: E402

PAGE = 48
BLOCK = 200


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--index", type=Path, help="an existing index (with --models)")
    ap.add_argument("--models", type=Path)
    args = ap.parse_args()

    import faiss

    from wherein.indexer.models.standins import build_standin_models
    from wherein.search.query import Query
    from wherein.search.service.search import SearchRequest, open_index, search

    faiss.omp_set_num_threads(1)  # as on the web app's search threads
    with tempfile.TemporaryDirectory(prefix="wherein-bench-search-cpu-") as tmp:
        index, models = args.index, args.models
        if index is None:
            work = Path(tmp)
            models = build_standin_models(work / "models")
            (work / "photos").mkdir()
            make_photos(work / "photos", args.images)
            index = work / "index"
            cmd = wherein("index", str(work / "photos"), "--index", str(index))
            subprocess.run([*cmd, "--models", str(models), "-q"], check=True)
        searcher = open_index(index, models)
        rng = random.Random(1)
        queries = [varied_query(rng, 0.0) for _ in range(args.queries + 20)]

        # A wherein from before pages were built alone (its search takes no lazy): the
        # whole block only, to compare with.
        modes = (False, True) if "lazy" in inspect.signature(search).parameters else (False,)

        def one(q: str, lazy: bool) -> dict[str, float]:
            request = SearchRequest(Query.parse(q), k=BLOCK, check_exists=False).check()
            hits = search(searcher, request, **({"lazy": True} if lazy else {})).hits
            page = [h.replace(exists=os.path.exists(h.path)) for h in hits[:PAGE]]
            [h.to_dict() for h in page]
            return searcher.last_timings

        for q in queries[:20]:  # warm: text vectors cached, towers loaded
            for lazy in modes:
                one(q, lazy)
        cpu: dict[bool, list[float]] = {lazy: [] for lazy in modes}
        timings: dict[bool, list[dict[str, float]]] = {lazy: [] for lazy in modes}
        for n, q in enumerate(queries[20:]):
            for lazy in modes[::-1] if n % 2 else modes:
                t = time.thread_time()
                timings[lazy].append(one(q, lazy))
                cpu[lazy].append((time.thread_time() - t) * 1e3)
        searcher.close()
    print(f"{args.queries} varied queries, a page of {PAGE} from a block of {BLOCK}:")
    for lazy, what in ((False, "whole block built"), (True, "page built alone")):
        if lazy not in modes:
            continue
        parts = {
            k: round(statistics.median(t[k] for t in timings[lazy]), 2) for k in timings[lazy][0]
        }
        print(
            f"  {what}: CPU ms per search median {statistics.median(cpu[lazy]):.2f}, "
            f"mean {statistics.mean(cpu[lazy]):.2f}; the Searcher's timings (median) {parts}"
        )


if __name__ == "__main__":
    main()
