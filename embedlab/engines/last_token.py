"""The last decoder layer of a causal model, computed only at the token LAST pooling reads.

With LAST pooling a forward's output is one hidden state per sequence: the last real
token's. Every layer but the last must still run at every position (each position's
keys and values feed the later ones), but the last layer's output is read at one
position per row. So that layer still computes keys and values at every position, but
its query, attention output, output projection and MLP at that one position only:
at 13 to 128 tokens about 87% of the layer's matrix work, 1/28 of a 28-layer forward.

Right padding means a row's last token sits at `lengths - 1`, and its keys past that are
padding, masked here as the causal mask would have masked them (padding comes after it).
The layer's own modules do the work (its norms, projections and MLP), so only the
attention's wiring is ours: rotary embedding and grouped-query attention as Llama-family
layers do them. `wrap_last_layer` refuses any model whose last layer does not look like
that, and the engine keeps the wrapper only once a probe forward agrees with the full one.

Imported by the transformers engine once torch is loaded.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

_NEEDED = ("input_layernorm", "post_attention_layernorm", "mlp", "self_attn")
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LastTokenLayer(nn.Module):
    """Stands in for a decoder layer; returns hidden states [rows, 1, hidden] at `lengths - 1`.

    `lengths` (a device tensor [rows]) is set by the caller before each forward: under a
    CUDA graph it is the graph's static lengths buffer, read at every replay. Set to None,
    the layer runs whole (its own, compiled forward) and returns every position.
    """

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self.lengths: torch.Tensor | None = None

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Any = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        lengths = self.lengths
        if lengths is None:
            return self.layer(
                hidden_states,
                attention_mask=attention_mask,
                position_embeddings=position_embeddings,
                **kwargs,
            )
        if position_embeddings is None:
            raise RuntimeError("LastTokenLayer needs the model's position embeddings")
        # A transformers decoder layer: its submodules are read by name, untyped.
        layer: Any = self.layer
        attn: Any = layer.self_attn
        rows, width, _ = hidden_states.shape
        head = attn.head_dim
        index = torch.arange(rows, device=hidden_states.device)
        last = lengths - 1
        x = layer.input_layernorm(hidden_states)
        key = attn.k_proj(x).view(rows, width, -1, head)
        if getattr(attn, "k_norm", None) is not None:
            key = attn.k_norm(key)
        key = key.transpose(1, 2)  # [rows, kv heads, width, head]
        value = attn.v_proj(x).view(rows, width, -1, head).transpose(1, 2)
        query = attn.q_proj(x[index, last][:, None]).view(rows, 1, -1, head)
        if getattr(attn, "q_norm", None) is not None:
            query = attn.q_norm(query)
        query = query.transpose(1, 2)  # [rows, heads, 1, head]
        cos, sin = position_embeddings  # [1 or rows, width, head]
        cos_k, sin_k = cos[:, None], sin[:, None]
        key = key * cos_k + _rotate_half(key) * sin_k
        pick = index if cos.shape[0] == rows else torch.zeros_like(index)
        cos_q, sin_q = cos[pick, last][:, None, None], sin[pick, last][:, None, None]
        query = query * cos_q + _rotate_half(query) * sin_q
        groups = query.shape[1] // key.shape[1]
        if groups > 1:
            key = key.repeat_interleave(groups, dim=1)
            value = value.repeat_interleave(groups, dim=1)
        valid = torch.arange(width, device=hidden_states.device) < lengths[:, None]
        out = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=valid[:, None, None, :], scale=attn.scaling
        )
        out = attn.o_proj(out.transpose(1, 2).reshape(rows, 1, -1))
        h = hidden_states[index, last][:, None] + out
        return h + layer.mlp(layer.post_attention_layernorm(h))


def wrap_last_layer(model: nn.Module) -> LastTokenLayer | None:
    """Put a `LastTokenLayer` in place of `model.layers[-1]`; None (and nothing changed)
    where the model's layers are not of the shape it knows."""
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        return None
    layer = layers[-1]
    attn = getattr(layer, "self_attn", None)
    if not all(hasattr(layer, a) for a in _NEEDED) or not all(hasattr(attn, a) for a in _ATTENTION):
        return None
    wrapper = LastTokenLayer(layer)
    layers[-1] = wrapper
    return wrapper


def unwrap_last_layer(model: nn.Module, wrapper: LastTokenLayer) -> None:
    """Put the original last layer back."""
    layers: Any = model.layers
    if layers[-1] is wrapper:
        layers[-1] = wrapper.layer
