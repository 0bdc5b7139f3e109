"""The host pipeline (search/clipseg.py) reproduces transformers' CLIPSegForImageSegmentation.

The reference model (random weights, small but with the published host contract's
shapes: token width 512, vision width 768, 485 tokens at 352/16, reduce_dim 64) is
split into the three graphs' contracts:

    text    token embeddings [1,77,512] -> final-LayerNorm hidden states [1,77,512]
    vision  pixels [1,3,352,352]        -> hidden_states[4], [7], [10] (extract_layers 3/6/9, +1
                                           because hidden_states[0] is the embedding output)
    decoder (t3, t6, t9, cond)          -> logits [1,352,352]

Its token table and text projection are written in the published asset formats
(fp16 files; the weights are rounded to fp16 first so the files are exact), and the
project's host code runs over torch callables through the same code path as LiteRT
graphs. Tokens, cond and logits must match the whole reference model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from wherein.indexer.imaging import clipseg_input
from wherein.indexer.models.clipseg import ClipSeg, Features, sigmoid
from wherein.schemas.models import (
    CLIPSEG,
    CLIPSEG_EOT,
    CLIPSEG_IMAGE_SIZE,
    CLIPSEG_MEAN,
    CLIPSEG_STD,
    CLIPSEG_TEXT_LEN,
    CLIPSEG_TEXT_WIDTH,
    CLIPSEG_TOKENS,
    CLIPSEG_WIDTH,
)
from wherein.search.localize.masking import MaskResult

pytestmark = pytest.mark.parity

PROMPTS = [
    "a red square",
    "A photo of a cat.",
    "two dogs playing in the snow",
    "the man's bicycle, leaning (left)",
]


def small_reference():
    import torch
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation

    config = CLIPSegConfig(
        text_config={
            "hidden_size": CLIPSEG_TEXT_WIDTH,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "max_position_embeddings": CLIPSEG_TEXT_LEN,
        },
        vision_config={
            "hidden_size": CLIPSEG_WIDTH,
            "intermediate_size": 768,
            "num_hidden_layers": 10,
            "num_attention_heads": 12,
            "patch_size": 16,
            "image_size": 224,
        },
        projection_dim=CLIPSEG_TEXT_WIDTH,
        reduce_dim=64,
        extract_layers=[3, 6, 9],
        use_complex_transposed_convolution=True,  # rd64-refined
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = CLIPSegForImageSegmentation(config).eval()
    with torch.no_grad():
        # Larger-than-init weights so the pieces carry signal; fp16-exact where the bundle stores fp16.
        emb = model.clip.text_model.embeddings.token_embedding.weight
        emb.copy_((torch.randn_like(emb) * 0.5).half().float())
        proj = model.clip.text_projection.weight
        proj.copy_((torch.randn_like(proj) / CLIPSEG_TEXT_WIDTH**0.5).half().float())
        for lin in model.decoder.reduces:
            lin.weight.mul_(20)
    return model


class TorchGraph:
    """A torch callable behind LiteRTGraph's interface: inputs and outputs in slot order."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            out = self.fn(
                *(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) for x in inputs)
            )
        out = (out,) if isinstance(out, torch.Tensor) else out
        return [o.detach().numpy() for o in out]


def split(model):
    """The three graph contracts, cut out of the reference model."""
    import torch

    text_model = model.clip.text_model
    vision_model = model.clip.vision_model
    causal = torch.full((CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_LEN), float("-inf")).triu(1)[None, None]

    def text(emb):
        h = text_model.embeddings(inputs_embeds=emb)  # adds position embeddings
        h = text_model.encoder(inputs_embeds=h, attention_mask=causal).last_hidden_state
        return text_model.final_layer_norm(h)

    def vision(x):
        hs = vision_model(
            pixel_values=x, output_hidden_states=True, interpolate_pos_encoding=True
        ).hidden_states
        return tuple(hs[i + 1] for i in model.extract_layers)

    def decoder(t3, t6, t9, cond):
        return model.decoder((t3, t6, t9), cond).logits

    return TorchGraph(vision), TorchGraph(text), TorchGraph(decoder)


