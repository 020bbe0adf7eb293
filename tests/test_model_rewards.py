"""Component tests for the CLIP-backbone rewards (aesthetic, clip_score, pickscore, hps).

Every backbone is built from a tiny config with random weights (no download): open_clip from a
config registered under :data:`TINY_OC`, transformers from a tiny ``CLIPConfig`` with a
character-level ``CLIPTokenizer``. Each reward is checked end to end (shape, dtype, determinism,
batch splitting, prompt dependence), against an independent computation with the library's own
forward, and through its file-loading path (a checkpoint saved to ``tmp_path``).
"""

import numpy as np
import pytest
import torch

from reward_models import REGISTRY, load_reward, to_pil
from reward_models._clip_backbones import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, preprocess
from reward_models.aesthetic import AestheticMLP

TINY_OC = "ddpo-grpo-test-tiny-clip"
TINY_OC_CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    # vocab_size must be the BPE vocab shipped with open_clip (49408) for its SimpleTokenizer
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
PROMPTS = ["a red circle", "a blue square", "a red circle", "two green triangles", "a purple square"]
CPU = dict(device="cpu")


def _images(n=5, h=48, w=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand((n, 3, h, w), generator=g)


def _scores(fn, images, prompts):
    scores, info = fn(images, prompts, [{} for _ in prompts])
    assert isinstance(info, dict)
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and scores.shape == (len(prompts),)
    assert np.isfinite(scores).all()
    return scores


def _check_contract(fn, fn_batch2, text_conditioned):
    """Shape/dtype, determinism, batch splitting, prompt (in)dependence, image dependence."""
    imgs = _images()
    s = _scores(fn, imgs, PROMPTS)
    np.testing.assert_array_equal(s, _scores(fn, imgs, PROMPTS))  # deterministic
    np.testing.assert_allclose(_scores(fn_batch2, imgs, PROMPTS), s, rtol=1e-5, atol=1e-5)  # batch split
    assert len(np.unique(s)) > 1  # depends on the image
    other = _scores(fn, imgs, ["a yellow triangle"] * len(PROMPTS))
    if text_conditioned:
        assert np.abs(other - s).max() > 1e-4
        # repeated prompts (GRPO groups) are encoded once but scored per image
        single = _scores(fn, imgs[:1], PROMPTS[:1])
        np.testing.assert_allclose(single, s[:1], rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(other, s)
    with pytest.raises(ValueError, match="B, 3, H, W"):
        fn(torch.zeros(2, 4, 8, 8), ["a", "b"], [{}, {}])
    return s


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def oc_model():
    open_clip = pytest.importorskip("open_clip")
    from open_clip import factory

    factory._MODEL_CONFIGS[TINY_OC] = TINY_OC_CFG
    torch.manual_seed(0)
    model = open_clip.create_model(TINY_OC, pretrained=None).eval()
    yield model
    factory._MODEL_CONFIGS.pop(TINY_OC, None)


@pytest.fixture(scope="module")
def oc_tokenizer(oc_model):
    import open_clip

    return open_clip.get_tokenizer(TINY_OC)


def _char_tokenizer():
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    letters = "abcdefghijklmnopqrstuvwxyz"
    for c in letters:
        vocab[c] = len(vocab)
    for c in letters:
        vocab[c + "</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[])


@pytest.fixture(scope="module")
def hf_clip(tmp_path_factory):
    """A tiny transformers CLIPModel + CLIPProcessor, also saved to disk."""
    pytest.importorskip("transformers")
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tok = _char_tokenizer()
    text = dict(
        vocab_size=len(tok.get_vocab()),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        projection_dim=16,
    )
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        projection_dim=16,
    )
    torch.manual_seed(0)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).eval()
    with torch.no_grad():
        model.logit_scale.fill_(np.log(100.0))  # PickScore_v1's value
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tok,
    )
    root = tmp_path_factory.mktemp("hf_clip")
    model.save_pretrained(root / "model")
    processor.save_pretrained(root / "processor")
    return {
        "model": model,
        "processor": processor,
        "model_dir": str(root / "model"),
        "processor_dir": str(root / "processor"),
    }


# ----------------------------------------------------------------------------- registry / preprocessing


def test_registered():
    assert {"aesthetic", "clip_score", "pickscore", "hps"} <= set(REGISTRY)


