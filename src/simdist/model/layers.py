"""Pre-norm transformer blocks on F.scaled_dot_product_attention, with cross-attention K/V computed once.

Cross-attention keys/values of a context come from `CrossAttention.kv` and are reused for every query set;
a context of batch 1 serves N query sets by folding them into one long query sequence (no copy of K/V).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

KV = tuple[torch.Tensor, torch.Tensor]


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ELU) -> nn.Sequential:
    """Linear layers with `activation` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(
            dim, 3 * dim, bias=False
        )  # a key bias has zero gradient; Adam would amplify its noise
        self.out = nn.Linear(dim, dim)

    def forward(
        self,
        x: torch.Tensor,
        *,
        causal: bool,
        last_only: bool = False,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, N, dim) -> (B, N, dim); with `last_only` (bidirectional only) just the last token's output (B, 1, dim).
        `key_mask` (B, N, bidirectional only): the tokens that may be attended to (False: padding)."""
        b, n, d = x.shape
        if key_mask is not None and causal:
            raise ValueError("key_mask is for bidirectional attention")
        if last_only:  # keys and values from every token, the query from the last one alone
            if causal:
                raise ValueError("last_only is for bidirectional attention")
            k, v = (
                F.linear(x, self.qkv.weight[d:])
                .view(b, n, 2, self.heads, d // self.heads)
                .permute(2, 0, 3, 1, 4)
            )
            q = (
                F.linear(x[:, -1:], self.qkv.weight[:d])
                .view(b, 1, self.heads, d // self.heads)
                .transpose(1, 2)
            )
            n = 1
        else:
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_context = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def kv(self, context: torch.Tensor) -> KV:
        """Keys and values (B, heads, S, dim/heads) of context tokens (B, S, dim)."""
        b, s, d = context.shape
        k, v = (
            self.kv_proj(self.norm_context(context))
            .view(b, s, 2, self.heads, d // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        return k, v

    def forward(self, x: torch.Tensor, kv: KV, key_mask: torch.Tensor | None) -> torch.Tensor:
        k, v = kv
        b, n, d = x.shape
        folded = k.shape[0] == 1 and b > 1
        if folded:  # one context, many query sets: attention is per query, so they can share one sequence
            x = x.reshape(1, b * n, d)
            key_mask = None if key_mask is None else key_mask[:1]
        q = self.q(x).view(x.shape[0], x.shape[1], self.heads, d // self.heads).transpose(1, 2)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = self.out(y.transpose(1, 2).reshape(x.shape[0], x.shape[1], d))
        return y.reshape(b, n, d) if folded else y


class FeedForward(nn.Module):
    def __init__(self, dim: int, ratio: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, ratio * dim), nn.GELU(), nn.Linear(ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DecoderBlock(nn.Module):
    """Self-attention over queries (causal by default), cross-attention to a context, feed-forward."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int, *, causal: bool = True) -> None:
        super().__init__()
        self.causal = causal
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, heads)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, mlp_ratio)

    def forward(self, x: torch.Tensor, kv: KV, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x), causal=self.causal)
        x = x + self.cross_attn(self.norm2(x), kv, key_mask)
        return x + self.ff(self.norm3(x))


class EncoderBlock(nn.Module):
    """Bidirectional self-attention and feed-forward."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, mlp_ratio)

    def forward(
        self, x: torch.Tensor, *, last_only: bool = False, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, N, dim) -> (B, N, dim), or with `last_only` the last token's output alone (B, 1, dim); `key_mask`
        (B, N): the tokens that may be attended to."""
        attended = self.self_attn(self.norm1(x), causal=False, last_only=last_only, key_mask=key_mask)
        x = (x[:, -1:] if last_only else x) + attended
        return x + self.ff(self.norm2(x))


class QueryDecoder(nn.Module):
    """A stack of decoder blocks over T query tokens with learned positions, ending in a norm and a linear head."""

    def __init__(self, dim: int, out_dim: int, horizon: int, layers: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(horizon, dim) * 0.02)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads, mlp_ratio) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out_dim)

    def cross_kv(self, context: torch.Tensor) -> list[KV]:
        return [block.cross_attn.kv(context) for block in self.blocks]

    def decode(self, x: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.position[: x.shape[1]]
        for block, layer_kv in zip(self.blocks, kv, strict=True):
            x = block(x, layer_kv, key_mask)
        return self.head(self.norm(x))
