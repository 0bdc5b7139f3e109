"""Indexing a phone-like video with `wherein index`: cost split, real time, mixed library, memory.

    python bench/bench_video.py --out bench/results/video.md   # full size (tens of minutes)
    python bench/bench_video.py --quick                        # seconds: small videos, stand-ins

Full size:
- The video: 10 minutes of 1080p H.264 at 30 fps with a keyframe every second (GOP 30),
  16 Mbit/s, as phones write it. x264 `superfast` makes it bearable to synthesise on a small
  machine: one minute of panning texture with a scene change every 12 s is encoded once,
  and its packets are copied ten times with shifted timestamps (each GOP is closed, so the
  decoder does the full work every time).
- The models: full-size random-weight SigLIP 2 graphs, as bench/bench_optimize.py builds
  them (its build_models), optimized by `wherein models optimize` to the int8 image tower;
  its work folder (/tmp/wherein-bench-optimize) is reused when it holds them (hard-linked
  into --work: that folder is bench_optimize's to replace).
- The photos: bench_optimize's 48 synthetic 12-MP JPEGs (bench_index.make_photos).
- The 2-hour video, for memory only: the same recipe at 320x180 and 0.3 Mbit/s (a 270 MB
  file; one minute encoded, copied 120 times). At 600 frames per video (the default
  --max-frames) the indexer samples it on a 12-s grid, still decoding every keyframe.
Everything is cached under --work (default /tmp/wherein-bench-video).

Measured, each in a fresh child process (its own CPU time and peak RSS):
- the media stages of the 10-minute video: demux only; `video.sample` (keyframes, scene
  signatures, RGB at 448 px); sample + the tower's preprocessing; decode every frame of the
  first minute (what a sparse-GOP video would cost);
- the model: the image tower on 32 of the sampled frames, CPU ms per frame on one thread;
- `wherein index` of the 10-minute video, of the photos, of both in one folder, and of the
  2-hour video: wall and CPU seconds, frames, peak RSS.
The cost split puts the stages' CPU seconds side by side with the index run's; the photo
rate in the mixed library is the photos' share of the mixed run (its time less the video's
own run) against the photos-only run.

--quick runs the same steps in seconds on small videos (20 s at 320x180; "2 hours" is
1 minute at 160x90), 6 small photos and the stand-in models (built in --work): a smoke test
of the bench, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
WHEREIN = str(Path(sys.executable).parent / "wherein")
OPTIMIZE_WORK = Path("/tmp/wherein-bench-optimize")
FPS, GOP, SCENE_S = 30, 30, 12
MODEL_FRAMES = 32  # frames the model stage embeds (its cost is per frame)
TARGET_S = 30.0  # the target for the 10-minute video on 2 cores


@dataclass(frozen=True)
class Video:
    name: str
    width: int
    height: int
    seconds: int
    bitrate: int
    unit_s: int = 60  # encoded once, then its packets copied seconds / unit_s times


@dataclass(frozen=True)
class Setup:
    video: Video
    long: Video
    photos: int
    quick: bool


FULL = Setup(
    Video("phone-1080p30-10min.mp4", 1920, 1080, 600, 16_000_000),
    Video("phone-180p30-2h.mp4", 320, 180, 7200, 300_000),
    photos=48,
    quick=False,
)
QUICK = Setup(
    Video("quick-180p30-20s.mp4", 320, 180, 20, 1_000_000, unit_s=20),
    Video("quick-90p30-1min.mp4", 160, 90, 60, 200_000, unit_s=10),
    photos=6,
    quick=True,
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- inputs --------------------------------------------------------------------------------
def _texture(rng, scene: int, w: int, h: int):
    import numpy as np

    # Blocky noise with a colour cast per scene: detail for the encoder, motion from the pan.
    pad = max(8, min(600, w // 3))
    base = rng.integers(0, 255, ((h + pad) // 8 + 1, (w + pad) // 8 + 1), dtype=np.uint8)
    luma = np.kron(base, np.ones((8, 8), np.uint8))[: h + pad, : w + pad]
    return luma, pad, (64 + 40 * scene) % 256, (192 - 30 * scene) % 256


def synthesise(path: Path, v: Video) -> None:
    """v.unit_s seconds encoded once, then its packets copied to v.seconds (see the docstring)."""
    import av
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    unit = path.with_name(f"unit-{path.name}")
    rng = np.random.default_rng(0)
    w, h = v.width, v.height
    with av.open(str(unit), "w") as out:
        s = out.add_stream("libx264", rate=FPS)
        s.width, s.height, s.pix_fmt, s.bit_rate = w, h, "yuv420p", v.bitrate
        s.codec_context.gop_size = GOP
        s.codec_context.options = {"preset": "superfast", "sc_threshold": "0"}
        for i in range(v.unit_s * FPS):
            if i % (SCENE_S * FPS) == 0:
                luma, pad, u, cv = _texture(rng, i // (SCENE_S * FPS), w, h)
            k = i % (SCENE_S * FPS)
            y = luma[k % pad : k % pad + h, (2 * k) % pad : (2 * k) % pad + w]
            planes = np.empty((h * 3 // 2, w), np.uint8)
            # Sensor-like noise: what makes phone footage cost 16 Mbit/s, not 3.
            planes[:h] = y | rng.integers(0, 32, (h, w), dtype=np.uint8)
            planes[h : h + h // 4] = u
            planes[h + h // 4 :] = cv
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            frame.pts = i
            for p in s.encode(frame):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(unit)) as src, av.open(str(tmp), "w") as out:
        ins = src.streams.video[0]
        outs = out.add_stream_from_template(ins)
        packets = [p for p in src.demux(ins) if p.size]
        shift = round(v.unit_s / ins.time_base)
        for rep in range(v.seconds // v.unit_s):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts = p.pts + rep * shift, p.dts + rep * shift
                q.duration, q.time_base, q.stream = p.duration, p.time_base, outs
                q.is_keyframe = p.is_keyframe
                out.mux(q)
    tmp.replace(path)
    unit.unlink()


def video_in_folder(work: Path, v: Video) -> tuple[Path, float]:
    """work/<name>/<file>, alone in its folder (what `wherein index` is given), and the
    seconds spent synthesising it (0 when cached)."""
    folder = work / Path(v.name).stem
    path = folder / v.name
    if path.is_file():
        return path, 0.0
    legacy = work / v.name  # where earlier versions of this bench kept the 10-minute video
    if legacy.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        os.link(legacy, path)
        return path, 0.0
    log(f"synthesising {v.name} ({v.seconds} s at {v.width}x{v.height})")
    t0 = time.perf_counter()
    synthesise(path, v)
    return path, time.perf_counter() - t0


def photos(work: Path, setup: Setup) -> Path:
    if not setup.quick:
        cached = OPTIMIZE_WORK / "photos"
        if len(list(cached.glob("*.jpg"))) >= setup.photos:
            return cached
    folder = work / ("quick-photos" if setup.quick else "photos")
    if len(list(folder.glob("*.jpg"))) == setup.photos:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    if setup.quick:
        import numpy as np
        from PIL import Image

        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for i in range(setup.photos):
            pixels = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"photo_{i:03d}.jpg", quality=90)
    else:
        from bench_index import make_photos

        log(f"writing {setup.photos} synthetic 4032x3024 JPEGs")
        make_photos(folder, setup.photos)
    return folder


def models(work: Path, setup: Setup) -> Path:
    """Stand-ins (quick), else the optimized full-size random-weight models."""
    if setup.quick:
        from wherein.indexer.models.standins import build_standin_models

        target = work / "standins"
        return target if (target / "STANDIN.json").is_file() else build_standin_models(target)
    # A copy of our own (hard links): bench_optimize.py replaces its run-models as it runs.
    own = work / "models-int8"
    if (own / "siglip2-image" / "manifest.json").is_file():
        return own
    shutil.rmtree(own, ignore_errors=True)
    theirs = OPTIMIZE_WORK / "run-models"
    if (theirs / "siglip2-image" / "manifest.json").is_file():
        shutil.copytree(theirs, own, copy_function=os.link)
        return own
    from bench_optimize import build_models, timed_run

    shutil.copytree(build_models(OPTIMIZE_WORK), own, copy_function=os.link)
    index = work / "optimize-index"  # optimize verifies on indexed photos
    shutil.rmtree(index, ignore_errors=True)
    pics = str(photos(work, setup))
    timed_run([WHEREIN, "index", pics, "--models", str(own), "--index", str(index), "-q"])
    log("wherein models optimize --yes (the int8 image tower)")
    timed_run(
        [
            WHEREIN, "models", "optimize", "--models", str(own), "--index", str(index),
            "--yes", "--no-self-test", "--min-speedup", "0", "--only", "siglip2-image",
        ]
    )  # fmt: skip
    return own


# -- measurements (each in a child process) --------------------------------------------------
def stage(name: str, path: Path, model_dir: Path) -> dict:
    """One measurement, in this (child) process."""
    import av

    from wherein.indexer.video.sample import sample

    out: dict = {}
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "demux":
        with av.open(str(path)) as c:
            out["packets"] = sum(1 for p in c.demux(c.streams.video[0]) if p.size)
    elif name in ("sample", "preprocess", "model"):
        tower = _tower(model_dir, 1) if name != "sample" else None
        sampling = sample(path)
        n, pre, inputs = 0, 0.0, []
        for frame in sampling:
            n += 1
            if tower is not None:
                p0 = time.process_time()
                x = tower.preprocess(frame.image())
                pre += time.process_time() - p0
                if name == "model" and len(inputs) < MODEL_FRAMES:
                    inputs.append(x)
        out.update(frames=n, decoded=sampling.decoded, keyframes_only=sampling.keyframes_only)
        out["damage"] = sampling.damage
        out["preprocess_cpu_s"] = pre
        if tower is not None and inputs:
            out.update(_model_cost(tower, inputs, model_dir))
    elif name == "decode_all":
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            s.thread_type = "AUTO"
            n = 0
            for f in c.decode(s):
                if f.time is not None and f.time >= 60:
                    break
                n += 1
            out["frames"] = n
            out["seconds_of_video"] = min(60.0, float(n) / FPS)
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _tower(model_dir: Path, threads: int | None):
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_image_embedder

    return load_image_embedder(ModelDir(model_dir), threads)


def _model_cost(one, inputs: list, model_dir: Path) -> dict:
    """CPU ms per frame on one interpreter thread (its own time: a pool's spin-waits on a busy
    machine are not work), and wall ms per frame with the indexer's threads."""
    import numpy as np

    x = np.stack(inputs)
    one.embed(x[:2])  # warm-up: weights packed on the first run
    c = time.thread_time()
    one.embed(x)
    core_ms = (time.thread_time() - c) * 1000 / len(x)
    tower = _tower(model_dir, None)
    tower.embed(x[:2])
    w = time.perf_counter()
    tower.embed(x)
    return {
        "model_core_ms": core_ms,
        "model_wall_ms": (time.perf_counter() - w) * 1000 / len(x),
        "model_frames": len(x),
        "tower": Path(getattr(tower, "path", "")).name,
    }


