"""Learning datums rebuilt by hand from captured calls, to check `learning/datums.py` against.

The packing rule, written out: a call continues the datum when its prompt starts with
everything the datum holds (the earlier prompts and sampled tokens), else it starts a new
one. Every sampled token weighs the attempt's advantage and carries the sampler's logprob;
every other token weighs zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import DatumRow


@dataclass(frozen=True)
class HandDatum:
    calls: list[int]
    """The positions, in the list packed, of the calls this datum holds."""
    tokens: list[int]
    weights: list[float]
    """Per target (a datum predicts each token from the ones before it: from the second)."""
    logprobs: list[float]


def hand_datums(calls: list[Interaction], advantage: float) -> list[HandDatum]:
    """One agent's calls, in call order, packed by the rule above."""
    held: list[tuple[list[int], list[int], list[float], list[float]]] = []
    for position, call in enumerate(calls):
        tokens = held[-1][1] if held else None
        if tokens is None or call.prompt_tokens[: len(tokens)] != tokens:
            held.append(([], [], [], []))
            tokens = []
        members, datum_tokens, weights, logprobs = held[-1]
        observed = call.prompt_tokens[len(tokens) :]
        members.append(position)
        datum_tokens += observed + call.completion_tokens
        weights += [0.0] * len(observed) + [advantage] * len(call.completion_tokens)
        logprobs += [0.0] * len(observed) + list(call.logprobs)
    return [
        HandDatum(members, tokens, weights[1:], logprobs[1:])
        for members, tokens, weights, logprobs in held
    ]


def assert_packed_as(row: DatumRow, hand: HandDatum) -> None:
    assert row.model_input == hand.tokens[:-1]
    assert row.target_tokens == hand.tokens[1:]
    assert row.advantages == pytest.approx(hand.weights)
    assert row.mask == [1.0 if weight else 0.0 for weight in hand.weights]
    assert row.logprobs == pytest.approx(hand.logprobs, abs=1e-6)
