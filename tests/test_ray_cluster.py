"""Joining a running Ray cluster that uses Ray's token authentication (the default for new clusters).

The head is started with `ray start --head` on this machine only: node address 127.0.0.1
(with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which stops Ray from swapping 127.0.0.1 for the
machine's network address, every Ray server listens on loopback), free ports, a private
temp dir and a private token. It is stopped by killing its process group, not `ray stop`:
that would stop every Ray process of this user on the machine.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.scale

N_IMAGES = 10
RAY_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")


def _free_port() -> int:
    # Ephemeral range, away from Ray's default worker ports (10002-19999).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without Ray auth settings (an earlier local Ray run in this
    process sets RAY_AUTH_MODE), with a private HOME (so ~/.ray/auth_token is the test's)."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_ENV}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **extra)
    return env


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def head():
    """A one-node Ray cluster with token auth on 127.0.0.1: (address, token, temp root)."""
    root = Path(tempfile.mkdtemp(prefix="wrh", dir="/tmp"))  # Ray's socket paths must stay short
    token = secrets.token_hex(32)
    (root / "token").write_text(token)
    (root / "home").mkdir()
    port = _free_port()
    env = _clean_env(root / "home", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(root / "token"))
    cmd = [_ray_bin(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    cmd += ["--temp-dir", str(root / "ray"), "--num-cpus", "2", "--include-dashboard", "false"]
    cmd += ["--disable-usage-stats", "--min-worker-port", "0", "--max-worker-port", "0"]
    for flag in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port"):
        cmd += [f"--{flag}", "0"]
    cmd += ["--runtime-env-agent-port", "0"]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
        yield f"127.0.0.1:{port}", token, root
    finally:
        _stop_group(proc.pid)  # the head's processes share the group `ray start` led
        shutil.rmtree(root, ignore_errors=True)


def _stop_group(pgid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for i in range(N_IMAGES):
        img = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
        img.resize((48, 40), Image.NEAREST).save(root / f"p{i:02d}.png")
    return root


def _embed(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wherein.search.cli", "embed", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a regression to ray.init's own waiting shows up as this timeout
        check=False,
    )


def _said(res: subprocess.CompletedProcess) -> list[str]:
    """stderr's lines, less the stand-in models' notice (every command prints it)."""
    return [ln for ln in res.stderr.splitlines() if ln.strip() and "STAND-IN models" not in ln]


@pytest.mark.slow
def test_embed_joins_token_cluster_with_default_token_file(head, photos, standin_models, tmp_path):
    from wherein.indexer.scale.build_index import iter_shard_vectors
    from wherein.indexer.scale.embed import embed
    from wherein.indexer.scale.shards import read_manifest

    address, token, _root = head
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(token + "\n")
    out = tmp_path / "emb"
    res = _embed(
        [str(photos), "--out", str(out), "--engine", "ray", "--ray-address", address]
        + ["--models", str(standin_models), "--shard-size", "4"],
        _clean_env(home),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert _said(res) == [f"ray: joining {address} with the auth token from ~/.ray/auth_token"]
    assert "10 items in 3 shards: 3 written now" in res.stdout

    # The cluster's shards hold what the local engine computes, id for id.
    local = tmp_path / "local"
    embed([str(photos)], local, standin_models, engine="local", shard_size=4)
    got, want = (
        [np.concatenate(a) for a in zip(*iter_shard_vectors(d, read_manifest(d)), strict=True)]
        for d in (out, local)
    )
    assert read_manifest(out)["count"] == N_IMAGES
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.slow
def test_select_masks_on_a_token_cluster_as_the_local_engine(head, standin_models, tmp_path):
    """`select --mask --engine ray --ray-address`: joined as embed joins, same COCO as local."""
    import json

    from conftest import draw_shape

    address, token, _root = head
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(token + "\n")
    for i, size in enumerate([(320, 240), (700, 500), (200, 300)]):
        draw_shape(tmp_path / "reds" / f"r{i}.png", "red", size=size)
    env = _clean_env(home, WHEREIN_MODELS=str(standin_models), WHEREIN_INDEX=str(tmp_path / "i"))

    def wherein(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "wherein.search.cli", *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    assert wherein("index", str(tmp_path / "reds"), "-q").returncode == 0
    sel = ["select", "red", "-p", "0.1", "--mask", "--json", "--export"]
    local = wherein(*sel, str(tmp_path / "l.coco.json"), "--out", str(tmp_path / "m"))
    assert local.returncode == 0, local.stderr[-3000:]
    res = wherein(*sel, str(tmp_path / "r.coco.json"), "--engine", "ray", "--ray-address", address)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"ray: joining {address} with the auth token from ~/.ray/auth_token" in res.stderr
    docs = [json.loads((tmp_path / f"{e}.coco.json").read_text()) for e in ("l", "r")]
    for doc in docs:
        doc["info"].pop("date_created")
    assert docs[0] == docs[1] and len(docs[0]["annotations"]) == 3


@pytest.mark.slow
def test_wrong_token_is_one_line(head, photos, standin_models, tmp_path):
    address, token, _root = head
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(token)  # right, but RAY_AUTH_TOKEN comes first
    res = _embed(
        [str(photos), "--out", str(tmp_path / "emb"), "--engine", "ray"]
        + ["--ray-address", address, "--models", str(standin_models), "-q"],
        _clean_env(home, RAY_AUTH_TOKEN="not-the-token"),
    )
    assert res.returncode == 1
    assert _said(res) == [
        f"Error: the Ray cluster at {address} rejected the auth token from RAY_AUTH_TOKEN; "
        "use the head's token: `ray get-auth-token` on the head prints it"
    ]
    assert not (tmp_path / "emb" / "shards").exists() or not list(
        (tmp_path / "emb" / "shards").glob("*.done")
    )


@pytest.mark.slow
def test_missing_token_names_the_places_looked(head, tmp_path, monkeypatch):
    from wherein.indexer.scale.ray_connect import RayConnectError, join

    address, _token, _root = head
    for k in RAY_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(RayConnectError, match="requires an auth token and none was found"):
        join(address)


@pytest.mark.slow
def test_wrong_address_is_one_line(photos, standin_models, tmp_path):
    port = _free_port()  # nothing listens on it once the probe socket is closed
    res = _embed(
        [str(photos), "--out", str(tmp_path / "emb"), "--engine", "ray"]
        + ["--ray-address", f"127.0.0.1:{port}", "--models", str(standin_models), "-q"],
        _clean_env(tmp_path),
    )
    assert res.returncode == 1
    assert _said(res) == [
        f"Error: cannot reach a Ray cluster at 127.0.0.1:{port}: connection refused "
        "(nothing listens on that port); give the head's address and GCS port "
        "(`ray start --head --port PORT`, 6379 by default)"
    ]


def test_token_found_where_ray_looks_in_ray_order(tmp_path):
    from wherein.indexer.scale.ray_connect import RayConnectError, find_token

    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    (tmp_path / "tok").write_text(" from-path \n")
    env = {"HOME": str(tmp_path)}
    assert (find_token(env).value, find_token(env).source) == ("from-home", "~/.ray/auth_token")
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "tok")
    assert find_token(env).value == "from-path"
    assert find_token(env).source == f"RAY_AUTH_TOKEN_PATH ({tmp_path / 'tok'})"
    env["RAY_AUTH_TOKEN"] = "from-env"
    assert (find_token(env).value, find_token(env).source) == ("from-env", "RAY_AUTH_TOKEN")
    assert "from-env" not in repr(find_token(env))  # a secret stays out of reprs
    del env["RAY_AUTH_TOKEN"]
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "missing")
    with pytest.raises(RayConnectError, match="cannot read the token file"):
        find_token(env)  # Ray aborts here too, rather than fall back to ~/.ray
    del env["RAY_AUTH_TOKEN_PATH"]
    (tmp_path / ".ray" / "auth_token").unlink()
    assert find_token(env) is None


def test_stderr_filter_drops_only_rays_actor_restart_line():
    """The filter wherein puts on stderr while Ray Data runs: Ray's actor-restart ERROR line goes,
    everything else (other native errors, a progress bar's carriage returns) passes in order."""
    code = r"""
import os, sys
from wherein.indexer.scale.ray_quiet import stderr_without
noise = (b"[2026-12-01 11:18:55,261 E 13797 13797] core_worker.cc:2465: Actor with class name: "
         b"'MapWorker(MapBatches(Embedder))' and ID: '0b5f' has constructor arguments in the object "
         b"store and max_restarts > 0. If the arguments ... See https://github.com/ray-project/ray/issues/53727 for more details.\n")
with stderr_without():
    os.write(2, b"\r  0%|          | 0/12")
    os.write(2, noise)
    os.write(2, b"[2026-12-01 11:18:56,000 E 13797 13797] core_worker.cc:100: Task failed: OOM\n")
    sys.stderr.write("python warning\n")
os.write(2, b"after\n")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    assert res.stderr == (
        b"\r  0%|          | 0/12"
        b"[2026-12-01 11:18:56,000 E 13797 13797] core_worker.cc:100: Task failed: OOM\n"
        b"python warning\nafter\n"
    )
