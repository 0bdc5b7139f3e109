"""`quiet()` hides converter chatter written at the descriptor level, but not its errors."""

from __future__ import annotations

import logging
import os

import pytest

from wherein.indexer.models.convert.quiet import quiet


def test_chatter_is_hidden(capfd):
    with quiet():
        os.write(1, b"[START] progress tree\n")
        os.write(2, b"I0000 flatbuffer_export.cc] ops\n")
        logging.getLogger("torch.export").warning("export chatter")
    print("after")
    out, err = capfd.readouterr()
    assert (out, err) == ("after\n", "")


def test_output_is_replayed_when_conversion_fails(capfd):
    with pytest.raises(RuntimeError), quiet():
        os.write(2, b"converter: unsupported op aten.foo\n")
        raise RuntimeError("conversion failed")
    assert "unsupported op aten.foo" in capfd.readouterr().err


def test_settings_are_restored():
    before = os.environ.get("LITERT_TORCH_SHOW_PROGRESS"), logging.getLogger("torch").level
    with quiet():
        assert os.environ["LITERT_TORCH_SHOW_PROGRESS"] == "n"
    assert (
        os.environ.get("LITERT_TORCH_SHOW_PROGRESS"),
        logging.getLogger("torch").level,
    ) == before
