"""The host-side contract of each model wherein runs (explained in docs/models.md).

Every loader checks a file against these specs at load time, so a wrong or
truncated download fails with one line naming the file and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SIGLIP_IMAGE_SIZE = 224
SIGLIP_EMBED_DIM = 768
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)
SIGLIP_PROMPT_TEMPLATE = "This is a photo of {}."

CLIPSEG_IMAGE_SIZE = 352
CLIPSEG_MEAN = (0.485, 0.456, 0.406)  # ImageNet, as CIDAS' preprocessor_config.json says
CLIPSEG_STD = (0.229, 0.224, 0.225)
CLIPSEG_TOKENS = 485  # 22*22 patches + CLS
CLIPSEG_WIDTH = 768
CLIPSEG_TEXT_LEN = 77
CLIPSEG_TEXT_WIDTH = 512
CLIPSEG_VOCAB = 49408
CLIPSEG_SOT = 49406
CLIPSEG_EOT = 49407
CLIPSEG_MASK_THRESHOLD = 0.5


@dataclass(frozen=True)
class ImageInput:
    """How an image model wants its pixels: squashed (no crop) to size x size with `resample`,
    then (x / 255 - mean) / std per RGB channel, as a [3, size, size] float32 array."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resample: str = "bicubic"  # a PIL.Image.Resampling name, lower case


@dataclass(frozen=True)
class EmbedderSpec:
    """What every layer asks of the embedding model instead of hard-wiring it: its input,
    its vector width and how a text term becomes the prompt its text side reads."""

    key: str  # the registry key (indexer/models/registry.py)
    title: str
    image: ImageInput
    dim: int
    template: str | None = None  # "{}" is the term; None: the term as typed


SIGLIP2 = EmbedderSpec(
    key="siglip2",
    title="SigLIP 2 ViT-B/16",
    image=ImageInput(SIGLIP_IMAGE_SIZE, SIGLIP_MEAN, SIGLIP_STD, "bicubic"),
    dim=SIGLIP_EMBED_DIM,
    template=SIGLIP_PROMPT_TEMPLATE,
)


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class GraphSpec:
    """A LiteRT graph: inputs bound by signature slot (args_N), outputs by output_N."""

    filename: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # A graph may carry extra signatures with a larger batch (first dim); see ImageTower.
    batchable: bool = False


@dataclass(frozen=True)
class AssetSpec:
    filename: str
    size_bytes: int | None = None  # None: any size, must exist
    description: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """One model as wherein lays it out in its models directory."""

    key: str  # subdirectory of the models dir
    title: str
    hub_repo: str
    hub_files: tuple[str, ...] = ()  # allow-patterns; empty = whole repo
    graphs: tuple[GraphSpec, ...] = ()
    assets: tuple[AssetSpec, ...] = field(default_factory=tuple)


def image_graph(spec: EmbedderSpec, filename: str) -> GraphSpec:
    """An image tower's LiteRT contract: [1,3,size,size] in the family's input -> [1,dim]
    (extra batch signatures allowed)."""
    size = spec.image.size
    return GraphSpec(
        filename=filename,
        inputs=(TensorSpec((1, 3, size, size)),),
        outputs=(TensorSpec((1, spec.dim)),),
        batchable=True,
    )


SIGLIP_IMAGE = ModelSpec(
    key="siglip2-image",
    title="SigLIP 2 ViT-B/16 image tower (LiteRT)",
    hub_repo="litert-community/SigLIP2-base-patch16-224",
    hub_files=("siglip2_base_224_fp16.tflite",),
    graphs=(
        GraphSpec(
            filename="siglip2_base_224_fp16.tflite",
            inputs=(TensorSpec((1, 3, SIGLIP_IMAGE_SIZE, SIGLIP_IMAGE_SIZE)),),
            outputs=(TensorSpec((1, SIGLIP_EMBED_DIM)),),
            batchable=True,
        ),
    ),
)

SIGLIP_TEXT = ModelSpec(
    key="siglip2-text",
    title="SigLIP 2 ViT-B/16 text tower (open_clip)",
    hub_repo="timm/ViT-B-16-SigLIP2",
    hub_files=(
        "open_clip_config.json",
        "open_clip_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.model",
    ),
    assets=(AssetSpec("open_clip_config.json", None, "open_clip model config"),),
)

_CLIPSEG_FEATURE = TensorSpec((1, CLIPSEG_TOKENS, CLIPSEG_WIDTH))

CLIPSEG = ModelSpec(
    key="clipseg",
    title="CLIPSeg rd64 (three LiteRT graphs)",
    hub_repo="litert-community/CLIPSeg-rd64-LiteRT",
    hub_files=(
        "clipseg_text_fp16.tflite",
        "clipseg_vision_fp16.tflite",
        "clipseg_decoder.tflite",
        "token_embedding_f16.bin",
        "text_projection_f16.bin",
        "vocab.json",
        "merges.txt",
    ),
    graphs=(
        GraphSpec(
            filename="clipseg_vision_fp16.tflite",
            inputs=(TensorSpec((1, 3, CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE)),),
            outputs=(_CLIPSEG_FEATURE, _CLIPSEG_FEATURE, _CLIPSEG_FEATURE),  # t3, t6, t9
        ),
        GraphSpec(
            filename="clipseg_text_fp16.tflite",
            inputs=(TensorSpec((1, CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_WIDTH)),),
            outputs=(TensorSpec((1, CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_WIDTH)),),
        ),
        GraphSpec(
            filename="clipseg_decoder.tflite",
            inputs=(
                _CLIPSEG_FEATURE,
                _CLIPSEG_FEATURE,
                _CLIPSEG_FEATURE,
                TensorSpec((1, CLIPSEG_TEXT_WIDTH)),
            ),
            outputs=(TensorSpec((1, CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE)),),
        ),
    ),
    assets=(
        AssetSpec(
            "token_embedding_f16.bin",
            CLIPSEG_VOCAB * CLIPSEG_TEXT_WIDTH * 2,
            "float16 [49408,512] token embedding table",
        ),
        AssetSpec(
            "text_projection_f16.bin",
            CLIPSEG_TEXT_WIDTH * CLIPSEG_TEXT_WIDTH * 2,
            "float16 [512,512] text projection, input-major",
        ),
        AssetSpec("vocab.json", None, "CLIP BPE vocabulary"),
        AssetSpec("merges.txt", None, "CLIP BPE merges"),
    ),
)

ALL_MODELS: tuple[ModelSpec, ...] = (SIGLIP_IMAGE, SIGLIP_TEXT, CLIPSEG)
MODELS_BY_KEY = {m.key: m for m in ALL_MODELS}

# A models directory built by tests/fixtures/make_standin_models.py carries this
# marker; wherein then says plainly that results come from stand-ins.
STANDIN_MARKER = "STANDIN.json"
# A models directory of another registered embedding model names it here ({"model": KEY}).
MODEL_MARKER = "MODEL.json"
