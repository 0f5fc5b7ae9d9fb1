#!/usr/bin/env bash
# One prepared check for a machine with one GPU: `rewardlab train` on a ~0.5B random-init model
# (a Qwen2-0.5B-shaped config: 24 layers, hidden 896, 14 heads / 2 KV heads, vocab 151936,
# 494 M parameters, with rewardlab's small local tokenizer) for a few steps, with the HF engine
# and, where vLLM imports, the vLLM engine, each synchronous and then with `--async-steps 1` (generation
# one step ahead in a worker process, issue 26). Prints per-phase step time, rollout tokens/s and peak
# GPU memory for each run, then each engine's async s/step next to its synchronous s/step.
# Then the update alone by micro-batch layout (bench/packing.py, issue 38; PACKING=0 skips it), and one colocated
# RL step against TRL's GRPOTrainer (bench/train_step.py; TRL_STEP=0 skips it), and environment episodes through
# the policy endpoint, seeded requests batched (bench/envs.py; ENVS=0 skips it).
#
#   bash bench/gpu_check.sh                          # PY=.venv/bin/python (needs a CUDA torch)
#   PY=/opt/venv/bin/python VLLM_PY=/opt/vllm-venv/bin/python bash bench/gpu_check.sh
#   STEPS=6 PROMPTS=32 GROUP=8 MAX_NEW_TOKENS=512 bash bench/gpu_check.sh
#   SIZE=tiny ALLOW_CPU=1 bash bench/gpu_check.sh    # smoke-test this script on a CPU machine
#
# PY: a python with a CUDA build of torch and rewardlab installed (`pip install -e .`).
# VLLM_PY: a python with the GPU `vllm` package and rewardlab (vllm pins its own torch, so this is
# usually a separate venv); defaults to PY when PY imports vllm, else the vLLM run is skipped.
# Peak GPU memory is sampled with nvidia-smi every 200 ms (whole device, so it includes vLLM's
# reserved share: gpu_memory_utilization 0.3 by default) and torch's own peak is not separated.
# Random-init weights never emit EOS on purpose, so every completion runs to MAX_NEW_TOKENS: a
# throughput check, not a learning check. Step 1 includes warm-up; the summary averages the
# later steps when there are any. Async runs: the worker holds its own copy of the policy (and, for
# vLLM, its own engine; the trainer still builds its in-process one), so peak memory is higher; on a GPU
# the vLLM worker's weight snapshots travel by CUDA IPC. ASYNC=0 skips the async runs.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
STEPS=${STEPS:-4}
PROMPTS=${PROMPTS:-16}
GROUP=${GROUP:-8}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-256}
MICRO=${MICRO:-16}
SIZE=${SIZE:-0.5b}
ALLOW_CPU=${ALLOW_CPU:-0}
ASYNC=${ASYNC:-1}
WORK=${WORK:-$(mktemp -d /tmp/rewardlab-gpu-check.XXXXXX)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

has_cuda() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
has_vllm() { "$1" -c 'import vllm' >/dev/null 2>&1; }

if ! has_cuda "$PY"; then
    if [ "$ALLOW_CPU" != 1 ]; then
        echo "gpu_check: $PY has no CUDA torch or this machine has no GPU; set PY to a CUDA python (ALLOW_CPU=1 to smoke-test on CPU)" >&2
        exit 2
    fi
    echo "gpu_check: no GPU, running the CPU smoke test (SIZE=$SIZE)"
fi
if [ -z "${VLLM_PY:-}" ] && has_vllm "$PY"; then VLLM_PY=$PY; fi

echo "== machine"
date -u +"date %Y-%m-%dT%H:%M:%SZ"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/git /' || true
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
[ -n "${VLLM_PY:-}" ] && "$VLLM_PY" -c 'import vllm; print("vllm", vllm.__version__)' || echo "vllm: not available (set VLLM_PY)"
echo "work dir $WORK; steps $STEPS, prompts $PROMPTS x group $GROUP, max_new_tokens $MAX_NEW_TOKENS, micro-batch $MICRO"

echo "== model ($SIZE, random init)"
"$PY" - "$WORK/model" "$SIZE" <<'EOF'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
from rewardlab.testing import build_tokenizer
out, size = sys.argv[1], sys.argv[2]
tok = build_tokenizer()
dims = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
            num_key_value_heads=2, vocab_size=151936)  # Qwen2-0.5B shape
if size == "tiny":
    dims = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=len(tok))
cfg = AutoConfig.for_model("qwen2", max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **dims)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
model.save_pretrained(out)
tok.save_pretrained(out)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters -> {out}")
EOF