def peak_rss_mb() -> float:
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's at fork time.
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured(cmd: list[str]) -> dict:
    """Run cmd as this process's only child: wall and CPU seconds, its peak RSS, its stdout."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "peak_rss_mb": ru.ru_maxrss / 1024,
        "stdout": r.stdout,
    }


def child(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if r.returncode:
        raise SystemExit(f"bench child {args} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def index_run(folders: list[Path], model_dir: Path, index: Path) -> dict:
    """`wherein index FOLDERS --json` into a fresh index, measured in its own wrapper process."""
    shutil.rmtree(index, ignore_errors=True)
    cmd = [WHEREIN, "index", *map(str, folders), "--models", str(model_dir), "--index", str(index)]
    res = child("--measure", "--", *cmd, "--json")
    out = res.pop("stdout")
    res["summary"] = json.loads(out[out.index("{") :]) if "{" in out else {}
    return res


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# -- the run ---------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small videos, stand-in models")
    ap.add_argument("--work", type=Path, default=Path("/tmp/wherein-bench-video"))
    ap.add_argument("--out", type=Path, default=None, help="write the report here too")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--video", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("cmd", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:
        print(json.dumps(stage(args.stage, args.video, args.models)))
        return
    if args.measure:
        print(json.dumps(measured(args.cmd)))
        return
    setup = QUICK if args.quick else FULL
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    cmd = " ".join(["python bench/bench_video.py", *sys.argv[1:]])
    load = [os.getloadavg()[0]]
    t_all = time.perf_counter()
    video, made = video_in_folder(work, setup.video)
    long_video, made_long = video_in_folder(work, setup.long)
    photo_dir = photos(work, setup)
    model_dir = models(work, setup)
    mixed = work / ("quick-mixed" if setup.quick else "mixed")
    if not mixed.is_dir():
        mixed.mkdir()
        for p in [*sorted(photo_dir.glob("*.jpg")), video]:
            os.link(p, mixed / p.name)
    stages = {}
    for name in ("demux", "sample", "preprocess", "model", "decode_all"):
        log(f"stage {name}")
        stages[name] = child(
            "--stage", name, "--video", str(video), "--models", str(model_dir)
        )  # fmt: skip
    runs = {}
    for name, folders in (
        ("video", [video.parent]),
        ("photos", [photo_dir]),
        ("mixed", [mixed]),
        ("long", [long_video.parent]),
    ):
        log(f"wherein index: {name}")
        runs[name] = index_run(folders, model_dir, work / f"index-{name}")
    load.append(os.getloadavg()[0])
    from wherein.indexer.video.probe import probe

    md = report(
        cmd,
        setup,
        {"video": probe(video), "long": probe(long_video)},
        {"video": video, "long": long_video},
        stages,
        runs,
        (made, made_long),
        load,
        time.perf_counter() - t_all,
    )
    if args.out:
        args.out.write_text(md)
    print(md, end="")


def report(cmd, setup, info, paths, stages, runs, made, load, secs) -> str:
    v, lv = info["video"], info["long"]
    dur = v.duration
    size_mb = paths["video"].stat().st_size / 1e6
    long_mb = paths["long"].stat().st_size / 1e6
    cores = len(os.sched_getaffinity(0))
    d, s, p, m, a = (stages[k] for k in ("demux", "sample", "preprocess", "model", "decode_all"))
    r_v, r_p, r_m, r_l = (runs[k] for k in ("video", "photos", "mixed", "long"))
    frames = int(r_v["summary"].get("frames", s["frames"]) or s["frames"])
    model_cpu = m["model_core_ms"] * frames / 1000
    demux_cpu = d["cpu_s"]
    decode_cpu = max(0.0, s["cpu_s"] - demux_cpu)
    pre_cpu = p["preprocess_cpu_s"] * frames / max(1, p["frames"])
    parts = demux_cpu + decode_cpu + pre_cpu + model_cpu
    length = f"{dur / 60:.0f}-min" if dur >= 60 else f"{dur:.0f}-s"
    title = "Indexing a video" + (
        " (--quick: stand-in models, small videos)" if setup.quick else ""
    )
    lines = [
        f"# {title}\n",
        f"Command: `{cmd}` ({secs / 60:.0f} min)\n",
        f"Machine: {cpu_model()}, {cores} cores, Python {platform.python_version()}, "
        f"PyAV {__import__('av').__version__}. **Shared**: other engineers' jobs ran on the "
        f"same cores (load average {load[0]:.1f} at the start, {load[-1]:.1f} at the end), so "
        "wall times are upper bounds; CPU seconds are steadier.\n",
        f"Video: {v.width}x{v.height} {v.codec} at {v.fps:g} fps, {dur:.0f} s, GOP {GOP} "
        f"(a keyframe a second), {size_mb:.0f} MB ({size_mb * 8 / dur:.1f} Mbit/s), x264 "
        f"superfast; {setup.video.unit_s} synthetic seconds (panning texture, a cut every "
        f"{SCENE_S} s) repeated by copying packets"
        + (f"; synthesised in {made[0]:.0f} s" if made[0] else " (cached)")
        + f". Image tower: `{m.get('tower', '?')}`.\n",
        "## `wherein index` of the video\n",
        "| run | frames | wall s | CPU s | x real time (wall) | x real time (CPU s over the cores) "
        "| peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| the {length} video | {frames} | {r_v['wall_s']:.1f} | {r_v['cpu_s']:.1f} | "
        f"{dur / r_v['wall_s']:.1f}x | {dur * cores / r_v['cpu_s']:.1f}x | "
        f"{r_v['peak_rss_mb']:.0f} |",
        "",
        f"The last column is what {cores} otherwise idle cores would reach if the run used "
        f"them fully (real time x cores / CPU s). Target: <= {TARGET_S:.0f} s on 2 cores "
        f"(>= {dur / TARGET_S:.0f}x real time).\n",
        "## Where the time goes (CPU seconds for the whole video)\n",
        "| part | how measured | CPU s | share |",
        "|---|---|---:|---:|",
        f"| demux | every packet read, nothing decoded | {demux_cpu:.1f} | "
        f"{demux_cpu / parts:.0%} |",
        f"| decode | `video.sample` less demux: {s['decoded']} keyframes decoded "
        f"(keyframes only: {s['keyframes_only']}), scene signatures, RGB at 448 px | "
        f"{decode_cpu:.1f} | {decode_cpu / parts:.0%} |",
        f"| preprocessing | the tower's `preprocess` (224 px), "
        f"{p['preprocess_cpu_s'] / max(1, p['frames']) * 1000:.1f} ms/frame | {pre_cpu:.1f} | "
        f"{pre_cpu / parts:.0%} |",
        f"| model | the image tower, {m['model_core_ms']:.0f} CPU ms/frame on one thread "
        f"({m['model_frames']} frames; {m['model_wall_ms']:.0f} ms/frame wall with the "
        f"indexer's threads) x {frames} frames | {model_cpu:.1f} | {model_cpu / parts:.0%} |",
        f"| sum of the parts | | {parts:.1f} | |",
        f"| `wherein index`, whole process | start-up, hashing, catalog, FAISS included | "
        f"{r_v['cpu_s']:.1f} | |",
        "",
        f"Decoding every frame instead of keyframes only: {a['cpu_s'] * dur / 60:.0f} CPU s "
        f"for the whole video (measured on its first {a['seconds_of_video']:.0f} s).\n",
        "## A mixed library: photos and the video in one folder\n",
        "| run | files | wall s | CPU s | peak RSS MB |",
        "|---|---:|---:|---:|---:|",
    ]
    n_photos = setup.photos
    for label, r, files in (
        ("photos only", r_p, n_photos),
        ("the video only", r_v, 1),
        ("photos + the video", r_m, n_photos + 1),
    ):
        lines.append(
            f"| {label} | {files} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    # The runs' own seconds (the index summary's: walk to last commit, models loaded): the
    # process start-up, paid once per run, would count twice against the mixed run.
    run_s = {k: float(r["summary"].get("seconds") or r["wall_s"]) for k, r in runs.items()}
    share_wall = run_s["photos"] / max(1e-9, run_s["mixed"] - run_s["video"])
    share_cpu = r_p["cpu_s"] / max(1e-9, r_m["cpu_s"] - r_v["cpu_s"])
    lines += [
        "",
        f"Photo rate in the mixed library, as a fraction of the photos-only rate: "
        f"**{share_wall:.0%}** by the runs' own seconds (photos-only / (mixed - video-only): "
        f"{run_s['photos']:.1f} / ({run_s['mixed']:.1f} - {run_s['video']:.1f})), "
        f"{share_cpu:.0%} by the processes' CPU seconds (target: >= 90%). Photos only: "
        f"{n_photos / run_s['photos']:.2f} photos/s.\n",
        "## Memory on a 2-hour video\n",
        f"Video: {lv.width}x{lv.height} {lv.codec} at {lv.fps:g} fps, {lv.duration / 3600:.1f} h, "
        f"GOP {GOP}, {long_mb:.0f} MB: low resolution and bitrate keep the file small; "
        f"{setup.long.unit_s} s encoded once and copied"
        + (f" (synthesised in {made[1]:.0f} s)" if made[1] else " (cached)")
        + ".\n",
        "| run | length | frames | wall s | CPU s | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|",
        f"| the {length} video | {dur:.0f} s | {frames} | {r_v['wall_s']:.1f} | "
        f"{r_v['cpu_s']:.1f} | {r_v['peak_rss_mb']:.0f} |",
        f"| the 2-hour video | {lv.duration:.0f} s | {r_l['summary'].get('frames', '?')} | "
        f"{r_l['wall_s']:.1f} | {r_l['cpu_s']:.1f} | {r_l['peak_rss_mb']:.0f} |",
        "",
        "Peak RSS is the `wherein index` process's own (ru_maxrss of its wrapper's one child).\n",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
