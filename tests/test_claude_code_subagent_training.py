"""Training on a real Claude Code attempt whose main agent delegates to a sub-agent.

The pinned Claude Code CLI runs through the capture proxy; the model service, scripted in
Qwen3's format, has the main agent call its Agent tool in the foreground, the sub-agent run
one Bash command and report, and the main agent finish once the report is its Agent tool's
result. A sibling attempt of the same sampling group answers in one call; the delegating
attempt scores 1 and the sibling 0, so the real qualification (`qualify_group`, by
tinker-cookbook's `compute_advantages`) gives the delegating attempt +0.5.

Pinned, from what the proxy captured:
- the sub-agent's calls carry an agent id of their own, in the attempt's session, and were
  sampled from the same model, by the same sampler (the registry's route for that model), at
  the same temperature as the main agent's, under the same run, batch, trial and owner;
- packed (`learning/datums.py`), the sub-agent's calls form a datum of their own whose
  sampled tokens carry the attempt's advantage and the sampler's logprobs, its Bash result
  weighing zero; the sub-agent's report, in the main agent's next prompt, weighs zero there;
- the group's datums train: a real `forward_backward` and `optim_step` on the model service's
  LoRA training client (through `learning/trainer.py`). Before the step the learner's
  logprobs are the sampler's (the data is on-policy), so the importance-sampling loss is
  minus the sum of the advantages; the step lowers that loss, and the sampler saved after it
  scores the sub-agent's sampled tokens differently.
"""

from __future__ import annotations

import asyncio
import json
import math

import anthropic
import pytest
import tinker
from tml_renderers import renderers

from synth_pipelines.config import Settings
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import DatumRow, PolicyBinding
from synth_pipelines.contracts.plan import Eligibility, TrainPlan
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.datums import group_datums
from synth_pipelines.learning.qualification import qualify_group
from synth_pipelines.learning.trainer import Gradients, Trainer
from synth_pipelines.rendering.model_registry import ModelRegistry, TinkerRoute
from synth_pipelines.storage.objectstore import open_object_store
from tests.hand_packing import assert_packed_as, hand_datums
from tests.learning_records import assessment, outcome
from tests.live_services import MODEL, capture_proxy, model_service, run_claude_code, set_script

RUN, BATCH = "r-1", "r-1.b0000"
"""The run and batch of `tests/learning_records.py`'s outcomes and assessments."""
DELEGATING, SIBLING = f"{BATCH}.g0000.a000", f"{BATCH}.g0000.a001"
TEMPERATURE = 1.0
REPORT = "Sub-agent report: CHILD-REPORT-9."
SMALL_PROMPT = ["--system-prompt", "You are terse.", "--tools", "Bash,Agent"]
"""Claude Code's options for a short main-agent prompt: a one-line system prompt and only
the Bash and Agent tools (the sub-agent keeps its own system prompt)."""

AGENT_CALL = (
    "<tool_call>\n"
    + json.dumps(
        {
            "name": "Agent",
            "arguments": {
                "description": "check files",
                "prompt": "SUBTASK-7: list the files and report.",
                "subagent_type": "general-purpose",
                "run_in_background": False,
            },
        }
    )
    + "\n</tool_call>"
)
CHILD_BASH = (
    "<tool_call>\n"
    + json.dumps(
        {
            "name": "Bash",
            "arguments": {"command": "echo child-listing-ok", "description": "list"},
        }
    )
    + "\n</tool_call>"
)
SCRIPT = [
    {"match": "SIBLING-ATTEMPT", "completion": "I cannot do that.", "repeat": True},
    # The main agent, once the sub-agent's report is its Agent tool's result.
    {"match": "CHILD-REPORT-9", "completion": "All done: the sub-agent reported.", "repeat": True},
    # The sub-agent, once its Bash command has run; then at its start.
    {"match": "child-listing-ok", "completion": REPORT, "repeat": True},
    {"match": "SUBTASK-7", "completion": CHILD_BASH, "repeat": True},
    # The main agent at its start.
    {"completion": AGENT_CALL, "repeat": True},
]


def _token(proxy, attempt: str) -> str:
    return proxy.token(
        run=RUN,
        attempt=attempt,
        batch=BATCH,
        trial=f"trial-{attempt}",
        sampling_temperature=TEMPERATURE,
    )


