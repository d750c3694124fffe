#!/usr/bin/env bash
# The learning part of `make demo`: three held-out rows through the same harness recipe
# (the base model, the warm-start checkpoint GRPO starts from, and GRPO's final
# checkpoint), the training reward of every GRPO batch, and GRPO's own gain (start ->
# final) with Fisher's p. The start evaluation runs beside GRPO, and the final evaluation
# beside the rest of it, so that one run's attempts fill the other's pauses. Every step is
# an ordinary `synth` command with an idempotency key, so running the demo again reuses
# what is done.
#
# `--harness claude-code` runs the same with the real Claude Code CLI as the actor
# (profiles/claude-code-learner.json): its warm start learns from Claude Code's own captured
# calls, made against a teacher (a scripted model service answering with each training
# task's demonstration), instead of demonstrations rendered in the built-in agent's frame.
set -euo pipefail
cd "$(dirname "$0")/.."
SYNTH=.venv/bin/synth
PY=.venv/bin/python
SEED=${SYNTH_DEMO_SEED:-0}
HARNESS=builtin
if [[ "${1:-}" == "--harness" ]]; then HARNESS=${2:?--harness takes builtin or claude-code}; fi
case "$HARNESS" in
  builtin) ACTOR=@profiles/learner.json; KEY=demo-learn-r7-s${SEED}; RANK=16; GRPO_LR=3e-4 ;;
  # Claude Code's first prompt is twice the built-in agent's (its Bash tool's schema): with the
  # plans' rank-16 adapter the warm start learned to read the word on neither seed in 64 steps,
  # with rank 64 on both; GRPO then needs lr 6e-4 to move more than the full-stop habit
  # (docs/learning.md, "Claude Code as the actor").
  claude-code) ACTOR=@profiles/claude-code-learner.json; KEY=demo-learn-cc6-s${SEED}; RANK=64; GRPO_LR=6e-4 ;;
  *) echo "error: --harness takes builtin or claude-code, not '$HARNESS'" >&2; exit 2 ;;
esac

step_started=$SECONDS
took() { echo "   ($1 took $((SECONDS - step_started)) s; $((SECONDS / 60)) min $((SECONDS % 60)) s so far)"; step_started=$SECONDS; }
field() { "$PY" -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1], {}, {"d": d}))' "$1"; }
with_seed() { "$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["seed"] = int(sys.argv[2]); p.update(json.loads(sys.argv[3])); print(json.dumps(p))' "$1" "$SEED" "${2:-{\}}"; }

$SYNTH dataset publish datasets/learn/train --name synth/learn-train --version v3
$SYNTH dataset publish datasets/learn/heldout --name synth/learn-heldout --version v1
took "publishing"

echo "== base model: the untrained learner on a quarter of the held-out tasks (each once)"
baseline=$($SYNTH run start --dataset synth/learn-heldout@v1 --actor "$ACTOR" \
  --plan "$(with_seed plans/learn-eval.json '{"attempts_per_task": 1, "max_tasks": 16}')" \
  --idempotency-key "$KEY-baseline" --wait --json | field 'd["run_id"]')
took "baseline evaluation"

warm_plan=$(with_seed plans/warm-start.json "{\"lora_rank\": $RANK}")
if [[ "$HARNESS" == claude-code ]]; then
  echo "== Claude Code on the training tasks against a teacher answering with their demonstrations"
  teacher_url=$($PY -c 'from synth_pipelines.config import settings; print(settings().teacher_service_url)')
  if ! $SYNTH model teach --dataset synth/learn-train@v3 --actor "$ACTOR" --url "$teacher_url" \
      >/dev/null 2>&1; then
    $SYNTH model serve --scripted --base-model synth/qwen3-learner --port "${teacher_url##*:}" \
      >.synth/logs/teacher.log 2>&1 &
    teacher=$!
    trap 'kill $teacher 2>/dev/null || true' EXIT
    until $SYNTH model teach --dataset synth/learn-train@v3 --actor "$ACTOR" \
        --url "$teacher_url" 2>/dev/null; do
      kill -0 $teacher || { echo "error: the teacher did not start; see .synth/logs/teacher.log" >&2; exit 1; }
      sleep 2
    done
  fi
  captured=$($SYNTH run start --dataset synth/learn-train@v3 --actor "$ACTOR" \
    --plan @plans/teacher-capture.json --model synth/qwen3-learner-teacher \
    --idempotency-key "$KEY-teacher" --wait --json | field 'd["run_id"]')
  if [[ -n "${teacher:-}" ]]; then kill $teacher; fi
  took "capturing Claude Code's calls against the teacher"
  warm_plan=$(with_seed plans/warm-start.json "{\"captured_run\": \"$captured\", \"lora_rank\": $RANK}")
fi

echo "== warm start on the training tasks' demonstrations"
warm=$($SYNTH train start --dataset synth/learn-train@v3 --actor "$ACTOR" \
  --plan "$warm_plan" --idempotency-key "$KEY-warm" --wait --json | field 'd["run_id"]')
warm_checkpoint=$($SYNTH run checkpoints "$warm" --json | field 'd[-1]["sampler_path"]')
took "warm start"

# The start evaluation and GRPO both begin from the warm-start checkpoint, so they run side by
# side: the evaluation's attempts fill the time GRPO spends between its batches.
echo "== start: the warm-start checkpoint on the held-out tasks (accepted now, runs beside GRPO)"
start_eval=(run start --dataset synth/learn-heldout@v1 --actor "$ACTOR"
  --plan "$(with_seed plans/learn-eval.json)" --model "$warm_checkpoint"
  --idempotency-key "$KEY-start")
echo "   accepted $($SYNTH "${start_eval[@]}" --json | field 'd["run_id"]')"

echo "== GRPO training batches from the warm start"
trained=$($SYNTH train start --dataset synth/learn-train@v3 --actor "$ACTOR" \
  --plan "$(with_seed plans/learn-train.json "{\"lora_rank\": $RANK, \"learning_rate\": $GRPO_LR}")" \
  --model "$warm_checkpoint" \
  --idempotency-key "$KEY-grpo" --wait --json | field 'd["run_id"]')
final_checkpoint=$($SYNTH run checkpoints "$trained" --json | field 'd[-1]["sampler_path"]')
took "GRPO, with the start evaluation beside it"
$SYNTH run show "$trained"

echo "== the final checkpoint on the same held-out tasks (accepted now, beside the start's rest)"
final_eval=(run start --dataset synth/learn-heldout@v1 --actor "$ACTOR"
  --plan "$(with_seed plans/learn-eval.json)" --model "$final_checkpoint"
  --idempotency-key "$KEY-final")
echo "   accepted $($SYNTH "${final_eval[@]}" --json | field 'd["run_id"]')"
# The same keys again: each waits for its accepted evaluation and gives its run.
start=$($SYNTH "${start_eval[@]}" --wait --json | field 'd["run_id"]')
took "the rest of the start evaluation"
final=$($SYNTH "${final_eval[@]}" --wait --json | field 'd["run_id"]')
took "the rest of the final evaluation"

echo "== what the warm start did: base model -> start"
$SYNTH run compare "$baseline" "$start"
echo "== what GRPO did: start -> final"
$SYNTH run compare "$start" "$final"
echo "Reward curve: Dagster UI > Assets > checkpoints, partition of the last batch of $trained"
echo "Warm-start loss curve: Dagster UI > Assets > warm_start, partition $warm"
