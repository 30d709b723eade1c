"""Tiny vision-language backbones generated locally, so LeRobot's VLA classes (SmolVLA) run on
machines without hub access: a small random SmolVLM config (vision tower + Llama text model), its
image processor, and a word-level tokenizer trained on the task instructions, written to a
directory LeRobot loads as it would a hub id (`vlm_model_name=<dir>`).

    d = make_tiny_smolvlm("runs/tiny-smolvlm", ["reach the red target", "lift the cube"])
    policy = build_lerobot_policy("smolvla", ..., vlm_model_name=str(d))

With real weights the same path is a directory downloaded elsewhere (`policy.path=<dir>`). The
backbone's weights here are random: this exercises LeRobot's real code paths (tokenization,
the vision tower, the action expert, flow sampling, save/load), not a pretrained VLM.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

# what a directory must hold for LeRobot's SmolVLA to build on it (config, processor, tokenizer)
SMOLVLM_FILES = ("config.json", "processor_config.json", "tokenizer.json", "tokenizer_config.json")
_SPECIAL = {
    "image_token": "<image>",
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}


class BackboneFilesMissing(FileNotFoundError):
    """A backbone directory without the files a VLA needs, named in one line."""


def check_backbone_dir(path: str | Path, files: Sequence[str] = SMOLVLM_FILES) -> Path:
    """`path` if it is a directory holding every file in `files`, else BackboneFilesMissing naming what is
    missing."""
    path = Path(path)
    if not path.is_dir():
        raise BackboneFilesMissing(f"backbone directory {path} does not exist")
    missing = [f for f in files if not (path / f).is_file()]
    if missing:
        raise BackboneFilesMissing(f"backbone directory {path} is missing {', '.join(missing)}")
    return path


def instruction_tokenizer(instructions: Sequence[str]):
    """A word-level tokenizer over the instructions' words (lower case), with SmolVLM's special
    tokens; unknown words map to <unk>."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rows = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    specials = ["<pad>", "<unk>", "<|im_start|>", *_SPECIAL.values(), "<video>", *rows]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([*instructions, "task : \n . , the a"], trainers.WordLevelTrainer(special_tokens=specials))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        model_max_length=256,
        extra_special_tokens=_SPECIAL,
    )


def make_tiny_smolvlm(
    path: str | Path,
    instructions: Sequence[str],
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    vision_hidden: int = 32,
    vision_layers: int = 1,
    image_size: int = 64,
    patch: int = 16,
) -> Path:
    """Write a tiny SmolVLM (config, image and video processors, tokenizer) to `path`."""
    from transformers import SmolVLMConfig
    from transformers.models.smolvlm.image_processing_smolvlm import SmolVLMImageProcessor
    from transformers.models.smolvlm.processing_smolvlm import SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = instruction_tokenizer(instructions)
    scale = 2
    seq = (image_size // patch) ** 2 // scale**2  # image tokens per image after the pixel shuffle
    size = {"longest_edge": image_size}
    images = SmolVLMImageProcessor(size=size, max_image_size=size, do_image_splitting=False)
    videos = SmolVLMVideoProcessor(size=size, max_image_size=size)
    SmolVLMProcessor(images, tok, videos, image_seq_len=seq).save_pretrained(path)
    cfg = SmolVLMConfig(
        vision_config={
            "hidden_size": vision_hidden,
            "intermediate_size": 2 * vision_hidden,
            "num_hidden_layers": vision_layers,
            "num_attention_heads": 2,
            "image_size": image_size,
            "patch_size": patch,
        },
        text_config={
            "model_type": "llama",
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": heads // 2,
            "head_dim": hidden // heads,
            "vocab_size": len(tok),
            "max_position_embeddings": 512,
            "pad_token_id": tok.pad_token_id,
        },
        scale_factor=scale,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        pad_token_id=tok.pad_token_id,
    )
    cfg.save_pretrained(path)
    (path / "instructions.json").write_text(json.dumps(list(instructions)))
    check_backbone_dir(path)
    return path


def tiny_smolvlm_for(instructions: Sequence[str], cache: str | Path | None = None) -> Path:
    """The tiny SmolVLM for these instructions, generated once into the cache (atomically: a
    learner and its actors may ask at the same time)."""
    import hashlib
    import os
    import shutil
    import tempfile

    root = Path(cache) if cache else Path(os.environ.get("ROBO_ASYNC_CACHE", Path.home() / ".cache" / "robo_async"))
    key = hashlib.sha1(json.dumps(sorted(set(instructions))).encode()).hexdigest()[:10]
    final = root / "backbones" / f"tiny-smolvlm-{key}"
    if final.is_dir():
        return check_backbone_dir(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-smolvlm-", dir=final.parent))
    make_tiny_smolvlm(tmp, sorted(set(instructions)))
    try:
        os.rename(tmp, final)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return check_backbone_dir(final)
