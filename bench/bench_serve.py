"""Load-test `wherein serve` on loopback: many concurrent clients mixing searches,
thumbnails, previews and masks; bounded in requests and in time.

    .venv/bin/python bench/bench_serve.py --images 200 --clients 32 --requests 3000
    .venv/bin/python bench/bench_serve.py --clients 32 --requests 1000 --rounds 4   # RSS curve
    .venv/bin/python bench/bench_serve.py --clients 32 --requests 1000 --rounds 4 \
        --default-path /tmp/wherein-serve-models      # the default path: LiteRT towers, no torch

Builds a synthetic photo set and indexes it with the stand-in models (no model download),
starts a real `wherein serve` process on 127.0.0.1 with a free port, then runs the
clients (threads, one keep-alive connection each) until --requests are done or
--seconds have passed. Every response must be a 200 with a body; any other outcome is
counted as an error and listed. Prints latency percentiles per kind of request and
adds the report to bench/results/serve.md when --write is given. With --rounds N the
load runs N times over one server, and the server's resident memory (VmRSS, and its
peak VmHWM, from /proc) is sampled before the first round and after each: a server
whose memory is bounded stops growing after the first. The server's CPU time in each round
(/proc/PID/stat) is printed beside it, and a search's own time in the server
(`timings.total_ms`) beside its latency: what a search waited, and what it cost.

--default-path DIR measures the path a user's `wherein serve` takes after `wherein models
pull`: full-size SigLIP 2 towers as LiteRT graphs (the int8 image tower, the fp32 text
tower, so a query imports no torch), built once into DIR with random weights (`wherein
models convert`; the speed and memory of the real models, not their answers), beside the
stand-in CLIPSeg, or with --clipseg full a full-size CLIPSeg with random weights (fp32
graphs, as `models pull` gives them), or with --clipseg optimized that one after `models
optimize` (int8 vision graph, 16-position text graph), also built once into DIR. The report
says whether the server process mapped torch at all.

--memory-limit MB runs the server in a memory cgroup of that size (as root on Linux; swap
shut out): the kernel may then drop clean file-backed pages (mapped graphs, libraries, the
page cache of the photos it reads), which RSS counts, but not the anonymous ones. The
report gives the group's peak and whether the limit killed anything; a killed server ends
the bench with its exit status.

The standard mix asks 12 query texts, pages 1-3 of 48: one block of 200 hits each, so after
its first 12 searches the server's reuse of identical answers serves every search in it.
--vary-queries makes each search a query not asked before: one to three of the known texts
with random weights and signs (``red:1.37 + blue:0.42 - white:0.8``), so the text vectors
are known (the server's text cache applies) but no answer can be reused; --new-texts P
makes that share of them also carry a text never seen (``a red thing 1234``: an encode).

A search's times in the server (its ``timings``, ms) are summarised beside its latency:
``total_ms`` (the search's own work), ``encode_wait_ms`` (a new text's encoding),
``queued_ms`` (waiting for a search thread), ``lane_ms`` (its time on the search thread),
``page_ms`` (building the page's hits from the catalog, in the handler: a search ranks its
block of hits and reads only the page shown), ``thread_wait_ms`` (from the request's arrival
in the app to its handler: the wait for a request thread and the event loop) and
``route_ms`` (the handler's whole time, JSON encoding excluded); what is left of the
client's latency is the HTTP layer. A reused answer reports no lane (those rows count only
the full searches).

--breakdown adds the server's resident memory per mapping (/proc/PID/smaps: the text
tower's packed weights, each library, [heap] and [anon]) at round 0 and after the last
round. The report also says whether FFmpeg's libraries (PyAV) were mapped: a server that
serves only photos should never load them.

--write adds the report to bench/results/serve.md under its title, above the sections
already there (they are the history).

Nothing here listens on anything but 127.0.0.1, and nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote_plus

import numpy as np
from PIL import Image, ImageDraw

COLOURS = ["red", "green", "blue", "yellow", "orange", "purple", "black", "white"]
QUERIES = COLOURS + ["red - blue", "green + yellow", "blue:2 + white", "a purple square"]
KINDS = ("search", "thumb", "preview", "mask", "mask_overlay")
# A search's times in the server (its `timings`), summarised beside its latency.
SERVER_TIMINGS = (
    "total_ms",
    "encode_wait_ms",
    "queued_ms",
    "lane_ms",
    "page_ms",
    "thread_wait_ms",
    "route_ms",
)
MIX = {"search": 0.25, "thumb": 0.45, "preview": 0.1, "mask": 0.1, "mask_overlay": 0.1}


def make_photos(root: Path, n: int) -> None:
    from wherein.indexer.models.standins.palette import rgb255

    rng = random.Random(0)
    for i in range(n):
        w, h = rng.choice([(640, 480), (800, 600), (480, 640), (1024, 768)])
        img = Image.new("RGB", (w, h), (240, 240, 240))
        d = ImageDraw.Draw(img)
        for _ in range(rng.randint(1, 3)):
            x0, y0 = rng.randrange(w // 2), rng.randrange(h // 2)
            box = (x0, y0, x0 + rng.randrange(w // 6, w // 2), y0 + rng.randrange(h // 6, h // 2))
            (d.ellipse if rng.random() < 0.5 else d.rectangle)(
                box, fill=rgb255(rng.choice(COLOURS))
            )
        noise = np.asarray(img, np.int16) + np.random.default_rng(i).integers(-8, 9, (h, w, 3))
        Image.fromarray(np.clip(noise, 0, 255).astype(np.uint8)).save(
            root / f"{i:05d}.jpg", quality=90
        )


def wherein(*args: str, **kw) -> list[str]:
    return [sys.executable, "-m", "wherein.search.cli", *args]


class MemoryLimit:
    """A memory cgroup of its own for the server (Linux, as root; cgroup v2, else v1's
    memory controller), with swap shut out: whether the server works within `mb` of memory,
    page cache included, and what the group recorded. Resident file-backed pages (mapped
    graphs, libraries) count in RSS but are the kernel's to drop under such a limit; the
    anonymous ones are not."""

    def __init__(self, mb: float) -> None:
        self.mb = mb
        name = f"wherein-bench-{os.getpid()}"
        root = Path("/sys/fs/cgroup")
        self.v2 = (
            "memory" in (root / "cgroup.controllers").read_text().split()
            if (root / "cgroup.controllers").is_file()
            else False
        )
        self.dir = root / name if self.v2 else root / "memory" / name
        try:
            self.dir.mkdir()
        except OSError as exc:
            raise SystemExit(f"--memory-limit: cannot make a memory cgroup ({exc})") from exc
        limit = str(int(mb * 2**20))
        if self.v2:
            (self.dir / "memory.max").write_text(limit)
            with contextlib.suppress(OSError):
                (self.dir / "memory.swap.max").write_text("0")
        else:
            (self.dir / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # no swap accounting on this kernel
                (self.dir / "memory.memsw.limit_in_bytes").write_text(limit)

    @staticmethod
    def uncache(folder: Path) -> None:
        """Drop folder's files from the page cache (clean pages, not mapped elsewhere), so
        that the server's own reads of its graphs are charged to its group: pages already
        cached stay charged to whoever read them first and would not count."""
        for top, _, names in os.walk(folder, followlinks=True):  # a family may be a link
            for name in names:
                with contextlib.suppress(OSError), open(os.path.join(top, name), "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)

    def enter(self) -> None:
        """In the child before exec: the server starts inside the group."""
        (self.dir / "cgroup.procs").write_text(str(os.getpid()))

    def recorded(self) -> dict[str, float]:
        """The group's peak usage (MB), charges that met the limit, and kills for memory."""
        if self.v2:
            events = dict(
                line.split() for line in (self.dir / "memory.events").read_text().splitlines()
            )
            peak = self.dir / "memory.peak"
            return {
                "peak_mb": int(peak.read_text()) / 2**20 if peak.is_file() else float("nan"),
                "at_limit": int(events.get("max", 0)),
                "oom_kills": int(events.get("oom_kill", 0)),
            }
        control = dict(
            line.split() for line in (self.dir / "memory.oom_control").read_text().splitlines()
        )
        return {
            "peak_mb": int((self.dir / "memory.max_usage_in_bytes").read_text()) / 2**20,
            "at_limit": int((self.dir / "memory.failcnt").read_text()),
            "oom_kills": int(control.get("oom_kill", 0)),
        }

    def close(self) -> None:
        with contextlib.suppress(OSError):  # still busy: left for the system to reap
            self.dir.rmdir()


