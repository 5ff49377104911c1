#!/usr/bin/env bash
# The docs/tfgrpo.md results table: Training-Free GRPO with SmolLM2-135M-Instruct as policy and
# stage model on the 100 shipped training problems, then Mean@4 / Pass@4 on the 50 held-out
# problems with and without the learned library, 3 evaluation seeds, all through one
# `gym node serve --engine vllm` (CPU or GPU). Usage: benchmarks/tfgrpo_results.sh [OUT_DIR]
# (default runs/tfgrpo-results). SEEDS="0 1 2" trains once per training seed.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/tfgrpo-results}
SEEDS=${SEEDS:-0}
PORT=${PORT:-8411}
GYM=.venv/bin/gym
mkdir -p "$OUT"
MODEL=$($GYM node model)
$GYM node serve --engine vllm --model "$MODEL" --served-model-name smollm2 --port "$PORT" \
    --max-batch 32 --max-queue 256 >"$OUT/node.log" 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 $NODE 2>/dev/null || { tail -20 "$OUT/node.log"; exit 1; }
    sleep 2
done
for seed in $SEEDS; do
    run="$OUT/seed-$seed"
    sed -e "s|^seed: 0|seed: $seed|" -e "s|^output_dir: .*|output_dir: $run|" \
        -e "s|127.0.0.1:8411|127.0.0.1:$PORT|" \
        -e "s|\.\./trainer/data|$PWD/trainer/data|" benchmarks/tfgrpo_results.yaml >"$OUT/seed-$seed.yaml"
    /usr/bin/time -v $GYM train tfgrpo "$OUT/seed-$seed.yaml" >"$run.train.log" 2>"$run.train.err"
    /usr/bin/time -v $GYM eval --base-url "http://127.0.0.1:$PORT/v1" --model smollm2 \
        --library "$run/library.json" --dataset trainer/data/arith_heldout.jsonl -k 4 --seeds 3 \
        --batch-size 32 --output "$run.eval.json" >"$run.eval.log" 2>"$run.eval.err"
done
echo "results in $OUT"
