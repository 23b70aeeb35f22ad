#!/usr/bin/env bash
# One frontend and one embedding worker.
#
#   launch/agg_embed.sh [MODEL]        (default MODEL: embed-model)
#
# DYN_HTTP_PORT (8000) for the frontend, DYN_SYSTEM_PORT (8081) for the worker's metrics.
# ENGINE=hash|transformers|vllm (default hash); with transformers or vllm, MODEL is a model
# directory. On exit, SIGINT or SIGTERM it stops the processes it started, and only those.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# Safe-path mode: no Python started from here imports from the current folder (a stray
# json.py there), so without a venv this checkout goes on the path by name.
export PYTHONSAFEPATH=1
if [ -z "${EMBEDLAB:-}" ] && [ ! -x "$here/.venv/bin/embedlab" ]; then
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
fi
EMBEDLAB=${EMBEDLAB:-$( [ -x "$here/.venv/bin/embedlab" ] && echo "$here/.venv/bin/embedlab" || echo "python3 -m embedlab" )}
MODEL=${1:-embed-model}
shift $(( $# > 0 ? 1 : 0 ))
[ "${1:-}" = "--" ] && shift
HTTP_PORT=${DYN_HTTP_PORT:-8000}
ENGINE=${ENGINE:-hash}

path=()
[ "$ENGINE" != "hash" ] && path=(--model-path "$MODEL")

pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

$EMBEDLAB frontend --host 127.0.0.1 --port "$HTTP_PORT" &
pid=$!
# The worker is the script's last word: when it ends, the trap stops the frontend.
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT:-8081} $EMBEDLAB worker --engine "$ENGINE" "${path[@]}" \
  --served-model-name "${SERVED_MODEL_NAME:-$MODEL}" --endpoint dynamo.embed-worker-1.generate \
  --frontend-url "http://127.0.0.1:$HTTP_PORT" "$@"
