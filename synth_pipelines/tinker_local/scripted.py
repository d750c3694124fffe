"""Scripted sampling: completions given in advance by a test, scored by the real model.

Only a service created with `scripted=True` (the `--scripted` flag) has a script and
its control endpoint; nothing in the environment or the project settings turns it on.
A sample consumes, per requested sample, the first entry whose regex matches the
decoded prompt (an entry without `match` matches any prompt; a `repeat` entry is
never consumed). The completion text is tokenized with the real tokenizer (special
tokens such as `<tool_call>` become their ids), the stop token is appended when the
entry ends the turn, and the logprobs reported are the model's own logprobs of those
tokens under the sampler's current weights, so training on them is on-policy.

An entry may instead set `logprob`: every one of its tokens is then reported with that
constant logprob and the model is not run at all. That is for benchmarks of other
components (the capture proxy) that need a backend whose cost is negligible; such
logprobs are not the model's, so never train on them. Prompt scoring needs the model,
so a request that asks for prompt or top-k logprobs cannot use such an entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from pydantic import BaseModel, Field, model_validator

from synth_pipelines.tinker_local.backbone import Backbone
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.sampling import DecodeParams, ForcedCompletion, StopReason

PROMPT_TAIL_CHARS = 200


class ScriptEntry(BaseModel):
    match: str | None = Field(
        default=None, description="Regex searched in the decoded prompt; null matches any prompt."
    )
    completion: str | None = Field(
        default=None, description="The text the model answers with (tokenized by the service)."
    )
    completion_tokens: list[int] | None = Field(
        default=None,
        description="Or the exact token ids it answers with, the turn's end included when it "
        "ends the turn (`end_turn` is then ignored).",
    )
    repeat: bool = Field(default=False, description="Keep the entry after it is used.")
    end_turn: bool = Field(default=True, description="Append the stop token after the text.")
    logprob: float | None = Field(
        default=None,
        description=(
            "Report this constant logprob for every token without running the model "
            "(benchmarks of other components only; never train on it); null: the model's own."
        ),
    )

    @model_validator(mode="after")
    def _one_completion(self) -> ScriptEntry:
        if (self.completion is None) == (self.completion_tokens is None):
            raise ValueError("give exactly one of 'completion' or 'completion_tokens'")
        if self.completion_tokens is not None and not self.completion_tokens:
            raise ValueError("'completion_tokens' is empty")
        return self


class ScriptBody(BaseModel):
    entries: list[ScriptEntry]


@dataclass(frozen=True)
class _Compiled:
    entry: ScriptEntry
    pattern: re.Pattern[str] | None

    def matches(self, prompt: Callable[[], str]) -> bool:
        return self.pattern is None or self.pattern.search(prompt()) is not None


class Script:
    def __init__(self) -> None:
        self._entries: list[_Compiled] = []

    def replace(self, entries: Sequence[ScriptEntry]) -> None:
        compiled = []
        for index, entry in enumerate(entries):
            if entry.logprob is not None and not (
                math.isfinite(entry.logprob) and entry.logprob <= 0
            ):
                raise UserError(
                    f"entry {index}: logprob {entry.logprob!r} is not a log-probability; "
                    "give a finite number <= 0, or leave it out to score with the model"
                )
            try:
                pattern = re.compile(entry.match, re.DOTALL) if entry.match is not None else None
            except re.error as error:
                raise UserError(
                    f"entry {index}: match {entry.match!r} is not a regex: {error}"
                ) from None
            compiled.append(_Compiled(entry, pattern))
        self._entries = compiled

    def entries(self) -> list[ScriptEntry]:
        return [compiled.entry for compiled in self._entries]

    def take(self, prompt: Callable[[], str], count: int) -> list[ScriptEntry]:
        """One entry per sample, consumed in order; nothing is consumed unless all are found.

        `prompt` gives the decoded prompt; it is only called when a regex has to be searched
        or a missing entry reported, since decoding a long prompt is not free.
        """
        remaining = list(self._entries)
        chosen: list[ScriptEntry] = []
        for _ in range(count):
            found = next((c for c in remaining if c.matches(prompt)), None)
            if found is None:
                tail = prompt()[-PROMPT_TAIL_CHARS:]
                raise UserError(
                    f"no scripted completion left for this prompt (sample {len(chosen) + 1} of "
                    f"{count}); its last {len(tail)} characters are {tail!r}. PUT an entry "
                    "matching it to /scripted/v1/script"
                )
            chosen.append(found.entry)
            if not found.entry.repeat:
                remaining.remove(found)
        self._entries = remaining
        return chosen


def forced_completion(
    entry: ScriptEntry, params: DecodeParams, backbone: Backbone
) -> ForcedCompletion:
    if entry.completion_tokens is not None:
        tokens = list(entry.completion_tokens)
        ended = tokens[-1] in (params.stop_token_ids or backbone.stop_token_ids)
    else:
        tokens, ended = _text_completion(entry, params, backbone)
    stop_reason: StopReason = "stop" if ended else "length"
    if len(tokens) > params.max_tokens:
        tokens, stop_reason = tokens[: params.max_tokens], "length"
    if not tokens:
        raise UserError("the scripted completion is empty and does not end the turn")
    logprobs = None if entry.logprob is None else (entry.logprob,) * len(tokens)
    return ForcedCompletion(tuple(tokens), stop_reason, logprobs)


def _text_completion(
    entry: ScriptEntry, params: DecodeParams, backbone: Backbone
) -> tuple[list[int], bool]:
    assert entry.completion is not None
    tokens = list(backbone.tokenizer.encode(entry.completion, add_special_tokens=False))
    ended = False
    if entry.end_turn:
        stop = _stop_tokens(params, backbone)
        tokens.extend(stop)
        ended = bool(stop)
    return tokens, ended


def _stop_tokens(params: DecodeParams, backbone: Backbone) -> list[int]:
    """The tokens the model would emit to end its turn under this request's stop setting."""
    if params.stop_strings:
        return list(backbone.tokenizer.encode(params.stop_strings[0], add_special_tokens=False))
    if params.stop_token_ids:
        preferred = [t for t in backbone.stop_token_ids if t in params.stop_token_ids]
        return [preferred[0] if preferred else min(params.stop_token_ids)]
    return []


def script_router(script: Script) -> APIRouter:
    router = APIRouter(prefix="/scripted/v1", tags=["scripted"])

    @router.put("/script")
    async def put_script(body: ScriptBody) -> ScriptBody:
        script.replace(body.entries)
        return ScriptBody(entries=script.entries())

    @router.get("/script")
    async def get_script() -> ScriptBody:
        return ScriptBody(entries=script.entries())

    return router