def _by_agent(calls: list[Interaction]) -> dict[str, list[Interaction]]:
    agents: dict[str, list[Interaction]] = {}
    for call in sorted(calls, key=lambda call: call.created_at):
        agents.setdefault(call.agent_id, []).append(call)
    return agents


async def _train_one_step(
    service: tinker.ServiceClient, rows: list[DatumRow]
) -> tuple[Gradients, str]:
    """The batch's step, as `learning/training_step.py` takes it: every datum sent to
    forward_backward, then one optimizer step; returns the gradients' report and the
    sampler saved after the step."""
    binding = PolicyBinding(
        run_id=RUN,
        batch=BATCH,
        index=0,
        sampler=MODEL,
        base_model=MODEL,
        trainer_state=None,
        optimizer_state=False,
        source="base model",
    )
    trainer = Trainer(service, binding, TrainPlan(kind="train", batches=1))
    await trainer.submit(rows)
    gradients = await trainer.gradients()
    await trainer.optim_step()
    return gradients, await trainer.save_sampler("after-step")


def _target_logprobs(sampler: tinker.SamplingClient, row: DatumRow) -> list[float]:
    """`sampler`'s logprob of each of `row`'s targets."""
    sequence = tinker.ModelInput.from_ints(row.model_input + row.target_tokens[-1:])
    return sampler.compute_logprobs(sequence).result()[1:]


