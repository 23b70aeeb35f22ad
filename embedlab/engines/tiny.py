"""Seeded tiny embedding models built locally (no model hub needed).

``build_tiny_model("bert", dir)`` writes a small BERT (MEAN pooling) and
``build_tiny_model("qwen3", dir)`` a small Qwen3 decoder laid out like
Qwen3-Embedding (LAST pooling, ``<|endoftext|>`` appended to every input).
``shape="qwen3-embedding-0.6b"`` gives random weights with the real 0.6B
shapes, for timing work. Both transformers and vLLM load the results.

torch, transformers, safetensors and tokenizers are imported inside the
functions so that importing this module stays cheap and dependency-free.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..defaults import MODEL_CACHE_ENV
from ..errors import ConfigError
from .tiny_tokenizers import write_bert_tokenizer, write_json, write_qwen_tokenizer

__all__ = [
    "ARCHS",
    "SHAPES",
    "MARKER",
    "build_tiny_model",
    "cached_tiny_model",
    "default_pooling",
    "read_marker",
]

MARKER = "embedlab-tiny.json"
# Bump when the files a build writes change, so stale caches are rebuilt.
BUILD_VERSION = 3

ARCHS = ("bert", "qwen3")
POOLING = {"bert": "MEAN", "qwen3": "LAST"}
SHAPES: dict[str, str] = {"qwen3-embedding-0.6b": "qwen3"}


def read_marker(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """Return the parsed ``embedlab-tiny.json`` of ``model_dir``, or None."""
    try:
        return json.loads((Path(model_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def default_pooling(model_dir: str | os.PathLike) -> str:
    """Intended pooling ("MEAN" or "LAST") for a model directory.

    Reads the embedlab marker, then a sentence-transformers ``1_Pooling``
    config, then guesses from ``config.json``: decoder-only (Qwen*/CausalLM)
    models pool LAST, everything else MEAN.
    """
    d = Path(model_dir)
    marker = read_marker(d)
    if marker and marker.get("pooling") in ("MEAN", "LAST", "CLS"):
        return str(marker["pooling"])
    try:
        st = json.loads((d / "1_Pooling" / "config.json").read_text())
        if st.get("pooling_mode_lasttoken"):
            return "LAST"
        if st.get("pooling_mode_cls_token"):
            return "CLS"
        if st.get("pooling_mode_mean_tokens"):
            return "MEAN"
    except (OSError, ValueError):
        pass
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError):
        return "MEAN"
    names = [str(a) for a in cfg.get("architectures") or []]
    model_type = str(cfg.get("model_type", ""))
    if model_type.startswith("qwen") or any(a.startswith("Qwen") or "CausalLM" in a for a in names):
        return "LAST"
    return "MEAN"


def _spec(arch: str, shape: str | None, seed: int) -> dict[str, Any]:
    if arch not in ARCHS:
        raise ConfigError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if shape is not None and SHAPES.get(shape) != arch:
        known = ", ".join(f"{s!r} (arch {a!r})" for s, a in SHAPES.items())
        raise ConfigError(f"unknown shape {shape!r} for arch {arch!r}; known: {known}")
    return {
        "arch": arch,
        "shape": shape,
        "seed": int(seed),
        "pooling": POOLING[arch],
        "dtype": "bfloat16" if shape else "float32",
        "build_version": BUILD_VERSION,
    }


def _state(path: Path, spec: dict[str, Any]) -> str:
    """Classify ``path``: missing, same (complete, same spec), stale (same
    model from an older BUILD_VERSION) or other (another model, not ours)."""
    marker = read_marker(path)
    if marker is None:
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return "missing"
        return "other"
    if any(marker.get(k) != spec[k] for k in ("arch", "shape", "seed")):
        return "other"
    return "same" if marker.get("build_version") == spec["build_version"] else "stale"


def build_tiny_model(
    arch: str,
    outdir: str | os.PathLike,
    *,
    shape: str | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Build a seeded model + tokenizer into ``outdir`` and return its path.

    The directory is built next to ``outdir`` and renamed into place, and the
    marker file is written last, so a half-built directory never looks
    complete. An existing complete build with the same spec is returned
    as is unless ``overwrite``; one from an older builder version is rebuilt;
    anything else already at ``outdir`` raises FileExistsError unless
    ``overwrite``.
    """
    spec = _spec(arch, shape, seed)
    out = Path(outdir).expanduser().absolute()
    state = _state(out, spec)
    if state == "same" and not overwrite:
        return out
    if state == "other" and not overwrite:
        what = read_marker(out) or "not a tiny model"
        raise FileExistsError(f"{out} exists ({what}); pass overwrite=True to replace it")
    # "stale" builds (older BUILD_VERSION) are ours: replace them silently.
    replace = overwrite or state == "stale"

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        if arch == "bert":
            vocab_size = write_bert_tokenizer(tmp)
            _write_bert_model(tmp, vocab_size, seed)
        elif shape is None:
            vocab_size, eos_id = write_qwen_tokenizer(tmp, model_max_length=512)
            _write_qwen_model(tmp, _qwen_tiny_config(vocab_size, eos_id), seed, "float32")
        else:
            _, eos_id = write_qwen_tokenizer(tmp, model_max_length=32768)
            _write_qwen_model(tmp, _qwen_06b_config(eos_id), seed, "bfloat16")
        write_json(tmp / MARKER, spec)  # last: its presence means "complete"
        # mkdtemp makes the dir 0700 and safetensors writes files 0600.
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        _install(tmp, out, spec, replace)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _install(tmp: Path, out: Path, spec: dict[str, Any], replace: bool) -> None:
    """Rename the finished build into place, tolerating a concurrent builder."""
    if replace and (out.exists() or out.is_symlink()):
        trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
    elif out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    try:
        os.rename(tmp, out)
    except OSError:
        # Another process finished the same build first: keep theirs.
        if _state(out, spec) != "same":
            raise


