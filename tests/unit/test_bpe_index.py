"""The indexed BPE gives the full tokenizer's ids, and its index follows tokenizer.json."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from wherein.indexer.models import bpe_index
from wherein.indexer.models.bpe_index import IndexedBPE, ensure_index, index_locations
from wherein.indexer.models.text_tower_litert import HFTokens, QueryTokenizer, hf_tokens

CORPUS = [
    "This is a photo of a red car parked by the sea.",
    "A dog runs on the beach at sunset; people watch.",
    "Café au lait, crème brûlée and straße in München.",
    "東京タワーの写真 and 日本語のテキスト",
    "emoji 🚗🔥 cars, 3 dogs and 12 cats!",
    "the the the then there their theory thermal",
] * 20

TEXTS = [
    "a red car",
    "This is a photo of a red car.",
    "",
    " ",
    "   spaced   out   ",
    "Ünïcödé ÇÀFÉ straße",
    "日本語のテキスト 東京タワー",
    "unseen ß ø Ω ж 🦀 chars",
    "emoji 🚗🔥 and a ZWJ family 👩\u200d👩\u200d👧",
    "<eos> <pad> a<bos>b <unk>",
    "tab\tand\nnew line",
    "▁▁ leading metaspace ▁",
    "¿Qué? ¡Sí! $%^&*()_+-=[]{};':\",./<>?",
    "ﬁ ligature ＡＢＣ fullwidth",
    "the " * 100,  # longer than any context: the encoder truncates, not the tokenizer
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdehlnorstuéü日本語 ▁!.,-🚗<>"
    words = " ".join(CORPUS).split()
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))))
        else:
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
    return out


def _gemma_like(path: Path) -> Path:
    """SentencePiece-style BPE as Gemma's tokenizer.json has it: ' ' -> '▁', byte fallback."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_previous")
    tok.decoder = decoders.ByteFallback()
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False)
    )
    tok.add_special_tokens(["<pad>", "<eos>", "<bos>", "<unk>"])
    tok.save(str(path))
    return path


