"""Autoregressive sampling over the backbone with an attached adapter.

Requests that share weights are decoded together: each prompt is prefilled on its
own (no padding, so its keys and values are exactly those of a full forward), then
the caches are left-padded into one batch and every sample is decoded in lockstep;
finished rows leave the batch, and a request is answered as soon as its own rows have
finished. Between two steps the batch takes in requests that arrived meanwhile (`serve`),
so a short request never waits for a long batch to end: one caller's long, concurrent
calls once held an independent one-token call for seconds. The logprob reported for
a sampled token is the model's own fp32 log-probability of it (temperature 1, before
top-k/top-p), which is what a forward pass over the same tokens computes, so on-policy
importance ratios are 1.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional
from transformers import DynamicCache

from synth_pipelines.tinker_local.backbone import Backbone, layer_states
from synth_pipelines.tinker_local.lora import LoraSlot
from synth_pipelines.tinker_local.token_logprobs import (
    chunk_rows,
    next_token_logprobs,
    token_logprobs,
)

StopReason = Literal["stop", "length"]
MAX_ROWS = 64
"""The most samples decoded in one batch."""
EMPTY_TOPK_LOGPROB = -99999.0


@dataclass(frozen=True)
class DecodeParams:
    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class PromptScoring:
    """Which prompt positions get logprobs: all after the first, or only the last `last_n`."""

    last_n: int | None = None
    topk: int = 0


@dataclass(frozen=True)
class ForcedCompletion:
    """A completion decided in advance (scripted mode): only its logprobs are computed,
    unless they are given too (`logprobs`), and then the model is not run for it."""

    tokens: tuple[int, ...]
    stop_reason: StopReason
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class SampleJob:
    prompt: tuple[int, ...]
    num_samples: int
    params: DecodeParams
    scoring: PromptScoring | None = None
    topk_sample: int = 0
    forced: tuple[ForcedCompletion, ...] | None = None


@dataclass(frozen=True)
class TopkRows:
    token_ids: np.ndarray
    logprobs: np.ndarray


@dataclass(frozen=True)
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    topk: TopkRows | None = None


@dataclass(frozen=True)
class SampleOutput:
    sequences: list[SampledSequence]
    prompt_logprobs: np.ndarray | None = None
    prompt_topk: TopkRows | None = None


@dataclass
class _Prefill:
    cache: DynamicCache
    next_logprobs: torch.Tensor
    prompt_logprobs: np.ndarray | None
    prompt_topk: TopkRows | None


@dataclass
class _Row:
    job: int
    prompt_length: int
    params: DecodeParams
    generator: torch.Generator
    topk: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    topk_ids: list[np.ndarray] = field(default_factory=list)
    topk_logprobs: list[np.ndarray] = field(default_factory=list)
    stop_reason: StopReason | None = None

    def sequence(self) -> SampledSequence:
        topk = None
        if self.topk:
            topk = TopkRows(np.stack(self.topk_ids), np.stack(self.topk_logprobs))
        return SampledSequence(self.tokens, self.logprobs, self.stop_reason or "length", topk)


class Sampler:
    """Runs sample jobs on a backbone whose adapter the caller has attached."""

    def __init__(self, backbone: Backbone):
        self.backbone = backbone
        self.decoder = backbone.network.get_decoder()
        self.head = backbone.network.get_output_embeddings()
        self.next_logprobs = _MergedHead.over(self.head)

    def run(self, jobs: Sequence[SampleJob]) -> list[SampleOutput]:
        """Every job's output, in order, from one batch that takes in nothing else."""
        outputs: dict[int, SampleOutput] = {}
        self.serve(jobs, outputs.__setitem__, lambda _room: [])
        return [outputs[index] for index in range(len(jobs))]

    @torch.inference_mode()
    def serve(
        self,
        jobs: Sequence[SampleJob],
        done: Callable[[int, SampleOutput], None],
        admit: Callable[[int], Sequence[SampleJob]],
    ) -> None:
        """Decode `jobs`, calling `done(index, output)` as each finishes; between steps,
        `admit(room)` hands over jobs that arrived since (free ones, with at most `room`
        samples in all), which join the batch under the next indices."""
        free: list[tuple[int, SampleJob]] = []
        for index, job in enumerate(jobs):
            if job.forced is not None:
                done(index, self._score_forced(job))
            else:
                free.append((index, job))
        if free:
            _Batch(self, free, done, admit, len(jobs)).decode()

    def _record(
        self, rows: list[_Row], active: list[int], chosen: torch.Tensor, logprobs: torch.Tensor
    ) -> list[int]:
        """Append each row's token; return the rows that go on decoding."""
        picked = logprobs.gather(1, chosen[:, None]).squeeze(1).tolist()
        topk_width = max(rows[i].topk for i in active)
        top = logprobs.topk(topk_width, dim=-1) if topk_width else None
        still = []
        for position, (index, token) in enumerate(zip(active, chosen.tolist(), strict=True)):
            row = rows[index]
            row.tokens.append(token)
            row.logprobs.append(picked[position])
            if top is not None and row.topk:
                row.topk_ids.append(top.indices[position, : row.topk].cpu().numpy())
                row.topk_logprobs.append(top.values[position, : row.topk].cpu().numpy())
            row.stop_reason = self._stop_reason(row)
            if row.stop_reason is None:
                still.append(index)
        return still

    def _stop_reason(self, row: _Row) -> StopReason | None:
        params = row.params
        if row.tokens[-1] in params.stop_token_ids:
            return "stop"
        if params.stop_strings and self._ends_in_stop_string(row.tokens, params.stop_strings):
            return "stop"
        if len(row.tokens) >= params.max_tokens:
            return "length"
        return None

    def _ends_in_stop_string(self, tokens: list[int], stops: tuple[str, ...]) -> bool:
        # A stop string cannot have been completed before the newest token, or decoding
        # would have stopped then; a tail wide enough to hold the longest one suffices.
        window = 4 * max(len(stop) for stop in stops) + 4
        tail = self.backbone.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(stop in tail for stop in stops)

    def _prefill(self, job: SampleJob) -> _Prefill:
        prompt = torch.tensor(job.prompt, device=self.backbone.device)
        cache = DynamicCache(config=self.backbone.network.config)
        hidden = self.decoder(
            input_ids=prompt[None], past_key_values=cache, use_cache=True
        ).last_hidden_state[0]
        next_logprobs = self.next_logprobs(hidden[-1:])[0]
        if job.scoring is None:
            return _Prefill(cache, next_logprobs, None, None)
        prompt_logprobs, prompt_topk = self._score_prompt(prompt, hidden, job.scoring)
        return _Prefill(cache, next_logprobs, prompt_logprobs, prompt_topk)

    def _score_prompt(
        self, prompt: torch.Tensor, hidden: torch.Tensor, scoring: PromptScoring
    ) -> tuple[np.ndarray, TopkRows | None]:
        length = prompt.shape[0]
        first = 1 if scoring.last_n is None else length - scoring.last_n
        values = np.full(length, np.nan, dtype=np.float32)
        top_ids = np.zeros((length, scoring.topk), dtype=np.int32)
        top_values = np.full((length, scoring.topk), EMPTY_TOPK_LOGPROB, dtype=np.float32)
        step = chunk_rows(self.backbone.vocab_size, self.backbone.device)
        for start in range(first, length, step):
            stop = min(start + step, length)
            logprobs = next_token_logprobs(self.head, hidden[start - 1 : stop - 1])
            wanted = logprobs.gather(1, prompt[start:stop, None]).squeeze(1)
            values[start:stop] = wanted.cpu().numpy()
            if scoring.topk:
                top = logprobs.topk(scoring.topk, dim=-1)
                top_ids[start:stop] = top.indices.cpu().numpy()
                top_values[start:stop] = top.values.cpu().numpy()
        return values, TopkRows(top_ids, top_values) if scoring.topk else None

    def _batch_cache(
        self, jobs: list[SampleJob], prefills: list[_Prefill]
    ) -> tuple[DynamicCache, torch.Tensor | None]:
        """One cache for all samples: prompts left-padded to the longest, repeated per sample."""
        if len(jobs) == 1:
            cache = prefills[0].cache
            if jobs[0].num_samples > 1:
                cache.batch_repeat_interleave(jobs[0].num_samples)
            return cache, None
        width = max(len(job.prompt) for job in jobs)
        cache = DynamicCache(config=self.backbone.network.config)
        stored = [layer_states(prefill.cache) for prefill in prefills]
        for layer in range(len(stored[0])):
            keys, values = [], []
            for job, states in zip(jobs, stored, strict=True):
                stored_keys, stored_values = states[layer]
                pad = (0, 0, width - len(job.prompt), 0)
                keys.append(functional.pad(stored_keys, pad).repeat_interleave(job.num_samples, 0))
                values.append(
                    functional.pad(stored_values, pad).repeat_interleave(job.num_samples, 0)
                )
            cache.update(torch.cat(keys), torch.cat(values), layer)
        if all(len(job.prompt) == width for job in jobs):
            return cache, None
        mask = torch.cat(
            [
                torch.cat(
                    [
                        torch.zeros(job.num_samples, width - len(job.prompt), dtype=torch.long),
                        torch.ones(job.num_samples, len(job.prompt), dtype=torch.long),
                    ],
                    dim=1,
                )
                for job in jobs
            ]
        ).to(self.backbone.device)
        return cache, mask

    def _score_forced(self, job: SampleJob) -> SampleOutput:
        assert job.forced is not None
        prompt_length = len(job.prompt)
        sequences, prompt_logprobs, prompt_topk = [], None, None
        for completion in job.forced:
            if completion.logprobs is not None:
                sequences.append(
                    SampledSequence(
                        list(completion.tokens), list(completion.logprobs), completion.stop_reason
                    )
                )
                continue
            tokens = torch.tensor(job.prompt + completion.tokens, device=self.backbone.device)
            hidden = self.decoder(input_ids=tokens[None]).last_hidden_state[0]
            completion_hidden = hidden[prompt_length - 1 : -1]
            targets = tokens[prompt_length:]
            logprobs = token_logprobs(
                completion_hidden, self.head, targets, self.backbone.vocab_size
            )
            topk = None
            if job.topk_sample:
                top = next_token_logprobs(self.head, completion_hidden).topk(job.topk_sample, -1)
                topk = TopkRows(top.indices.cpu().numpy(), top.values.cpu().numpy())
            sequences.append(
                SampledSequence(
                    list(completion.tokens), logprobs.tolist(), completion.stop_reason, topk
                )
            )
            if job.scoring is not None and prompt_logprobs is None:
                prompt_logprobs, prompt_topk = self._score_prompt(
                    tokens[:prompt_length], hidden[:prompt_length], job.scoring
                )
        return SampleOutput(sequences, prompt_logprobs, prompt_topk)


