"""An attempt's captured calls as tinker-cookbook trajectories, one per agent.

The main agent and each delegated agent act in their own contexts, so each is its own
trajectory; every call is a transition whose observation is the exact prompt the model
saw and whose action is the exact sampled tokens with the sampler's logprobs.
"""

from __future__ import annotations

from collections import defaultdict

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.types import Trajectory, Transition

from synth_pipelines.contracts.interaction import Interaction

MAIN_AGENT = "main"


def agent_calls(calls: list[Interaction]) -> dict[str, list[Interaction]]:
    """Calls per agent, each in call order; the main agent first."""
    by_agent: dict[str, list[Interaction]] = defaultdict(list)
    for call in calls:
        by_agent[call.agent_id].append(call)
    for agent in by_agent.values():
        agent.sort(key=lambda c: (c.call_index, c.created_at))
    return dict(
        sorted(by_agent.items(), key=lambda item: (item[0] != MAIN_AGENT, item[1][0].created_at))
    )


def trajectory(calls: list[Interaction]) -> Trajectory:
    transitions = [
        Transition(
            ob=tinker.ModelInput.from_ints(call.prompt_tokens),
            ac=TokensWithLogprobs(
                tokens=list(call.completion_tokens), maybe_logprobs=list(call.logprobs)
            ),
            reward=0.0,
            episode_done=index == len(calls) - 1,
        )
        for index, call in enumerate(calls)
    ]
    return Trajectory(transitions=transitions, final_ob=tinker.ModelInput.empty())
