"""What the web app loads: a photo library served never maps PyAV (FFmpeg's libraries)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from wherein.search.cli import cli

# Every photo request kind the web page makes, in a fresh process: then which of the
# heavy modules it holds. av is FFmpeg (~16 MB mapped); only a video may bring it in.
SERVE_PHOTOS = """
import sys
from pathlib import Path
from fastapi.testclient import TestClient
import wherein.search.service.serve
from wherein.search.web.app import create_app

index, models = Path(sys.argv[1]), Path(sys.argv[2])
with TestClient(create_app(index, models, prefetch_masks=0), base_url="http://127.0.0.1") as c:
    hits = c.get("/api/search", params={"q": "red", "per_page": 50}).json()["hits"]
    assert hits, "no hits"
    for h in hits:
        for url in (
            f"/api/thumb/{h['id']}",
            f"/api/image/{h['id']}",
            f"/api/mask/{h['id']}?prompt=red",
            f"/api/mask/{h['id']}/overlay?prompt=red",
        ):
            r = c.get(url)
            assert r.status_code == 200, (url, r.status_code, r.text[:200])
    assert c.get("/api/search", params={"like": hits[0]["id"]}).status_code == 200
    assert c.get("/api/status").status_code == 200
print(" ".join(m for m in ("av", "torch") if m in sys.modules))
"""


def test_serving_photos_never_imports_pyav(standin_models, shapes, tmp_path: Path):
    index = tmp_path / "index"
    r = CliRunner().invoke(
        cli, ["index", str(shapes), "--index", str(index), "--models", str(standin_models), "-q"]
    )
    assert r.exit_code == 0, r.output
    out = subprocess.run(
        [sys.executable, "-c", SERVE_PHOTOS, str(index), str(standin_models)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "av" not in out.stdout.split(), "serving photos imported PyAV"
