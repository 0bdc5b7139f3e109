"""The LiteRT tower's query cleaning equals open_clip's, with or without ftfy imported."""

from __future__ import annotations

import random

import ftfy

from wherein.indexer.models.text_tower_litert import _fix_text


def test_ascii_text_skips_ftfy_only_where_ftfy_changes_nothing():
    rng = random.Random(2)
    alphabet = "".join(chr(c) for c in range(0x20, 0x7F))
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    texts += ["a &amp; b", "x &lt;y&gt;", "tab\tline\r\nbreak", "esc \x1b[31mred", "Ã©tÃ©", "ﬁne"]
    assert [_fix_text(t) for t in texts] == [ftfy.fix_text(t) for t in texts]
    assert _fix_text("a &amp; b") == "a & b"  # entities still reach ftfy