def test_preprocess_matches_pil_pipelines(oc_model):
    """The tensor preprocessing reproduces open_clip's / transformers' PIL transforms to within about
    one uint8 level (1/255/std = 0.015 after normalisation)."""
    from open_clip.transform import image_transform
    from transformers import CLIPImageProcessor

    g = torch.Generator().manual_seed(1)
    # smooth non-square image (bicubic of pure noise amplifies the uint8 rounding)
    imgs = torch.nn.functional.interpolate(torch.rand((2, 3, 10, 14), generator=g), size=(40, 56), mode="bilinear")
    pils = to_pil(imgs)
    q = torch.as_tensor(np.stack([np.asarray(p) for p in pils])).permute(0, 3, 1, 2).float() / 255.0
    for mode in ("shortest", "longest", "squash"):
        ref = torch.stack([image_transform(32, is_train=False, resize_mode=mode)(p) for p in pils])
        ours = preprocess(q, 32, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, mode)
        assert ours.shape == ref.shape == (2, 3, 32, 32)
        assert (ours - ref).abs().mean() < 0.008 and (ours - ref).abs().max() < 0.025, mode
    proc = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    ref = proc(images=pils, return_tensors="pt")["pixel_values"]
    ours = preprocess(q, 32, proc.image_mean, proc.image_std, "shortest")
    assert (ours - ref).abs().mean() < 0.008 and (ours - ref).abs().max() < 0.025
    # "longest" pads with black (0 before normalisation) around the resized image
    padded = preprocess(torch.ones(1, 3, 16, 32), 32, (0, 0, 0), (1, 1, 1), "longest")
    assert padded[0, :, :8].abs().max() == 0 and padded[0, :, -8:].abs().max() == 0
    assert torch.allclose(padded[0, :, 8:24], torch.ones(3, 16, 32))
    with pytest.raises(ValueError, match="resize_mode"):
        preprocess(q, 32, resize_mode="stretch")


# ----------------------------------------------------------------------------- aesthetic


def test_aesthetic_head_layout_matches_published_file():
    sd = AestheticMLP().state_dict()
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes == {
        "layers.0.weight": (1024, 768),
        "layers.0.bias": (1024,),
        "layers.2.weight": (128, 1024),
        "layers.2.bias": (128,),
        "layers.4.weight": (64, 128),
        "layers.4.bias": (64,),
        "layers.6.weight": (16, 64),
        "layers.6.bias": (16,),
        "layers.7.weight": (1, 16),
        "layers.7.bias": (1,),
    }


def test_aesthetic(hf_clip, tmp_path):
    torch.manual_seed(0)
    head = AestheticMLP(16).eval()
    fn = load_reward("aesthetic", clip=hf_clip["model"], head=head, **CPU)
    fn2 = load_reward("aesthetic", clip=hf_clip["model"], head=head, batch_size=2, **CPU)
    s = _check_contract(fn, fn2, text_conditioned=False)

    # independent computation: transformers' own forward on processor-free input (32 px = no resize)
    imgs = _images(h=32, w=32)
    mean = torch.tensor(OPENAI_CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_CLIP_STD).view(1, 3, 1, 1)
    model = hf_clip["model"]
    with torch.no_grad():
        emb = model.visual_projection(model.vision_model(pixel_values=(imgs - mean) / std).pooler_output)
        ref = head(emb / emb.norm(dim=-1, keepdim=True)).squeeze(-1).numpy()
    np.testing.assert_allclose(_scores(fn, imgs, PROMPTS), ref, rtol=1e-5, atol=1e-5)

    # loading: a full CLIPModel checkpoint directory + the head as .pth and .safetensors
    from safetensors.torch import save_file

    torch.save(head.state_dict(), tmp_path / "head.pth")
    save_file(head.state_dict(), str(tmp_path / "head.safetensors"))
    for name in ("head.pth", "head.safetensors"):
        loaded = load_reward("aesthetic", head_path=str(tmp_path / name), clip_model=hf_clip["model_dir"], **CPU)
        np.testing.assert_allclose(_scores(loaded, _images(), PROMPTS), s, rtol=1e-5, atol=1e-5)


def test_aesthetic_errors(hf_clip, tmp_path):
    with pytest.raises(
        ValueError, match=r"head_path.*improved-aesthetic-predictor.*reward\.kwargs\.aesthetic\.head_path"
    ):
        load_reward("aesthetic", clip=hf_clip["model"], **CPU)
    with pytest.raises(ValueError, match=r"head_path=.*nope\.pth.*is not a file"):
        load_reward("aesthetic", head_path=str(tmp_path / "nope.pth"), clip=hf_clip["model"], **CPU)
    torch.save({"weight": torch.zeros(2)}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="layers.0.weight"):
        load_reward("aesthetic", head_path=str(tmp_path / "bad.pth"), clip=hf_clip["model"], **CPU)
    with pytest.raises(ValueError, match="batch_size"):
        load_reward("aesthetic", head=AestheticMLP(16), clip=hf_clip["model"], batch_size=0, **CPU)


# ----------------------------------------------------------------------------- clip_score / hps (open_clip)