def cached_tiny_model(
    arch: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    shape: str | None = None,
) -> Path:
    """Return a seed-0 tiny model, building it on first use.

    It lives in ``<base>/<arch>[-<shape>]-seed0`` where ``<base>`` is
    ``cache_dir``, else ``$EMBEDLAB_CACHE``, else ``~/.cache/embedlab/models``.
    """
    base = cache_dir or os.environ.get(MODEL_CACHE_ENV) or "~/.cache/embedlab/models"
    name = f"{arch}-{shape}-seed0" if shape else f"{arch}-seed0"
    return build_tiny_model(arch, Path(base).expanduser() / name, shape=shape, seed=0)


# --------------------------------------------------------------------------
# writers


def _with_legacy_keys(cfg: dict[str, Any], dtype: str) -> dict[str, Any]:
    # Written for both transformers 4.x (torch_dtype, top-level rope_theta),
    # which vLLM may pin, and 5.x (dtype, rope_parameters).
    cfg = dict(cfg, dtype=dtype, torch_dtype=dtype)
    if "rope_theta" in cfg:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
        cfg["rope_scaling"] = None
    return cfg


def _write_bert_model(d: Path, vocab_size: int, seed: int) -> None:
    import torch
    from transformers import BertConfig, BertModel

    cfg = _with_legacy_keys(
        {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": vocab_size,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            # head_dim 32: vLLM's CPU attention supports head sizes 32, 64,
            # 80, ... only (16 fails at the first forward).
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 512,
            "type_vocab_size": 2,
            "initializer_range": 0.02,
            "layer_norm_eps": 1e-12,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            "classifier_dropout": None,
            "use_cache": True,
        },
        "float32",
    )
    write_json(d / "config.json", cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(BertConfig.from_dict(cfg))
    _save_state(model.state_dict(), d / "model.safetensors", torch.float32)


def _qwen_tiny_config(vocab_size: int, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        # GQA with head_dim != hidden/heads, like the real model; head_dim 32
        # is the smallest vLLM's CPU attention supports.
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "max_window_layers": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
    }


def _qwen_06b_config(eos_id: int) -> dict[str, Any]:
    # The config of Qwen/Qwen3-Embedding-0.6B; special-token ids point into
    # the tiny tokenizer's vocabulary instead of 151643.
    return dict(
        _qwen_tiny_config(151669, eos_id),
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=32768,
        max_window_layers=28,
    )


def _write_qwen_model(d: Path, raw_cfg: dict[str, Any], seed: int, dtype: str) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3Model

    cfg = _with_legacy_keys(raw_cfg, dtype)
    write_json(d / "config.json", cfg)
    config = Qwen3Config.from_dict(cfg)
    torch_dtype = getattr(torch, dtype)
    # Weights are stored like Qwen3-Embedding: base-model names, no lm_head
    # (tied), so AutoModel loads them without prefix juggling.
    if dtype == "float32":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen3Model(config)
        _save_state(model.state_dict(), d / "model.safetensors", torch_dtype)
        return
    # Big shape: skip transformers' init (slow for 0.6B params) and fill
    # tensors straight from a seeded generator, in names order.
    with torch.device("meta"):
        meta = Qwen3Model(config)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, p in sorted(meta.state_dict().items()):
        if name.endswith("norm.weight"):
            state[name] = torch.ones(p.shape, dtype=torch_dtype)
        else:
            t = torch.randn(p.shape, generator=gen, dtype=torch_dtype)
            state[name] = t.mul_(config.initializer_range)
    del meta
    _save_state(state, d / "model.safetensors", torch_dtype)


def _save_state(state: dict[str, Any], path: Path, dtype: Any) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().to(dtype).contiguous() for k, v in state.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})
