"""Log-probabilities of target tokens, without holding a (tokens x vocabulary) tensor at once.

With Qwen3's 151,669-token vocabulary a few thousand positions of fp32 logits take
gigabytes, so long batches are scored in row chunks; when a backward pass follows,
each chunk's logits are recomputed in the backward instead of kept. On CPU a chunk is
kept small (64 MiB of logits, ~110 rows of Qwen3): the model service keeps freed memory
for reuse (`allocator.py`), so its footprint is a few chunks, and the matrix product is
no slower in chunks of that size than in one.

Scoring a row against the full vocabulary is most of the cost of training a small model,
and its backward pass doubles it. Rows whose loss has no gradient (a zero weight or
advantage: prompts, tool results) are therefore scored without a graph; their
log-probabilities are the same numbers, and the gradient of every other row is unchanged.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

LOGIT_CHUNK_BYTES = 64 << 20
CUDA_LOGIT_CHUNK_BYTES = 8 << 30


def chunk_rows(vocab_size: int, device: torch.device) -> int:
    budget = CUDA_LOGIT_CHUNK_BYTES if device.type == "cuda" else LOGIT_CHUNK_BYTES
    return max(1, budget // (4 * vocab_size))


def token_logprobs(
    hidden: torch.Tensor,
    head: nn.Module,
    targets: torch.Tensor,
    vocab_size: int,
    trained: torch.Tensor | None = None,
) -> torch.Tensor:
    """`log p(targets[i] | hidden[i])` in fp32, for hidden (N, H) and targets (N,) or (N, K)
    (K targets scored against the same row's distribution).

    `trained` (N,) marks the rows a backward pass will need; the others are computed
    without a graph. Without it every row follows torch's grad mode.
    """
    columns = targets if targets.dim() == 2 else targets[:, None]
    if trained is None or not torch.is_grad_enabled():
        scored = _rows_logprobs(hidden, head, columns, vocab_size)
    else:
        scored = _partly_trained_logprobs(hidden, head, columns, vocab_size, trained)
    return scored if targets.dim() == 2 else scored[:, 0]


def _partly_trained_logprobs(
    hidden: torch.Tensor,
    head: nn.Module,
    targets: torch.Tensor,
    vocab_size: int,
    trained: torch.Tensor,
) -> torch.Tensor:
    idle = (~trained).nonzero().squeeze(1)
    active = trained.nonzero().squeeze(1)
    scored = torch.empty(targets.shape, dtype=torch.float32, device=hidden.device)
    with torch.no_grad():
        scored[idle] = _rows_logprobs(hidden[idle], head, targets[idle], vocab_size)
    if active.numel() == 0:
        return scored
    return scored.index_put(
        (active,), _rows_logprobs(hidden[active], head, targets[active], vocab_size)
    )


def _rows_logprobs(
    hidden: torch.Tensor, head: nn.Module, targets: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    rows = chunk_rows(vocab_size, hidden.device)
    if hidden.shape[0] <= rows:
        return _chunk_logprobs(head, hidden, targets)
    recompute = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for start in range(0, hidden.shape[0], rows):
        piece, wanted = hidden[start : start + rows], targets[start : start + rows]
        if recompute:
            parts.append(checkpoint(_chunk_logprobs, head, piece, wanted, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(head, piece, wanted))
    return torch.cat(parts)


def _chunk_logprobs(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits: torch.Tensor = head(hidden).float()
    return logits.gather(-1, targets) - logits.logsumexp(-1, keepdim=True)


def next_token_logprobs(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The full fp32 next-token distribution (as log-probabilities) for each row of hidden."""
    logits: torch.Tensor = head(hidden).float()
    return logits.log_softmax(-1)