@pytest.mark.slow
def test_a_sub_agents_sampled_tokens_train_with_the_attempts_advantage(state, tmp_path):
    with model_service() as model_url:
        with capture_proxy(model_url) as proxy:
            set_script(model_url, SCRIPT)
            result = run_claude_code(
                proxy.url, _token(proxy, DELEGATING), tmp_path, extra_args=SMALL_PROMPT
            )
            assert result.returncode == 0, result.stderr
            assert json.loads(result.stdout)["result"] == "All done: the sub-agent reported."
            sibling = anthropic.Anthropic(
                base_url=proxy.url, api_key=_token(proxy, SIBLING)
            ).messages.create(
                model=MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": "SIBLING-ATTEMPT: create the file."}],
            )
            assert [block.text for block in sibling.content if block.type == "text"] == [
                "I cannot do that."
            ]
            proxy.flush()
        evidence = read_attempt_evidence(
            control_engine(Settings()),
            open_object_store(Settings().objects_url),
            [DELEGATING, SIBLING],
        )
        assert evidence.problems == {}

        # The main agent's two calls, the sub-agent's two, each agent's in call order.
        agents = _by_agent(evidence.calls[DELEGATING])
        assert len(agents) == 2 and "main" in agents
        (child_id,) = [agent for agent in agents if agent != "main"]
        main, child = agents["main"], agents[child_id]
        assert [(c.call_index, c.stop_reason) for c in main] == [(0, "tool_use"), (1, "end_turn")]
        assert [(c.call_index, c.stop_reason) for c in child] == [(0, "tool_use"), (1, "end_turn")]
        assert json.loads(main[0].response_json)["content"][-1]["name"] == "Agent"
        assert json.loads(child[0].response_json)["content"][-1]["name"] == "Bash"
        assert "SUBTASK-7" in child[0].request_json
        # The sub-agent ran inside the main agent's Agent call, and its report came back.
        assert main[0].created_at < child[0].created_at < child[1].created_at < main[1].created_at
        assert REPORT in json.loads(child[1].response_json)["content"][-1]["text"]

        # Same model, same sampler (the registry's route for it), same temperature, same
        # attempt identity; only the agent differs.
        route = ModelRegistry().get(MODEL).backend
        assert route == TinkerRoute(base_model=MODEL)
        for call in main + child:
            assert (call.model, call.sampler, call.temperature) == (
                MODEL,
                route.base_model,
                TEMPERATURE,
            )
            assert (call.run_id, call.batch, call.trial_id, call.role, call.owner) == (
                RUN,
                BATCH,
                f"trial-{DELEGATING}",
                "actor",
                Settings().owner,
            )
            assert call.native_session_id is not None
            assert call.native_session_id == main[0].native_session_id
            assert call.aligned and not call.fitted

        # The real qualification: rewards 1 and 0 centered within the group; every call,
        # the sub-agent's included, was sampled by the batch's policy (`MODEL`).
        standings = qualify_group(
            [outcome(DELEGATING), outcome(SIBLING)],
            {DELEGATING: assessment(DELEGATING, 1.0), SIBLING: assessment(SIBLING, 0.0)},
            evidence.calls,
            evidence.problems,
            Eligibility(),
            MODEL,
        )
        assert [(s.attempt_id, s.qualified, s.group_qualified) for s in standings] == [
            (DELEGATING, True, True),
            (SIBLING, True, True),
        ]
        assert [s.calls for s in standings] == [4, 1]
        advantage = standings[0].advantage
        assert (advantage, standings[1].advantage) == (0.5, -0.5)

        rows = group_datums(standings, evidence.calls)
        (sibling_call,) = evidence.calls[SIBLING]
        assert [(row.attempt_id, row.agent_id, row.datum_index) for row in rows] == [
            (DELEGATING, "main", 0),
            (DELEGATING, child_id, 0),
            (SIBLING, "main", 0),
        ]
        main_row, child_row, sibling_row = rows
        # Each agent's calls pack into one datum of its own, by the hand rule.
        for row, calls, value in (
            (main_row, main, advantage),
            (child_row, child, advantage),
            (sibling_row, [sibling_call], -0.5),
        ):
            (hand,) = hand_datums(calls, value)
            assert hand.calls == list(range(len(calls)))
            assert_packed_as(row, hand)
            assert row.advantage == value
            assert row.model_input + row.target_tokens[-1:] == (
                calls[-1].prompt_tokens + calls[-1].completion_tokens
            )
        # The sub-agent's sampled tokens are its datum's actions, with the attempt's
        # advantage and the sampler's logprobs; its Bash result weighs zero.
        child_actions = [i for i, value in enumerate(child_row.advantages) if value]
        assert len(child_actions) == sum(len(c.completion_tokens) for c in child)
        assert {child_row.advantages[i] for i in child_actions} == {advantage}
        assert [child_row.logprobs[i] for i in child_actions] == pytest.approx(
            child[0].logprobs + child[1].logprobs, abs=1e-6
        )
        decode = renderers.Qwen3().tokenizer.decode
        child_observed = range(
            len(child[0].prompt_tokens) + len(child[0].completion_tokens),
            len(child[1].prompt_tokens),
        )
        assert "child-listing-ok" in decode([child_row.model_input[p] for p in child_observed])
        assert {child_row.advantages[p - 1] for p in child_observed} == {0.0}
        assert {child_row.mask[p - 1] for p in child_observed} == {0.0}
        # The report, in the main agent's next prompt, is zero-weight context there.
        main_observed = range(
            len(main[0].prompt_tokens) + len(main[0].completion_tokens),
            len(main[1].prompt_tokens),
        )
        assert REPORT in decode([main_row.model_input[p] for p in main_observed])
        assert {main_row.advantages[p - 1] for p in main_observed} == {0.0}
        assert {main_row.mask[p - 1] for p in main_observed} == {0.0}

        # The batch trains on it: one step on the model service's LoRA training client.
        set_script(model_url, [{"completion": "x", "repeat": True, "end_turn": False}])
        service = tinker.ServiceClient(base_url=model_url, api_key="tml-test")
        try:
            gradients, sampler_path = asyncio.run(_train_one_step(service, rows))
            action_advantages = [value for row in rows for value in row.advantages if value]
            assert gradients.datums == 3
            assert gradients.action_tokens == len(action_advantages)
            # On-policy: before the step the learner's logprobs are the sampler's, so every
            # importance ratio is 1 and the loss is minus the sum of the advantages.
            assert abs(gradients.kl_sample_train_v1) < 1e-4
            assert math.isfinite(gradients.loss)
            assert gradients.loss == pytest.approx(-sum(action_advantages), rel=1e-3)
            # The sampler saved after the step: the importance-sampling objective (over the
            # action tokens, advantage times probability ratio) went up, and the sub-agent's
            # sampled tokens score differently.
            stepped = service.create_sampling_client(model_path=sampler_path).result()
            scored = [_target_logprobs(stepped, row) for row in rows]
            objective = sum(
                advantage * math.exp(after - before)
                for row, after_row in zip(rows, scored, strict=True)
                for advantage, after, before in zip(
                    row.advantages, after_row, row.logprobs, strict=True
                )
                if advantage
            )
            assert objective > -gradients.loss
            moved = [abs(scored[1][i] - child_row.logprobs[i]) for i in child_actions]
            assert max(moved) > 1e-3
        finally:
            service.close("success").result()
