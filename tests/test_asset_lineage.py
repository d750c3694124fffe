"""The asset graph as the UI draws it: one lineage from the dataset to the checkpoint, in
groups named by stage, every asset described; the batch jobs still run the same steps."""

import dagster as dg

from assets.curve_metadata import INLINE_LIMIT, curve_metadata
from synth_pipelines.definitions import defs

STAGES = {
    "inputs": {"dataset_tasks", "run_spec"},
    "warm_start": {"warm_start"},
    "sampling": {"policy", "trials"},
    "evaluation": {"assessments"},
    "evidence": {"captured_interactions"},
    "learning": {"qualified_groups", "datums", "policy_update", "checkpoints"},
}


def _upstream(graph, key: dg.AssetKey) -> set[str]:
    seen: set[str] = set()
    frontier = [key]
    while frontier:
        for parent in graph.get(frontier.pop()).parent_keys:
            if parent.to_user_string() not in seen:
                seen.add(parent.to_user_string())
                frontier.append(parent)
    return seen


def test_checkpoints_descend_from_every_stage_through_one_lineage():
    graph = defs.resolve_asset_graph()
    everything = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert _upstream(graph, dg.AssetKey("checkpoints")) == everything - {"checkpoints"}
    groups: dict[str, set[str]] = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        groups.setdefault(node.group_name, set()).add(key.to_user_string())
        assert node.description, f"{key.to_user_string()} has no description"
    assert groups == STAGES


def test_batch_jobs_run_the_same_steps():
    for job in ("execution_batch", "evaluation_batch", "training_batch"):
        nodes = {node.name for node in defs.resolve_job_def(job).graph.nodes}
        assert nodes == {"policy", "batch"}
    assert {n.name for n in defs.resolve_job_def("pin_run_spec").graph.nodes} == {"run_spec"}
    assert {n.name for n in defs.resolve_job_def("warm_start_job").graph.nodes} == {"warm_start"}


def test_a_long_curve_stays_small_enough_to_show_in_place():
    rewards = [(i % 7) / 7 for i in range(1000)]
    kls = [-(i % 5) * 1.234567e-7 for i in range(1000)]
    for name, values, bounded in (("reward_curve", rewards, True), ("kl_curve", kls, False)):
        (value,) = curve_metadata(
            name, values, "a label longer than the caption", bounded=bounded
        ).values()
        assert value.md_str.startswith(f"![{name.replace('_', ' ')}](data:image/svg+xml;base64,")
        assert len(value.md_str) < INLINE_LIMIT
    assert curve_metadata("reward_curve", [], "nothing yet", bounded=True) == {}