class _Batch:
    """Rows decoding in lockstep, from the jobs given at the start and those admitted
    between steps; each job is answered once its last row has stopped."""

    def __init__(
        self,
        sampler: Sampler,
        jobs: list[tuple[int, SampleJob]],
        done: Callable[[int, SampleOutput], None],
        admit: Callable[[int], Sequence[SampleJob]],
        next_index: int,
    ):
        self.sampler = sampler
        self.done = done
        self.admit = admit
        self.next_index = next_index
        self.rows: list[_Row] = []
        self.prefills: dict[int, _Prefill] = {}
        self.unfinished: dict[int, int] = {}
        self._start(jobs)

    def _start(self, jobs: list[tuple[int, SampleJob]]) -> None:
        """A batch of `jobs` alone, their caches left-padded to the longest prompt."""
        prefills = [self.sampler._prefill(job) for _, job in jobs]
        self.cache, self.mask = self.sampler._batch_cache([job for _, job in jobs], prefills)
        self.active = self._add_rows(jobs, prefills)
        self.logprobs = torch.stack(
            [self.prefills[self.rows[i].job].next_logprobs for i in self.active]
        )

    def _add_rows(self, jobs: list[tuple[int, SampleJob]], prefills: list[_Prefill]) -> list[int]:
        added = []
        for (index, job), prefill in zip(jobs, prefills, strict=True):
            self.prefills[index] = prefill
            self.unfinished[index] = job.num_samples
            for sample in range(job.num_samples):
                added.append(len(self.rows))
                self.rows.append(
                    _Row(
                        job=index,
                        prompt_length=len(job.prompt),
                        params=job.params,
                        generator=torch.Generator().manual_seed(_row_seed(job.params.seed, sample)),
                        topk=job.topk_sample,
                    )
                )
        return added

    def decode(self) -> None:
        sampler, device = self.sampler, self.sampler.backbone.device
        while True:
            rows = self.rows
            chosen = choose_tokens(self.logprobs, [rows[i] for i in self.active])
            still = sampler._record(rows, self.active, chosen, self.logprobs)
            for index in self.active:
                if rows[index].stop_reason is not None:
                    self._row_finished(rows[index].job)
            arrived = list(self.admit(MAX_ROWS - len(still)))
            if still:
                if len(still) < len(self.active):
                    keep = torch.tensor([self.active.index(i) for i in still], device=device)
                    self.cache.batch_select_indices(keep)
                    chosen = chosen[keep]
                    self.mask = self.mask[keep] if self.mask is not None else None
                self.active = still
                if self.mask is not None:
                    self.mask = functional.pad(self.mask, (0, 1), value=1)
                positions = torch.tensor(
                    [[rows[i].prompt_length + len(rows[i].tokens) - 1] for i in self.active],
                    device=device,
                )
                hidden = sampler.decoder(
                    input_ids=chosen[:, None],
                    attention_mask=self.mask,
                    position_ids=positions,
                    past_key_values=self.cache,
                    use_cache=True,
                ).last_hidden_state
                self.logprobs = sampler.next_logprobs(hidden[:, -1])
            if not arrived:
                if not still:
                    return
                continue
            jobs = [(self.next_index + offset, job) for offset, job in enumerate(arrived)]
            self.next_index += len(arrived)
            if still:
                self._join(jobs)
            else:
                self._start(jobs)

    def _join(self, jobs: list[tuple[int, SampleJob]]) -> None:
        """Left-pad the running batch's cache and the new prompts' to one width, and
        decode them together from the next step."""
        prefills = [self.sampler._prefill(job) for _, job in jobs]
        running = layer_states(self.cache)
        length, count = running[0][0].shape[2], running[0][0].shape[0]
        width = max(length, *(len(job.prompt) for _, job in jobs))
        stored = [layer_states(prefill.cache) for prefill in prefills]
        cache = DynamicCache(config=self.sampler.backbone.network.config)
        for layer, (keys, values) in enumerate(running):
            new_keys, new_values = (
                [functional.pad(keys, (0, 0, width - length, 0))],
                [functional.pad(values, (0, 0, width - length, 0))],
            )
            for (_, job), states in zip(jobs, stored, strict=True):
                pad = (0, 0, width - len(job.prompt), 0)
                new_keys.append(
                    functional.pad(states[layer][0], pad).repeat_interleave(job.num_samples, 0)
                )
                new_values.append(
                    functional.pad(states[layer][1], pad).repeat_interleave(job.num_samples, 0)
                )
            cache.update(torch.cat(new_keys), torch.cat(new_values), layer)
        device = self.sampler.backbone.device
        mask = (
            self.mask
            if self.mask is not None
            else torch.ones(count, length, dtype=torch.long, device=device)
        )
        masks = [functional.pad(mask, (width - length, 0), value=0)]
        for _, job in jobs:
            masks.append(
                torch.cat(
                    [
                        torch.zeros(job.num_samples, width - len(job.prompt), dtype=torch.long),
                        torch.ones(job.num_samples, len(job.prompt), dtype=torch.long),
                    ],
                    dim=1,
                ).to(device)
            )
        self.cache, self.mask = cache, torch.cat(masks)
        added = self._add_rows(jobs, prefills)
        self.active = [*self.active, *added]
        self.logprobs = torch.cat(
            [
                self.logprobs,
                torch.stack([self.prefills[self.rows[i].job].next_logprobs for i in added]),
            ]
        )

    def _row_finished(self, job: int) -> None:
        self.unfinished[job] -= 1
        if self.unfinished[job]:
            return
        prefill = self.prefills[job]
        self.done(
            job,
            SampleOutput(
                [row.sequence() for row in self.rows if row.job == job],
                prefill.prompt_logprobs,
                prefill.prompt_topk,
            ),
        )


