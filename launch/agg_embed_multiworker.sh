#!/usr/bin/env bash
# One frontend and two embedding workers, each on its own endpoint and system port.
#
#   launch/agg_embed_multiworker.sh MODEL1 [MODEL2] [-- extra worker args]
#
# MODEL2 defaults to MODEL1 (same-model load balancing); two different models give
# name-keyed dispatch. Ports: DYN_HTTP_PORT (8000) for the frontend; worker 1 uses
# DYN_SYSTEM_PORT1, then DYN_SYSTEM_PORT, then 8081; worker 2 uses DYN_SYSTEM_PORT2 (8082).
# ENGINE=hash|transformers|vllm (default hash); with transformers or vllm each MODELn is a
# model directory, served under SERVED_MODEL_NAME1/2 (default: MODELn as given).
# The script exits non-zero as soon as any worker exits, and on exit, SIGINT or SIGTERM
# it stops the processes it started, and only those.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# Safe-path mode: no Python started from here imports from the current folder (a stray
# json.py there), so without a venv this checkout goes on the path by name.
export PYTHONSAFEPATH=1
if [ -z "${EMBEDLAB:-}" ] && [ ! -x "$here/.venv/bin/embedlab" ]; then
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
fi
EMBEDLAB=${EMBEDLAB:-$( [ -x "$here/.venv/bin/embedlab" ] && echo "$here/.venv/bin/embedlab" || echo "python3 -m embedlab" )}

models=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")
if [ ${#models[@]} -lt 1 ] || [ ${#models[@]} -gt 2 ]; then
  echo "usage: $0 MODEL1 [MODEL2] [-- extra worker args]" >&2
  exit 2
fi
MODEL1=${models[0]}
MODEL2=${models[1]:-$MODEL1}

HTTP_PORT=${DYN_HTTP_PORT:-8000}
SYSTEM_PORT1=${DYN_SYSTEM_PORT1:-${DYN_SYSTEM_PORT:-8081}}
SYSTEM_PORT2=${DYN_SYSTEM_PORT2:-8082}
ENGINE=${ENGINE:-hash}
FRONTEND_URL="http://127.0.0.1:${HTTP_PORT}"

engine_args=(--engine "$ENGINE")
if [ "$ENGINE" = "vllm" ]; then
  # The seed's worker flags: pooling runner, MEAN pooler, fp32.
  engine_args+=(--runner pooling --dtype float32 --pooler-config "${POOLER_CONFIG:-{\"pooling_type\": \"MEAN\"}}" --max-model-len "${MAX_MODEL_LEN:-2048}")
elif [ -n "${MAX_MODEL_LEN:-}" ]; then
  engine_args+=(--max-model-len "$MAX_MODEL_LEN")
fi

# One GPU per worker where GPUs exist.
gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  IFS=',' read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null 2>&1; then
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true)
fi
if [ "$ENGINE" != "hash" ] && [ ${#gpus[@]} -eq 1 ]; then
  echo "error: two workers need two GPUs, CUDA_VISIBLE_DEVICES gives one (${gpus[0]})" >&2
  exit 2
fi

# vLLM on CPU binds every engine to the first core unless told otherwise: one core per
# worker instead, unless VLLM_CPU_OMP_THREADS_BIND is set (then both workers take it).
cores=()
if [ "$ENGINE" = "vllm" ] && [ ${#gpus[@]} -eq 0 ] && [ -z "${VLLM_CPU_OMP_THREADS_BIND:-}" ]; then
  IFS=',' read -r -a ranges <<< "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)"
  for r in "${ranges[@]}"; do
    if [[ $r == *-* ]]; then for ((c = ${r%-*}; c <= ${r#*-}; c++)); do cores+=("$c"); done; else cores+=("$r"); fi
  done
fi

pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

$EMBEDLAB frontend --host 127.0.0.1 --port "$HTTP_PORT" &
pids+=($!)

start_worker() {  # n model system_port
  local n=$1 model=$2 port=$3 served pin=() path=()
  served=$(eval echo "\${SERVED_MODEL_NAME$n:-$model}")
  [ "$ENGINE" != "hash" ] && path=(--model-path "$model")
  [ ${#gpus[@]} -ge 2 ] && pin=("CUDA_VISIBLE_DEVICES=${gpus[$((n - 1))]}")
  [ ${#cores[@]} -gt 0 ] && pin+=("VLLM_CPU_OMP_THREADS_BIND=${cores[$(( (n - 1) % ${#cores[@]} ))]}")
  env "${pin[@]}" DYN_SYSTEM_PORT="$port" $EMBEDLAB worker "${engine_args[@]}" "${path[@]}" \
    --served-model-name "$served" --endpoint "dynamo.embed-worker-$n.generate" --frontend-url "$FRONTEND_URL" "${extra[@]}" &
  pids+=($!)
}
start_worker 1 "$MODEL1" "$SYSTEM_PORT1"
start_worker 2 "$MODEL2" "$SYSTEM_PORT2"

# The first process to exit ends the deployment, with a non-zero status.
set +e
wait -n "${pids[@]}"
status=$?
echo "a process of the deployment exited (status $status); stopping the rest" >&2
exit $(( status == 0 ? 1 : status ))
