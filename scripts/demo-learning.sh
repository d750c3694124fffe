#!/usr/bin/env bash
# The learning part of `make demo`: a baseline evaluation of the learner on held-out tasks,
# a warm start on the training tasks' demonstrations, GRPO training batches from it, and
# an evaluation of the final checkpoint on the same held-out tasks with the same harness
# recipe; then the comparison. Every step is an ordinary `synth` command with an
# idempotency key, so running the demo again reuses what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
SYNTH=.venv/bin/synth
PY=.venv/bin/python
SEED=${SYNTH_DEMO_SEED:-0}
KEY=demo-learn-s${SEED}

step_started=$SECONDS
took() { echo "   ($1 took $((SECONDS - step_started)) s; $((SECONDS / 60)) min $((SECONDS % 60)) s so far)"; step_started=$SECONDS; }
field() { "$PY" -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1], {}, {"d": d}))' "$1"; }
with_seed() { "$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); p["seed"] = int(sys.argv[2]); print(json.dumps(p))' "$1" "$SEED"; }

$SYNTH dataset publish datasets/learn/train --name synth/learn-train --version v1
$SYNTH dataset publish datasets/learn/heldout --name synth/learn-heldout --version v1
took "publishing"

echo "== baseline: the untrained learner on the held-out tasks"
baseline=$($SYNTH run start --dataset synth/learn-heldout@v1 --actor @profiles/learner.json \
  --plan "$(with_seed plans/learn-eval.json)" --idempotency-key "$KEY-baseline" --wait --json | field 'd["run_id"]')
took "baseline evaluation"

echo "== warm start on the training tasks' demonstrations"
warm=$($SYNTH train start --dataset synth/learn-train@v1 --actor @profiles/learner.json \
  --plan "$(with_seed plans/warm-start.json)" --idempotency-key "$KEY-warm" --wait --json \
  | field 'd["run_id"]')
warm_checkpoint=$($SYNTH run checkpoints "$warm" --json | field 'd[-1]["sampler_path"]')
took "warm start"

echo "== GRPO training batches from the warm start"
trained=$($SYNTH train start --dataset synth/learn-train@v1 --actor @profiles/learner.json \
  --plan "$(with_seed plans/learn-train.json)" --model "$warm_checkpoint" \
  --idempotency-key "$KEY-grpo" --wait --json | field 'd["run_id"]')
final_checkpoint=$($SYNTH run checkpoints "$trained" --json | field 'd[-1]["sampler_path"]')
took "GRPO"

echo "== the final checkpoint on the same held-out tasks"
final=$($SYNTH run start --dataset synth/learn-heldout@v1 --actor @profiles/learner.json \
  --plan "$(with_seed plans/learn-eval.json)" --model "$final_checkpoint" --idempotency-key "$KEY-final" \
  --wait --json | field 'd["run_id"]')
took "final evaluation"

$SYNTH run compare "$baseline" "$final"
echo "Reward curve: Dagster UI > Assets > checkpoints, partition of the last batch of $trained"
echo "Warm-start loss curve: Dagster UI > Assets > warm_start, partition $warm"