def start_server(
    index: Path, models: Path, cache_mb: float, *options: str, limit: MemoryLimit | None = None
) -> tuple[subprocess.Popen, int]:
    """`wherein serve` on a free loopback port (options: more of its flags), and that port."""
    proc = subprocess.Popen(
        wherein("serve", "--index", str(index), "--models", str(models), "--port", "0")
        + ["--cache-mb", str(cache_mb), *options],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=limit.enter if limit else None,
    )
    return proc, wait_for_port(proc)


def stop_server(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it; killed if it has not stopped within 30 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_for_port(proc: subprocess.Popen) -> int:
    """The port a starting `wherein serve` (stderr piped, text) listens on; keeps it drained."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit(f"wherein serve exited with {proc.returncode}")
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
            return int(m.group(1))
    raise SystemExit("wherein serve did not start within 120 s")


class Client:
    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, url: str) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request("GET", url)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def varied_query(rng: random.Random, new_texts: float) -> str:
    """A query not asked before (random weights and signs over the known texts; with
    probability new_texts, one text never seen too): the server cannot reuse an answer."""
    texts = rng.sample(COLOURS + ["a purple square"], rng.randint(1, 3))
    if rng.random() < new_texts:
        texts[-1] = f"a {rng.choice(COLOURS)} thing {rng.randrange(10**6)}"
    parts = [f"{t}:{rng.uniform(0.3, 2.0):.3f}" for t in texts]
    query = parts[0]
    for part in parts[1:]:
        query += (" - " if rng.random() < 0.3 else " + ") + part
    return query


def run_load(
    port: int,
    ids: list[int],
    clients: int,
    requests: int,
    seconds: float,
    vary: bool = False,
    new_texts: float = 0.0,
) -> dict:
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    lock = threading.Lock()
    issued = 0
    stop_at = time.monotonic() + seconds

    def next_ticket() -> bool:
        nonlocal issued
        with lock:
            if issued >= requests or time.monotonic() > stop_at:
                return False
            issued += 1
            return True

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        client = Client(port)
        while next_ticket():
            kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
            image_id = rng.choice(ids)
            prompt = rng.choice(COLOURS)
            q = varied_query(rng, new_texts) if vary else rng.choice(QUERIES)
            url = {
                "search": f"/api/search?q={quote_plus(q)}&page={rng.randint(1, 3)}&per_page=48",
                "thumb": f"/api/thumb/{image_id}",
                "preview": f"/api/image/{image_id}",
                "mask": f"/api/mask/{image_id}?prompt={prompt}",
                "mask_overlay": f"/api/mask/{image_id}/overlay?prompt={prompt}",
            }[kind]
            t0 = time.perf_counter()
            try:
                status, body = client.get(url)
            except Exception as exc:  # noqa: BLE001 - every failure is a counted error
                status, body = -1, str(exc).encode()
            dt = (time.perf_counter() - t0) * 1e3
            with lock:
                if status == 200 and body:
                    latencies[kind].append(dt)
                    if kind == "search":  # the server's own times for it
                        timings = json.loads(body)["timings"]
                        for key in SERVER_TIMINGS:
                            if key in timings:
                                latencies[f"search_{key}"].append(timings[key])
                else:
                    errors.append(f"{url}: {status} {body[:120]!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"latencies": latencies, "errors": errors, "wall_s": wall}


def rss_mb(pid: int) -> tuple[float, float, float, float]:
    """The process's resident, peak resident, anonymous and file-backed memory in MB (Linux
    /proc): file-backed pages are mapped model graphs, which the kernel can drop and reread."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"], fields["RssAnon"], fields["RssFile"]