class _MergedHead:
    """The next-token distribution through the output layer with the attached adapter's
    update folded in, held transposed (hidden x vocabulary).

    Decoding scores one to a few rows per step against the whole vocabulary. Through the
    slot that is three products per step (the frozen layer, then both LoRA factors, the
    second as wide as the vocabulary), and on CPU a row times the (vocabulary x hidden)
    weight is several times slower than times its transposed copy: together they were
    about 70% of the model service's time while it sampled for an evaluation. Folded, a
    step is one product. The fold is rebuilt whenever what it was made from changes: another
    adapter attached, or an in-place optimizer step on the attached one (tensor versions).
    Only fp32 on CPU: elsewhere the unfolded path is kept, as folding in bf16 would round.
    """

    def __init__(self, slot: LoraSlot):
        self.slot = slot
        self._parts: tuple[torch.Tensor, ...] = ()
        self._versions: tuple[int, ...] = ()
        self._scale = 0.0
        self._columns = torch.empty(0)

    @staticmethod
    def over(head: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        if (
            isinstance(head, LoraSlot)
            and head.base.weight.device.type == "cpu"
            and head.base.weight.dtype == torch.float32
        ):
            return _MergedHead(head)
        return lambda hidden: next_token_logprobs(head, hidden)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.columns()).float().log_softmax(-1)

    def columns(self) -> torch.Tensor:
        weight, factors = self.slot.base.weight, self.slot.factors
        parts = (weight, *(factors or ()))
        # Inference tensors keep no version counter, and cannot be changed outside it.
        versions = tuple(0 if part.is_inference() else part._version for part in parts)
        same_parts = len(parts) == len(self._parts) and all(
            now is then for now, then in zip(parts, self._parts, strict=True)
        )
        if not (same_parts and versions == self._versions and self.slot.scale == self._scale):
            merged = weight.detach()
            if factors is not None:
                down, up = factors
                merged = merged + (up.detach() @ down.detach()) * self.slot.scale
            self._columns = merged.t().contiguous()
            self._parts, self._versions, self._scale = parts, versions, self.slot.scale
        return self._columns


