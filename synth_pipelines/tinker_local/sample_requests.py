"""SDK sample requests checked and turned into sample jobs."""

from __future__ import annotations

from collections.abc import Sequence

from tinker import types

from synth_pipelines.tinker_local.backbone import Backbone
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.sampling import DecodeParams, PromptScoring, SampleJob

MAX_SAMPLES_PER_REQUEST = 128


def prompt_tokens(prompt: types.ModelInput, vocab_size: int) -> tuple[int, ...]:
    tokens: list[int] = []
    for position, chunk in enumerate(prompt.chunks):
        if not isinstance(chunk, types.EncodedTextChunk):
            raise UserError(
                f"prompt chunk {position} is a {chunk.type} chunk; the local service samples "
                "from token (encoded_text) chunks only"
            )
        tokens.extend(chunk.tokens)
    if not tokens:
        raise UserError("the prompt is empty; give it at least one token")
    lowest, highest = min(tokens), max(tokens)
    if lowest < 0 or highest >= vocab_size:
        bad = lowest if lowest < 0 else highest
        raise UserError(
            f"the prompt holds token id {bad}, outside this model's vocabulary [0, {vocab_size})"
        )
    return tuple(tokens)


def sample_job(request: types.SampleRequest, backbone: Backbone) -> SampleJob:
    prompt = prompt_tokens(request.prompt, backbone.vocab_size)
    if not 1 <= request.num_samples <= MAX_SAMPLES_PER_REQUEST:
        raise UserError(
            f"num_samples must be between 1 and {MAX_SAMPLES_PER_REQUEST}, "
            f"got {request.num_samples}"
        )
    if request.target_prompt_logprobs is not None or request.prompt_alt_tokens_k:
        raise UserError(
            "target_prompt_logprobs and prompt_alt_tokens_k are not supported by the local "
            "model service; use include_prompt_logprobs or topk_prompt_logprobs"
        )
    return SampleJob(
        prompt=prompt,
        num_samples=request.num_samples,
        params=decode_params(request.sampling_params, len(prompt), backbone),
        scoring=_scoring(request, len(prompt)),
        topk_sample=_non_negative("topk_sample_logprobs", request.topk_sample_logprobs),
    )


def decode_params(
    params: types.SamplingParams, prompt_length: int, backbone: Backbone
) -> DecodeParams:
    room = backbone.max_context - prompt_length
    if room < 1:
        raise UserError(
            f"the prompt has {prompt_length} tokens, which leaves no room in the model's "
            f"{backbone.max_context}-token context; shorten it"
        )
    max_tokens = room if params.max_tokens is None else params.max_tokens
    if max_tokens < 1:
        raise UserError(f"max_tokens must be at least 1, got {max_tokens}")
    if max_tokens > room:
        raise UserError(
            f"the prompt ({prompt_length} tokens) plus max_tokens ({max_tokens}) exceeds the "
            f"model's context of {backbone.max_context} tokens; lower max_tokens to {room} or less"
        )
    if params.temperature < 0:
        raise UserError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < -1:
        raise UserError(f"top_k must be -1 (no limit) or positive, got {params.top_k}")
    token_stops, string_stops = _stops(params.stop, backbone)
    return DecodeParams(
        max_tokens=max_tokens,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        stop_token_ids=token_stops,
        stop_strings=string_stops,
        seed=params.seed,
    )


def _stops(
    stop: str | Sequence[str] | Sequence[int] | None, backbone: Backbone
) -> tuple[frozenset[int], tuple[str, ...]]:
    """`None` keeps the model's end-of-turn tokens; a given list replaces them (`[]`: none)."""
    if stop is None:
        return frozenset(backbone.stop_token_ids), ()
    if isinstance(stop, str):
        return frozenset(), (stop,)
    if all(isinstance(item, str) for item in stop):
        if any(not item for item in stop):
            raise UserError("stop strings must not be empty")
        return frozenset(), tuple(str(item) for item in stop)
    if all(isinstance(item, int) for item in stop):
        return frozenset(int(item) for item in stop), ()
    raise UserError(f"stop must be all strings or all token ids, got {list(stop)!r}")


def _scoring(request: types.SampleRequest, prompt_length: int) -> PromptScoring | None:
    topk = _non_negative("topk_prompt_logprobs", request.topk_prompt_logprobs)
    if not request.prompt_logprobs and not topk:
        return None
    last_n = request.prompt_logprobs_last_n
    if last_n is not None and not 1 <= last_n <= prompt_length - 1:
        raise UserError(
            f"prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = "
            f"{prompt_length - 1}, got {last_n}"
        )
    return PromptScoring(last_n=last_n, topk=topk)


def _non_negative(name: str, value: int) -> int:
    if value < 0:
        raise UserError(f"{name} must be 0 or greater, got {value}")
    return value