def mapped_mb(pid: int) -> dict[str, float]:
    """Resident MB per mapping of the process (/proc/PID/smaps): a file by its name (a
    library's versions and a cache's digest kept, its folder dropped), anonymous memory as
    [heap], [stack] or [anon] (malloc's arenas, thread stacks, native allocations)."""
    out: dict[str, float] = defaultdict(float)
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):
            path = head[5].strip() if len(head) > 5 else ""
            name = Path(path).name if path.startswith("/") else (path or "[anon]")
        elif head[0] == "Rss:":
            out[name] += int(head[1]) / 1024
    return dict(out)


def breakdown(start: dict[str, float], end: dict[str, float], top: int = 18) -> list[str]:
    """A table of the mappings that hold the most memory at the end, with their start."""
    rows = sorted(end.items(), key=lambda kv: -kv[1])
    lines = ["| mapping | MB at start | MB at the end |", "|---|---|---|"]
    for name, mb in rows[:top]:
        lines.append(f"| {name} | {start.get(name, 0.0):.1f} | {mb:.1f} |")
    rest_start = sum(start.values()) - sum(start.get(n, 0.0) for n, _ in rows[:top])
    rest_end = sum(mb for _, mb in rows[top:])
    lines.append(f"| everything else | {rest_start:.1f} | {rest_end:.1f} |")
    lines.append(f"| total | {sum(start.values()):.1f} | {sum(end.values()):.1f} |")
    return lines


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system, /proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def maps_torch(pid: int) -> bool:
    """Whether the process has torch's library mapped (imported torch)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def default_path_models(root: Path) -> Path:
    """Full-size random-weight SigLIP 2 as `wherein models pull` leaves it (the int8 image
    tower, the LiteRT text tower) and the stand-in CLIPSeg, in root/models (kept: later runs
    reuse it). The text tower converts from an open_clip directory (bench_optimize's)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_optimize import random_text_dir

    from wherein.indexer.models.standins import build_standin_models

    models = root / "models"
    if (models / "siglip2-text" / "text_tower.tflite").is_file() and (models / "clipseg").is_dir():
        return models
    image = root / "int8"
    if not (image / "siglip2-image" / "manifest.json").is_file():
        convert = ["siglip2", "--random-weights", "--precision", "int8", "--out", str(image)]
        subprocess.run(wherein("models", "convert", *convert), check=True)
    random_text_dir(models / "siglip2-text")
    subprocess.run(wherein("models", "convert", "siglip2-text", "--out", str(models)), check=True)
    shutil.copytree(image / "siglip2-image", models / "siglip2-image", dirs_exist_ok=True)
    standins = build_standin_models(root / "standins")
    shutil.copytree(standins / "clipseg", models / "clipseg", dirs_exist_ok=True)
    return models


CLIPSEGS = ("standin", "full", "optimized")


def with_clipseg(root: Path, models: Path, kind: str) -> Path:
    """models with another CLIPSeg: "full", a full-size one with random weights (fp32 graphs,
    bench_mask.build_full), or "optimized", that one as `models optimize` leaves it (int8
    vision, 16-position text graph; bench_mask.build_int8). Built once into root and
    reused; the SigLIP 2 towers are links to models' own."""
    if kind == "standin":
        return models
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_mask import build_full, build_int8

    built = build_full(root / "clipseg-full")
    if kind == "optimized":
        built = build_int8(root / "clipseg-full", built)
        if built is None:
            sys.exit("--clipseg optimized needs ai-edge-quantizer (pip install -e '.[convert]')")
    target = root / f"models-clipseg-{kind}"
    target.mkdir(parents=True, exist_ok=True)
    for name, source in (
        ("siglip2-image", models / "siglip2-image"),
        ("siglip2-text", models / "siglip2-text"),
        ("clipseg", built / "clipseg"),
    ):
        link = target / name
        if not link.is_symlink():
            link.symlink_to(source.resolve())
    return target


def clipseg_kind(models: Path) -> str:
    """The stand-in CLIPSeg (kilobyte graphs) or a full-size one, and its vision graph."""
    from wherein.indexer.models.modeldir import ModelDir

    vision = ModelDir(models).clipseg_vision_file()
    mb = vision.stat().st_size / 2**20
    if mb < 10:
        return "stand-in CLIPSeg"
    return f"full-size CLIPSeg (random weights; vision graph {vision.name}, {mb:.0f} MB)"


def merge(results: list[dict]) -> dict:
    latencies: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for kind, values in r["latencies"].items():
            latencies[kind] += values
    return {
        "latencies": latencies,
        "errors": [e for r in results for e in r["errors"]],
        "wall_s": sum(r["wall_s"] for r in results),
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def percentiles(values: list[float]) -> dict[str, float]:
    a = np.array(values)
    return {
        "n": len(a),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


TITLE = "# Web app load test (loopback)"


def added_section(document: str, section: str) -> str:
    """The results file with section added under its title, above the sections already
    there (the history is kept)."""
    body = document.removeprefix(TITLE).lstrip("\n")
    return f"{TITLE}\n\n{section.rstrip()}\n\n{body}".rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=3000, help="stop after this many")
    ap.add_argument("--seconds", type=float, default=300, help="stop after this long")
    ap.add_argument("--cache-mb", type=float, default=512)
    ap.add_argument("--rounds", type=int, default=1, help="run the load this many times")
    ap.add_argument("--models", type=Path, help="a models folder (default: stand-ins)")
    ap.add_argument(
        "--default-path",
        type=Path,
        metavar="DIR",
        help="full-size LiteRT towers with random weights, built into (and reused from) DIR",
    )
    ap.add_argument(
        "--clipseg",
        choices=CLIPSEGS,
        default="standin",
        help="with --default-path: the stand-in CLIPSeg, a full-size one (random weights, "
        "fp32), or that one after `models optimize` (int8 vision), built once into DIR",
    )
    ap.add_argument(
        "--vary-queries",
        action="store_true",
        help="each search a query not asked before (known texts, random weights): no reuse",
    )
    ap.add_argument(
        "--new-texts",
        type=float,
        default=0.0,
        metavar="P",
        help="with --vary-queries: this share of searches also has a text never seen",
    )
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="add the server's resident memory per mapping (smaps) at the start and the end",
    )
    ap.add_argument(
        "--memory-limit",
        type=float,
        metavar="MB",
        help="run the server in a memory cgroup of this size (Linux, root): does it fit?",
    )
    ap.add_argument("--write", action="store_true", help="add the report to bench/results/serve.md")
    args = ap.parse_args()

    from wherein.indexer.models.standins import build_standin_models

    work = Path(tempfile.mkdtemp(prefix="wherein-bench-serve-"))
    server = None
    limit = MemoryLimit(args.memory_limit) if args.memory_limit else None
    load_before = os.getloadavg()[0]
    try:
        if args.default_path:
            models = default_path_models(args.default_path)
            models = with_clipseg(args.default_path, models, args.clipseg)
        elif args.clipseg != "standin":
            ap.error("--clipseg full or optimized needs --default-path")
        else:
            models = args.models or build_standin_models(work / "models")
        photos, index = work / "photos", work / "index"
        photos.mkdir()
        make_photos(photos, args.images)
        subprocess.run(
            wherein("index", str(photos), "--index", str(index), "--models", str(models), "-q"),
            check=True,
        )
        if limit:
            limit.uncache(models)
        server, port = start_server(index, models, args.cache_mb, limit=limit)
        warm = Client(port)
        status, body = warm.get("/api/search?q=red&per_page=200")
        assert status == 200, body[:200]
        ids = [h["id"] for h in json.loads(body)["hits"]]
        memory = [rss_mb(server.pid)]
        maps_start = mapped_mb(server.pid)
        cpu = [cpu_s(server.pid)]
        rounds = []
        for _ in range(args.rounds):
            rounds.append(
                run_load(
                    port,
                    ids,
                    args.clients,
                    args.requests,
                    args.seconds,
                    args.vary_queries,
                    args.new_texts,
                )
            )
            memory.append(rss_mb(server.pid))
            cpu.append(cpu_s(server.pid))
        torch_mapped = maps_torch(server.pid)
        maps_end = mapped_mb(server.pid)
        av_mapped = any(name.startswith("libavcodec") for name in maps_end)
        result = merge(rounds)
        cache = json.loads(warm.get("/api/status")[1])["cache"]
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(work, ignore_errors=True)
        recorded = limit.recorded() if limit else {}
        if limit:
            limit.close()

    server = {key: result["latencies"].pop(f"search_{key}", []) for key in SERVER_TIMINGS}
    done = sum(len(v) for v in result["latencies"].values())
    rows = []
    for kind in KINDS:
        if result["latencies"].get(kind):
            p = percentiles(result["latencies"][kind])
            rows.append(
                f"| {kind} | {p['n']} | {p['p50']:.1f} | {p['p90']:.1f} | {p['p95']:.1f} | "
                f"{p['p99']:.1f} | {p['max']:.1f} |"
            )
    command = (
        f".venv/bin/python bench/bench_serve.py --images {args.images} --clients {args.clients} "
        f"--requests {args.requests} --seconds {args.seconds:g} --cache-mb {args.cache_mb:g}"
        + (f" --rounds {args.rounds}" if args.rounds > 1 else "")
        + (f" --models {args.models}" if args.models else "")
        + (f" --default-path {args.default_path}" if args.default_path else "")
        + (f" --clipseg {args.clipseg}" if args.clipseg != "standin" else "")
        + (" --vary-queries" if args.vary_queries else "")
        + (f" --new-texts {args.new_texts:g}" if args.new_texts else "")
        + (" --breakdown" if args.breakdown else "")
        + (f" --memory-limit {args.memory_limit:g}" if args.memory_limit else "")
    )
    for key, values in server.items():
        if values:
            p = percentiles(values)
            rows.append(
                f"| search, in the server (`timings.{key}`) | {p['n']} | {p['p50']:.1f} | "
                f"{p['p90']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['max']:.1f} |"
            )
    curve = [
        f"| {i} | {i * args.requests if i else 0} | {rss:.0f} | {peak:.0f} | {anon:.0f} | "
        f"{file:.0f} | {cpu[i] - cpu[i - 1] if i else cpu[0]:.1f} | "
        f"{rounds[i - 1]['wall_s'] if i else 0:.1f} |"
        for i, (rss, peak, anon, file) in enumerate(memory)
    ]
    if args.default_path:
        text = json.loads((models / "siglip2-text" / "manifest.json").read_text())
        which = (
            "the default path: full-size SigLIP 2 LiteRT towers (random weights; int8 image, "
            f"{text.get('precision', 'fp32')} text), {clipseg_kind(models)}"
        )
    else:
        which = f"models {args.models.name}" if args.models else "stand-in models"
    load = os.getloadavg()[0]
    report = "\n".join(
        [
            f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            + ("varied queries" if args.vary_queries else "the standard mix"),
            "",
            f"Command: `{command}`",
            f"Machine: {cpu_model()}, {os.cpu_count()} cores shared with other jobs "
            f"(load average {load_before:.1f} before, {load:.1f} at the end), Python "
            f"{platform.python_version()}; {which}. torch in the server: "
            + ("mapped" if torch_mapped else "never imported")
            + "; FFmpeg (PyAV): "
            + ("mapped" if av_mapped else "not mapped")
            + ".",
            "",
            f"{args.images} synthetic photos (640x480 to 1024x768 JPEGs), indexed, then one "
            f"`wherein serve` process on 127.0.0.1 and {args.clients} client threads, one "
            "keep-alive connection each, drawing requests at random: "
            + ", ".join(f"{k} {v:.0%}" for k, v in MIX.items())
            + ". Thumbnails, previews and masks start uncached, so early requests make them.",
            "",
            f"Requests: {done + len(result['errors'])} in {result['wall_s']:.1f} s "
            f"({(done + len(result['errors'])) / result['wall_s']:.1f}/s); "
            f"errors: {len(result['errors'])}. "
            f"Cache at the end: {cache['bytes'] / 2**20:.1f} MB of "
            f"{cache.get('limit_bytes', 0) / 2**20:.0f} MB, {cache.get('pruned_files', 0)} "
            "files pruned.",
            "",
            "| request | n | p50 ms | p90 ms | p95 ms | p99 ms | max ms |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            *(
                [
                    f"Memory cgroup: limit {args.memory_limit:g} MB (page cache included, no "
                    f"swap); its peak {recorded['peak_mb']:.0f} MB, charges refused at the limit "
                    f"{recorded['at_limit']}, processes killed for memory: "
                    f"{recorded['oom_kills']}.",
                    "",
                ]
                if limit
                else []
            ),
            "Server memory (after the round; round 0: started, one search answered):",
            "",
            "| round | requests so far | RSS MB | peak RSS MB | anonymous MB | file-backed MB "
            "| server CPU s | wall s |",
            "|---|---|---|---|---|---|---|---|",
            *curve,
            "",
            *(
                [
                    "Resident memory per mapping (`/proc/PID/smaps`; round 0 and the last):",
                    "",
                    *breakdown(maps_start, maps_end),
                    "",
                ]
                if args.breakdown
                else []
            ),
        ]
    )
    print(report)
    for e in result["errors"][:20]:
        print("ERROR", e, file=sys.stderr)
    if args.write:
        out = Path(__file__).parent / "results" / "serve.md"
        out.write_text(added_section(out.read_text() if out.is_file() else "", report))
        print(f"wrote {out}", file=sys.stderr)
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