run_engine() {  # $1 = hf | vllm, $2 = python, $3 = --async-steps (default 0)
    local engine=$1 py=$2 k=${3:-0}
    local label="$engine-k$k" run="$WORK/run-$engine-k$k" mem="$WORK/mem-$engine-k$k.txt" sampler=""
    echo "== rewardlab train --rollout $engine --async-steps $k"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$mem" &
        sampler=$!
    fi
    local t0=$SECONDS
    "$py" -m rewardlab train --algo grpo --model "$WORK/model" --task arith --rollout "$engine" \
        --steps "$STEPS" --prompts-per-step "$PROMPTS" --group-size "$GROUP" --max-new-tokens "$MAX_NEW_TOKENS" \
        --micro-batch-size "$MICRO" --rollout-batch-size $((PROMPTS * GROUP)) --train-top-layers 0 \
        --async-steps "$k" --save-every 100000 --no-plots --no-progress --output-dir "$run" 2>&1 | tail -n 20
    local status=${PIPESTATUS[0]}
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null || true
    echo "wall $((SECONDS - t0)) s, exit $status"
    "$py" - "$run/metrics.jsonl" "$mem" "$label" "$WORK/step-$label.txt" <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
use = rows[1:] or rows  # step 1 includes warm-up (CUDA init, vLLM graphs)
def mean(k):
    vals = [r[k] for r in use if isinstance(r.get(k), (int, float))]
    return sum(vals) / len(vals) if vals else float("nan")
peak = "n/a"
if os.path.exists(sys.argv[2]) and os.path.getsize(sys.argv[2]):
    peak = f"{max(int(x) for x in open(sys.argv[2]).read().split()) / 1024:.1f} GiB"
print(f"{sys.argv[3]:>8}: steps {[r['step'] for r in use]} | step {mean('time/step'):.2f} s = generate "
      f"{mean('time/generate'):.2f} + reward {mean('time/reward'):.2f} + update {mean('time/update'):.2f} | "
      f"rollout {mean('tokens/s'):.0f} tok/s | peak GPU memory {peak}")
if "async/overlap" in use[0]:  # generate is the worker's time; the trainer waited trainer_idle_s of it
    print(f"{'':>8}  async: overlap {mean('async/overlap'):.2f}, trainer idle {mean('async/trainer_idle_s'):.2f} s,"
          f" engine idle {mean('async/engine_idle_s'):.2f} s, push {mean('async/push_s'):.3f} s,"
          f" staleness max {max(r['async/staleness_max'] for r in rows):g}")
with open(sys.argv[4], "w") as f:
    f.write(f"{mean('time/step'):.3f}\n")
EOF
    return "$status"
}

summary=()
engines=("hf $PY")
if [ -n "${VLLM_PY:-}" ]; then engines+=("vllm $VLLM_PY"); else summary+=("vllm skipped (not installed)"); fi
for ks in 0 $([ "$ASYNC" = 1 ] && echo 1); do
    for e in "${engines[@]}"; do
        set -- $e
        run_engine "$1" "$2" "$ks" && summary+=("$1 k=$ks ok") || summary+=("$1 k=$ks FAILED")
    done
done
echo "== s/step, synchronous vs --async-steps 1 (steps after the first)"
for e in "${engines[@]}"; do
    set -- $e
    sync=$(cat "$WORK/step-$1-k0.txt" 2>/dev/null || echo n/a)
    async=$(cat "$WORK/step-$1-k1.txt" 2>/dev/null || echo n/a)
    echo "$1: sync $sync s/step, async $async s/step"
done
# issue 38: the update alone by micro-batch layout (bench/packing.py): padded by count vs token budget vs packed vs
# group-packed, on a Qwen3-0.6B-shaped random model (bf16) at the prime-rl trainer's setting, ~16k tokens per
# micro-batch (their figure: 11.9k tok/s at 11.1% MFU on one H100), long-tail completion lengths. PACKING=0 skips.
if [ "${PACKING:-1}" = 1 ]; then
    echo "== update by micro-batch layout (bench/packing.py)"
    if has_cuda "$PY"; then
        "$PY" bench/packing.py --workloads longtail --device cuda --shape qwen3-0.6b --budget 16384 \
            --micro-batch-size 8 --repeats 3 --json "$WORK/packing.json" \
            && summary+=("packing ok") || summary+=("packing FAILED")
    else
        "$PY" bench/packing.py --workloads longtail --repeats 1 --json "$WORK/packing.json" \
            && summary+=("packing ok") || summary+=("packing FAILED")
    fi
fi
# issue 38: one colocated step (HF generate + update on the same GPU) against TRL's GRPOTrainer, same model, prompts,
# sizes and reward (bench/train_step.py; TRL_STEP=0 skips; needs trl in PY). On the GPU: a 28-layer, 1024-wide
# random Qwen2 (Qwen3-0.6B's depth and width, rewardlab's small vocabulary), 16 prompts x 8, 256 tokens.
if [ "${TRL_STEP:-1}" = 1 ]; then
    echo "== one RL step against TRL (bench/train_step.py)"
    if ! "$PY" -c 'import trl' 2>/dev/null; then
        summary+=("trl step skipped (trl not installed in $PY)")
    elif has_cuda "$PY"; then
        "$PY" bench/train_step.py --device cuda --hidden 1024 --layers 28 --heads 16 --prompts 16 --group 8 \
            --max-new-tokens "$MAX_NEW_TOKENS" --steps 4 --json "$WORK/train_step.json" \
            && summary+=("trl step ok") || summary+=("trl step FAILED")
    else
        "$PY" bench/train_step.py --steps 2 --prompts 2 --group 2 --max-new-tokens 8 --json "$WORK/train_step.json" \
            && summary+=("trl step ok") || summary+=("trl step FAILED")
    fi
fi
# issue 39: environment episodes through the policy endpoint vs in-process (bench/envs.py) on the random model above,
# 128 episodes x 64 tokens: concurrent seeded requests (one seed per episode, as verifiers sends) share engine calls,
# each row on its own seed's stream; on a GPU a batch-1 decode leaves most of it idle. ENVS=0 skips.
if [ "${ENVS:-1}" = 1 ]; then
    echo "== episodes through the endpoint (bench/envs.py)"
    if has_cuda "$PY"; then
        "$PY" bench/envs.py --model "$WORK/model" --device cuda --episodes 128 --max-new-tokens 64 \
            --out "$WORK/envs.json" && summary+=("envs ok") || summary+=("envs FAILED")
    else
        "$PY" bench/envs.py --model "$WORK/model" --episodes 16 --max-new-tokens 8 --out "$WORK/envs.json" \
            && summary+=("envs ok") || summary+=("envs FAILED")
    fi
fi
echo "== done: ${summary[*]}; runs in $WORK"
