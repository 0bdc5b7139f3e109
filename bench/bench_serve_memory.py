"""What each kind of request adds to `wherein serve`'s memory, one kind at a time.

    .venv/bin/python bench/bench_serve_memory.py --default-path /tmp/web-bench/dp [--images 60]

Indexes --images synthetic photos with the models bench_serve.py's --default-path builds
(full-size SigLIP 2 LiteRT towers, random weights; stand-in CLIPSeg), starts one `wherein
serve` (no masks made ahead: --prefetch-masks 0, so each kind's cost shows where it is
asked for), and asks the kinds in turn: searches (known texts, then reused answers, then
varied queries), thumbnails, previews, masks, overlays. After each step it prints the
server's VmRSS, RssAnon and RssFile and the mappings that moved most (/proc/PID/smaps,
as bench_serve.py --breakdown names them). A few clients at a time: this is a breakdown,
not a load test.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import quote_plus

sys.path.insert(0, str(Path(__file__).parent))
import bench_serve as bs  # noqa: E402 - the sibling bench's helpers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--default-path", type=Path, required=True, metavar="DIR")
    ap.add_argument("--images", type=int, default=60)
    args = ap.parse_args()
    models = bs.default_path_models(args.default_path)
    work = Path(tempfile.mkdtemp(prefix="wherein-bench-serve-memory-"))
    server = None
    try:
        photos, index = work / "photos", work / "index"
        photos.mkdir()
        bs.make_photos(photos, args.images)
        subprocess.run(
            bs.wherein("index", str(photos), "--index", str(index), "--models", str(models), "-q"),
            check=True,
        )
        server, port = bs.start_server(index, models, 512, "--prefetch-masks", "0")
        steps(server.pid, port)
    finally:
        if server is not None:
            bs.stop_server(server)
        shutil.rmtree(work, ignore_errors=True)


def steps(pid: int, port: int) -> None:
    last: dict[str, float] = {}

    def report(label: str) -> None:
        nonlocal last
        now = bs.mapped_mb(pid)
        rss, _, anon, file = bs.rss_mb(pid)
        moved = sorted(
            ((k, v - last.get(k, 0.0)) for k, v in now.items()), key=lambda kv: -abs(kv[1])
        )
        top = ", ".join(f"{k} {d:+.1f}" for k, d in moved[:5] if abs(d) >= 0.5)
        print(f"| {label} | {rss:.0f} | {anon:.0f} | {file:.0f} | {top} |", flush=True)
        last = now

    def ask(urls: list[str], clients: int = 4) -> None:
        todo, lock, errors = list(urls), threading.Lock(), []

        def worker() -> None:
            c = bs.Client(port)
            while True:
                with lock:
                    if not todo:
                        return
                    url = todo.pop()
                status, body = c.get(url)
                if status != 200:
                    errors.append(f"{url}: {status} {body[:120]!r}")

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit("\n".join(errors[:10]))

    rng = random.Random(0)
    print("| after | RSS MB | anonymous MB | file-backed MB | mappings that moved most (MB) |")
    print("|---|---|---|---|---|")
    report("started, no request")
    status, body = bs.Client(port).get("/api/search?q=red&per_page=200")
    assert status == 200, body[:200]
    ids = [h["id"] for h in json.loads(body)["hits"]]
    report("the first search")
    ask([f"/api/search?q={quote_plus(q)}&per_page=48" for q in bs.QUERIES], clients=1)
    report(f"{len(bs.QUERIES)} texts searched")
    ask(
        [
            f"/api/search?q={quote_plus(q)}&page={p}&per_page=48"
            for q in bs.QUERIES
            for p in (1, 2, 3)
        ]
    )
    report("their pages 1-3 (reused answers)")
    ask([f"/api/search?q={quote_plus(bs.varied_query(rng, 0.0))}&per_page=48" for _ in range(300)])
    report("300 varied queries")
    ask([f"/api/thumb/{i}" for i in ids])
    report(f"{len(ids)} thumbnails")
    ask([f"/api/image/{i}" for i in ids])
    report(f"{len(ids)} previews")
    ask([f"/api/mask/{ids[0]}?prompt=red"], clients=1)
    report("the first mask")
    ask([f"/api/mask/{i}?prompt={rng.choice(bs.COLOURS)}" for i in ids[1:]])
    report(f"{len(ids) - 1} more masks")
    ask([f"/api/mask/{i}/overlay?prompt={rng.choice(bs.COLOURS)}" for i in ids])
    report(f"{len(ids)} overlays")


if __name__ == "__main__":
    main()
