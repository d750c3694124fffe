"""Learning inputs: each qualified attempt's trajectories packed by tinker-cookbook.

`trajectory_to_data` packs successive calls into one datum while the next prompt extends
the accumulated prompt and generation, and starts a new datum when that prefix breaks.
Observation tokens get zero advantage and mask 0; sampled action tokens carry the
attempt's group-relative advantage and the sampler's own logprobs. Delegated agents'
calls are actions in their own contexts and share the attempt's advantage.
"""

from __future__ import annotations

import tinker
from tinker.types import TensorDtype
from tinker_cookbook.rl.data_processing import trajectory_to_data

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import DatumRow, QualifiedAttempt
from synth_pipelines.learning.qualification import actor_calls
from synth_pipelines.learning.trajectories import agent_calls, trajectory


def attempt_datums(standing: QualifiedAttempt, calls: list[Interaction]) -> list[DatumRow]:
    assert standing.advantage is not None
    rows = []
    for agent_id, agent in agent_calls(actor_calls(calls, standing.trial_id)).items():
        for number, datum in enumerate(trajectory_to_data(trajectory(agent), standing.advantage)):
            inputs = datum.loss_fn_inputs
            rows.append(
                DatumRow(
                    run_id=standing.run_id,
                    batch=standing.batch,
                    attempt_id=standing.attempt_id,
                    group_index=standing.group_index,
                    agent_id=agent_id,
                    datum_index=number,
                    advantage=standing.advantage,
                    model_input=datum.model_input.to_ints(),
                    target_tokens=[int(t) for t in inputs["target_tokens"].tolist()],
                    logprobs=[float(v) for v in inputs["logprobs"].tolist()],
                    advantages=[float(v) for v in inputs["advantages"].tolist()],
                    mask=[float(v) for v in inputs["mask"].tolist()],
                )
            )
    return rows


def packed_attempts(standings: list[QualifiedAttempt]) -> list[QualifiedAttempt]:
    """The attempts learned from: qualified, in a group that qualified."""
    return [s for s in standings if s.qualified and s.group_qualified]


def group_datums(
    standings: list[QualifiedAttempt], calls: dict[str, list[Interaction]]
) -> list[DatumRow]:
    return [
        row
        for standing in packed_attempts(standings)
        for row in attempt_datums(standing, calls[standing.attempt_id])
    ]


def training_datum(row: DatumRow, *, with_mask: bool = False) -> tinker.Datum:
    """The row as tinker takes a datum. The mask stays local, as in the cookbook:
    `forward_backward` gets the datum without it, the sampler-vs-trainer metrics
    (`compute_kl_sample_train`) with it."""
    inputs = {
        "target_tokens": _tensor(row.target_tokens, "int64"),
        "logprobs": _tensor(row.logprobs, "float32"),
        "advantages": _tensor(row.advantages, "float32"),
    }
    if with_mask:
        inputs["mask"] = _tensor(row.mask, "float32")
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(row.model_input), loss_fn_inputs=inputs
    )


def _tensor(values: list[int] | list[float], dtype: TensorDtype) -> tinker.TensorData:
    return tinker.TensorData(data=values, dtype=dtype, shape=[len(values)])