def _open_clip_reference(model, tokenizer, images, prompts):
    """cos(image, text) from open_clip's own forward; images must already be at the model size."""
    mean = torch.tensor(OPENAI_CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_CLIP_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        img_f, txt_f, _ = model((images - mean) / std, tokenizer(prompts))  # L2-normalised features
    return (img_f * txt_f).sum(-1).numpy()


def test_clip_score(oc_model, oc_tokenizer, tmp_path):
    kw = dict(model_name=TINY_OC, model=oc_model, **CPU)
    fn = load_reward("clip_score", **kw)
    s = _check_contract(fn, load_reward("clip_score", batch_size=2, **kw), text_conditioned=True)
    assert (np.abs(s) <= 1.0 + 1e-6).all()  # plain cosine
    imgs = _images(h=32, w=32)
    ref = _open_clip_reference(oc_model, oc_tokenizer, imgs, PROMPTS)
    np.testing.assert_allclose(_scores(fn, imgs, PROMPTS), ref, rtol=1e-5, atol=1e-5)

    # loading: a local checkpoint file given as `pretrained` (safetensors too)
    from safetensors.torch import save_file

    torch.save(oc_model.state_dict(), tmp_path / "clip.pt")
    save_file({k: v.contiguous() for k, v in oc_model.state_dict().items()}, str(tmp_path / "clip.safetensors"))
    for name in ("clip.pt", "clip.safetensors"):
        loaded = load_reward("clip_score", model_name=TINY_OC, pretrained=str(tmp_path / name), **CPU)
        np.testing.assert_allclose(_scores(loaded, _images(), PROMPTS), s, rtol=1e-5, atol=1e-5)

    # bfloat16 model: close to float32 (cosine computed in float32)
    bf = load_reward("clip_score", model_name=TINY_OC, pretrained=str(tmp_path / "clip.pt"), dtype="bfloat16", **CPU)
    np.testing.assert_allclose(_scores(bf, _images(), PROMPTS), s, atol=0.05)
    with pytest.raises(ValueError, match="prompts"):
        fn(_images(n=2), ["only one"], [{}])


def test_hps(oc_model, oc_tokenizer, tmp_path):
    kw = dict(model_name=TINY_OC, model=oc_model, **CPU)
    fn = load_reward("hps", **kw)
    s = _check_contract(fn, load_reward("hps", batch_size=2, **kw), text_conditioned=True)
    # square images: HPSv2's pad-to-square is a plain resize, so it equals clip_score on the same model
    np.testing.assert_allclose(s, _scores(load_reward("clip_score", **kw), _images(), PROMPTS), rtol=1e-6, atol=1e-6)
    # non-square images are padded (not cropped) to a square before the resize
    wide = _images(h=16, w=32)
    ref = _open_clip_reference(oc_model, oc_tokenizer, torch.nn.functional.pad(wide, (0, 0, 8, 8)), PROMPTS)
    np.testing.assert_allclose(_scores(fn, wide, PROMPTS), ref, rtol=1e-5, atol=1e-5)

    # loading: an HPSv2-style checkpoint, {"state_dict": {"module." + key: tensor}}
    ckpt = {"state_dict": {"module." + k: v.half() for k, v in oc_model.state_dict().items()}, "epoch": 1}
    torch.save(ckpt, tmp_path / "HPS_v2.1_tiny.pt")
    loaded = load_reward("hps", checkpoint=str(tmp_path / "HPS_v2.1_tiny.pt"), model_name=TINY_OC, **CPU)
    np.testing.assert_allclose(_scores(loaded, _images(), PROMPTS), s, atol=2e-3)  # fp16-stored weights


def test_hps_errors(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint.*xswu/HPSv2.*reward\.kwargs\.hps\.checkpoint"):
        load_reward("hps", **CPU)
    with pytest.raises(ValueError, match=r"checkpoint=.*missing\.pt.*is not a file"):
        load_reward("hps", checkpoint=str(tmp_path / "missing.pt"), **CPU)


# ----------------------------------------------------------------------------- pickscore (transformers)


def test_pickscore(hf_clip):
    kw = dict(model=hf_clip["model"], processor=hf_clip["processor"], **CPU)
    fn = load_reward("pickscore", **kw)
    s = _check_contract(fn, load_reward("pickscore", batch_size=2, **kw), text_conditioned=True)
    assert (np.abs(s) <= 100.0 + 1e-3).all()  # exp(logit_scale) * cosine, exp(logit_scale) = 100

    # independent computation: the processor + CLIPModel.forward (logits_per_image = scale * cos)
    imgs = _images(h=32, w=32)
    inputs = hf_clip["processor"](
        text=PROMPTS,
        images=list(imgs),
        do_rescale=False,
        padding=True,
        truncation=True,
        max_length=16,
        return_tensors="pt",
    )
    with torch.no_grad():
        ref = hf_clip["model"](**inputs).logits_per_image.diagonal().numpy()
    np.testing.assert_allclose(_scores(fn, imgs, PROMPTS), ref, rtol=1e-4, atol=1e-4)

    # loading from saved directories (the path a hub id takes)
    loaded = load_reward("pickscore", model=hf_clip["model_dir"], processor=hf_clip["processor_dir"], **CPU)
    np.testing.assert_allclose(_scores(loaded, _images(), PROMPTS), s, rtol=1e-5, atol=1e-5)
    # a bare tokenizer also works (images then use the model's size and the OpenAI mean/std)
    bare = load_reward("pickscore", model=hf_clip["model"], processor=hf_clip["processor"].tokenizer, **CPU)
    np.testing.assert_allclose(_scores(bare, _images(), PROMPTS), s, rtol=1e-5, atol=1e-5)