def choose_tokens(logprobs: torch.Tensor, rows: Sequence[_Row]) -> torch.Tensor:
    """One token per row: greedy at temperature 0, else top-k/top-p sampling at its temperature.

    Each row draws its uniform from its own generator, so a seeded request samples the
    same tokens whatever else shares its batch. Work over the vocabulary that no row
    needs (rescaling at temperature 1, truncation, argmax) is skipped.
    """
    device = logprobs.device
    temperatures = [row.params.temperature for row in rows]
    if all(t <= 0 for t in temperatures):
        return logprobs.argmax(-1)
    if all(t == 1 for t in temperatures):
        probs = logprobs.exp()
    else:
        temperature = torch.tensor(temperatures, device=device).clamp_min(1e-6)
        probs = (logprobs / temperature[:, None]).softmax(-1)
    top_k = [row.params.top_k for row in rows]
    if any(k > 0 for k in top_k):
        probs = _keep_top_k(probs, torch.tensor(top_k, device=device))
    top_p = [row.params.top_p for row in rows]
    if any(p < 1 for p in top_p):
        probs = _keep_top_p(probs, torch.tensor(top_p, device=device))
    uniform = torch.stack([torch.rand((), generator=row.generator) for row in rows]).to(device)
    cdf = probs.cumsum(-1)
    drawn = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True).squeeze(1)
    drawn = drawn.clamp_max(probs.shape[-1] - 1)
    if any(t <= 0 for t in temperatures):
        greedy = torch.tensor([t <= 0 for t in temperatures], device=device)
        drawn = torch.where(greedy, logprobs.argmax(-1), drawn)
    return drawn


def _keep_top_k(probs: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Zero all but each row's k most likely tokens (rows with k <= 0 keep everything)."""
    limited = top_k > 0
    width = int(top_k[limited].max().clamp_max(probs.shape[-1]))
    kth = probs.topk(width, dim=-1).values.gather(1, (top_k.clamp(1, width) - 1)[:, None])
    return probs.masked_fill(limited[:, None] & (probs < kth), 0.0)


def _keep_top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail outside each row's nucleus: the most likely tokens whose mass reaches p."""
    ordered, order = probs.sort(dim=-1, descending=True)
    mass_before = ordered.cumsum(-1) - ordered
    outside = mass_before > top_p[:, None] * ordered.sum(-1, keepdim=True)
    return torch.zeros_like(probs).scatter(1, order, ordered.masked_fill(outside, 0.0))


def _row_seed(seed: int | None, sample: int) -> int:
    if seed is None:
        return secrets.randbits(63)
    digest = hashlib.blake2b(f"{seed}:{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