def _byte_level(path: Path) -> Path:
    """GPT-2 style: the pre-tokenizer rewrites bytes as characters before the model sees them."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=500,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<|endoftext|>"],
            show_progress=False,
        ),
    )
    tok.save(str(path))
    return path


@pytest.fixture(params=[_gemma_like, _byte_level], ids=["gemma-like", "byte-level"])
def asset(request, tmp_path) -> Path:
    return request.param(tmp_path / "tokenizer.json")


def test_ids_equal_the_full_tokenizer(asset):
    full = HFTokens(asset)
    index = ensure_index(asset)
    assert index == asset.with_name("tokenizer.json" + bpe_index.INDEX_SUFFIX)
    fast = IndexedBPE(index)
    texts = TEXTS + _random_texts(300)
    got = [fast.encode(t) for t in texts]
    want = [full.encode(t) for t in texts]
    assert got == want
    assert any(len(ids) > 5 for ids in want)  # the corpus' merges really were exercised


def test_query_tokenizer_rows_equal_with_clean_truncation_and_eos(tmp_path):
    _gemma_like(tmp_path / "tokenizer.json")
    recipe = {
        "kind": "hf",
        "file": "tokenizer.json",
        "clean": "canonicalize",
        "context_length": 16,
        "pad_id": 0,
        "suffix": [1],
    }
    ours = QueryTokenizer(tmp_path, recipe)
    assert isinstance(ours.content, IndexedBPE)
    reference = QueryTokenizer(tmp_path, recipe)
    reference.content = HFTokens(tmp_path / "tokenizer.json")
    rows = ours(TEXTS)
    assert np.array_equal(rows, reference(TEXTS))
    assert rows.shape == (len(TEXTS), 16)
    assert rows[-1, -1] == 1  # the long text: truncated, EOS kept last


def _renumber(asset: Path, ids) -> None:
    """Rewrite tokenizer.json with every id mapped through ids (merges stay valid)."""
    spec = json.loads(asset.read_text())
    spec["model"]["vocab"] = {t: ids(i) for t, i in spec["model"]["vocab"].items()}
    for t in spec["added_tokens"]:
        t["id"] = spec["model"]["vocab"][t["content"]]
    asset.write_text(json.dumps(spec))


def test_a_changed_tokenizer_rebuilds_its_index(tmp_path):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    before = IndexedBPE(ensure_index(asset)).encode("the red car")
    _renumber(asset, lambda i: 10_000 + i)  # other size
    after = IndexedBPE(ensure_index(asset)).encode("the red car")
    assert after == [10_000 + i for i in before]
    assert after == HFTokens(asset).encode("the red car")


def test_same_size_other_bytes_is_caught_by_the_hash(tmp_path):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    _renumber(asset, lambda i: 10_000 + i)
    before = IndexedBPE(ensure_index(asset)).encode("the red car")
    size = asset.stat().st_size
    _renumber(asset, lambda i: 30_000 - i)  # five digits again: the same size, other bytes
    assert asset.stat().st_size == size
    after = IndexedBPE(ensure_index(asset)).encode("the red car")
    assert after == [30_000 - i for i in before]
    assert after == HFTokens(asset).encode("the red car")


def test_a_corrupt_index_is_rebuilt(tmp_path):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    index = ensure_index(asset)
    index.write_bytes(b"garbage")
    assert ensure_index(asset) == index
    assert IndexedBPE(index).encode("a red car") == HFTokens(asset).encode("a red car")


def test_a_touched_tokenizer_keeps_its_index(tmp_path, monkeypatch):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    index = ensure_index(asset)
    st = asset.stat()
    os.utime(asset, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    built = []
    monkeypatch.setattr(bpe_index, "build_index", lambda *a: built.append(a))
    assert ensure_index(asset) == index
    assert built == []  # same bytes: the stamp was refreshed, nothing rebuilt
    assert ensure_index(asset) == index
    assert IndexedBPE(index).encode("a red car") == HFTokens(asset).encode("a red car")


def test_read_only_models_folder_uses_the_user_cache(tmp_path, monkeypatch):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    cache = tmp_path / "cache" / "x.bpe-index"
    unwritable = asset / "beside"  # below a file: cannot be created
    monkeypatch.setattr(bpe_index, "index_locations", lambda a: [unwritable, cache])
    assert ensure_index(asset) == cache
    assert IndexedBPE(cache).encode("a red car") == HFTokens(asset).encode("a red car")


def test_default_locations_are_beside_the_asset_then_the_user_cache(tmp_path):
    beside, cached = index_locations(tmp_path / "tokenizer.json")
    assert beside == tmp_path / ("tokenizer.json" + bpe_index.INDEX_SUFFIX)
    assert cached.parent.name == "tokenizers" and cached.parent != tmp_path


def test_models_the_index_cannot_serve_load_in_full(tmp_path):
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "red": 1, "car": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    assert ensure_index(tmp_path / "tokenizer.json") is None
    content = hf_tokens(tmp_path / "tokenizer.json")
    assert isinstance(content, HFTokens)
    assert content.encode("red car") == [1, 2]


def test_a_special_token_that_merges_also_form_needs_no_other_entries(tmp_path):
    # "<eos>" is kept in every subset; its merges' parts are not substrings of "seo".
    chars = ["<", ">", "e", "o", "s"]
    vocab = {t: i for i, t in enumerate(["<unk>", *chars, "<e", "<eo", "s>", "<eos>", "se"])}
    merges = [("<", "e"), ("<e", "o"), ("s", ">"), ("<eo", "s>"), ("s", "e")]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>"))
    tok.add_special_tokens(["<eos>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    fast = IndexedBPE(ensure_index(tmp_path / "tokenizer.json"))
    full = HFTokens(tmp_path / "tokenizer.json")
    for text in ("seo", "se<eos>o", "<e", "s>"):
        assert fast.encode(text) == full.encode(text)


def test_a_subset_that_fails_to_build_falls_back_to_the_full_tokenizer(tmp_path, monkeypatch):
    asset = _gemma_like(tmp_path / "tokenizer.json")
    fast = hf_tokens(asset)
    assert isinstance(fast, IndexedBPE)

    def refuse(text):
        raise Exception("MergeTokenOutOfVocabulary")  # what tokenizers raises

    monkeypatch.setattr(fast, "tokenizer_for", refuse)
    assert fast.encode("a red car") == HFTokens(asset).encode("a red car")