def write_assets(model, out: Path) -> Path:
    """The bundle's host assets: fp16 tables and HF-form vocab.json/merges.txt."""
    from wherein.indexer.models.standins.clipseg import write_bpe_files

    out.mkdir(parents=True, exist_ok=True)
    table = model.clip.text_model.embeddings.token_embedding.weight.detach().numpy()
    table.astype("<f2").tofile(out / "token_embedding_f16.bin")
    # nn.Linear stores [out, in]; the bundle stores input-major [in, out].
    w = model.clip.text_projection.weight.detach().numpy().T
    np.ascontiguousarray(w).astype("<f2").tofile(out / "text_projection_f16.bin")
    write_bpe_files(out)  # HF form: specials spelled <|startoftext|>/<|endoftext|>
    return out


def photo(size=(500, 375)) -> Image.Image:
    img = Image.new("RGB", size, (30, 90, 160))
    d = ImageDraw.Draw(img)
    d.ellipse((60, 40, 300, 260), fill=(220, 40, 30))
    d.rectangle((320, 200, 480, 360), fill=(250, 230, 40))
    rng = np.random.default_rng(1)
    noise = rng.integers(-20, 20, (size[1], size[0], 3))
    return Image.fromarray(np.clip(np.asarray(img, np.int32) + noise, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def reference():
    return small_reference()


@pytest.fixture(scope="module")
def assets(reference, tmp_path_factory) -> Path:
    return write_assets(reference, tmp_path_factory.mktemp("clipseg-parity"))


@pytest.fixture(scope="module")
def host(reference, assets) -> ClipSeg:
    return ClipSeg.from_parts(*split(reference), assets_dir=assets)


@pytest.fixture(scope="module")
def hf_tokenizer(assets):
    from transformers import CLIPTokenizer

    return CLIPTokenizer.from_pretrained(str(assets))  # reads the bundle's vocab.json + merges.txt


def hf_ids(tok, prompt: str) -> list[int]:
    return tok(prompt, padding="max_length", max_length=CLIPSEG_TEXT_LEN, truncation=True)[
        "input_ids"
    ]


def test_tokens_match_clip_tokenizer(host, hf_tokenizer):
    for prompt in [*PROMPTS, "word " * 100]:
        ours = host.tokenize(prompt).tolist()
        ref = hf_ids(hf_tokenizer, prompt)
        eot = ours.index(CLIPSEG_EOT)
        assert ours[: eot + 1] == ref[: eot + 1], prompt
        assert len(ours) == len(ref) == CLIPSEG_TEXT_LEN


def test_preprocessing_matches_the_cidas_processor_config():
    from transformers import ViTImageProcessor

    proc = ViTImageProcessor(
        do_resize=True,
        size={"height": CLIPSEG_IMAGE_SIZE, "width": CLIPSEG_IMAGE_SIZE},
        resample=Image.BILINEAR,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=list(CLIPSEG_MEAN),
        image_std=list(CLIPSEG_STD),
    )
    img = photo()
    ref = np.asarray(proc(images=img, return_tensors="np")["pixel_values"][0])
    ours = clipseg_input(img)
    assert ref.shape == ours.shape == (3, CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE)
    # Identical up to uint8 rounding of a few resized pixels (one 1/255 step, < 0.1% of values).
    one_step = 1 / (255 * min(CLIPSEG_STD))
    diff = np.abs(ours - ref)
    assert diff.max() <= one_step * 1.01
    assert (diff > 1e-4).mean() < 1e-3


def test_vision_outputs_are_layers_3_6_9(reference, host):
    """hidden_states[i + 1] is the output of encoder layer i (0-based): check it with hooks."""
    seen = {}
    hooks = [
        reference.clip.vision_model.encoder.layers[i].register_forward_hook(
            lambda _m, _in, out, i=i: seen.__setitem__(i, out[0] if isinstance(out, tuple) else out)
        )
        for i in (3, 6, 9)
    ]
    try:
        feats = host.image_features(photo())
    finally:
        for h in hooks:
            h.remove()
    for t, i in zip(feats.in_slot_order(), (3, 6, 9), strict=True):
        assert t.shape == (1, CLIPSEG_TOKENS, CLIPSEG_WIDTH)
        np.testing.assert_allclose(t, seen[i].detach().numpy(), atol=1e-5)
    assert not np.allclose(feats.t3, feats.t6, atol=1e-2)


def test_cond_and_logits_match_the_whole_reference_model(reference, host, hf_tokenizer):
    import torch

    img = photo()
    pixels = torch.from_numpy(clipseg_input(img)[None])
    feats = host.image_features(img)
    for prompt in PROMPTS:
        ids = hf_ids(hf_tokenizer, prompt)
        with torch.inference_mode():
            out = reference(
                input_ids=torch.tensor([ids]),
                pixel_values=pixels,
                attention_mask=torch.tensor(
                    [
                        [1] * (ids.index(CLIPSEG_EOT) + 1)
                        + [0] * (CLIPSEG_TEXT_LEN - ids.index(CLIPSEG_EOT) - 1)
                    ]
                ),
            )
        ref_cond = out.conditional_embeddings[0].numpy()
        ref_logits = out.logits[0].numpy()
        cond = host.encode_prompt(prompt)
        np.testing.assert_allclose(cond, ref_cond, rtol=1e-4, atol=1e-4 * np.abs(ref_cond).max())
        logits = host.logits(feats, cond)
        scale = np.abs(ref_logits).max()
        np.testing.assert_allclose(logits, ref_logits, atol=1e-4 * scale)
        assert (
            ref_logits.std() > 1e-3 * scale
        )  # the map is not flat: the comparison means something
        # The mask is a deterministic function of the logits: same pixels.
        ours = MaskResult.from_probability(prompt, host.decode(feats, cond), img.size)
        ref = MaskResult.from_probability(prompt, sigmoid(ref_logits), img.size)
        assert (ours.mask != ref.mask).mean() < 1e-4
    # The comparison can fail: a swapped binding or another cond gives other logits.
    swapped = host.logits(Features(feats.t6, feats.t3, feats.t9), host.encode_prompt(PROMPTS[0]))
    assert not np.allclose(
        swapped, host.logits(feats, host.encode_prompt(PROMPTS[0])), atol=1e-2 * scale
    )


@pytest.mark.convert
@pytest.mark.slow
def test_converted_graphs_match_the_reference(reference, host, assets, tmp_path):
    """The same pieces through litert-torch: LiteRT graphs with the published contract, same results."""
    import litert_torch
    import torch

    from wherein.indexer.models.litert_graph import LiteRTGraph

    vision, text, decoder = split(reference)
    ex = {
        "vision": (torch.zeros(1, 3, CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE),),
        "text": (torch.zeros(1, CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_WIDTH),),
        "decoder": tuple(torch.zeros(1, CLIPSEG_TOKENS, CLIPSEG_WIDTH) for _ in range(3))
        + (torch.zeros(1, CLIPSEG_TEXT_WIDTH),),
    }

    class Wrap(torch.nn.Module):
        def __init__(self, fn) -> None:
            super().__init__()
            self.fn = fn
            self.model = reference  # registered so its parameters export as constants

        def forward(self, *xs):
            return self.fn(*xs)

    graphs = []
    for name, piece, spec in zip(
        ("vision", "text", "decoder"), (vision, text, decoder), CLIPSEG.graphs, strict=True
    ):
        path = tmp_path / spec.filename
        litert_torch.convert(Wrap(piece.fn).eval(), ex[name]).export(str(path))
        g = LiteRTGraph(path, 2)
        g.check(spec)
        graphs.append(g)
    lite = ClipSeg.from_parts(*graphs, assets_dir=assets)
    img = photo()
    ft, fl = host.image_features(img), lite.image_features(img)
    for a, b in zip(ft.in_slot_order(), fl.in_slot_order(), strict=True):
        np.testing.assert_allclose(b, a, atol=2e-3 * np.abs(a).max())
    for prompt in PROMPTS[:2]:
        ct, cl = host.encode_prompt(prompt), lite.encode_prompt(prompt)
        np.testing.assert_allclose(cl, ct, atol=2e-3 * np.abs(ct).max())
        lt, ll = host.logits(ft, ct), lite.logits(fl, cl)
        np.testing.assert_allclose(ll, lt, atol=5e-3 * np.abs(lt).max())
