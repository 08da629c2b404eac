#!/usr/bin/env bash
# The engine against transformers + PEFT at a published Qwen3-VL size, on the GPU machine
# (tools/full_size_parity.py says what is compared and the thresholds). Here: `npm run device:cli`
# and `bash ../shared/device/prepare.sh`; there, with carry [".device", ".device-cli"]:
#   bash tools/full_size_parity.sh 4b [make|engine|compare|all] [DIR]
# The steps can go in separate commands on one warm machine (the 8B's take longer than one command may).
set -euo pipefail
size=$1; step=${2:-all}; dir=${3:-/tmp/parity-$1}
source .device/gpu-env.sh
cli() { node .device-cli/cli.mjs "$@"; }
par=$dir/parity
if [ "$step" = make ] || [ "$step" = all ]; then
  rm -rf "$dir"
  PYTHONUNBUFFERED=1 python3 tools/full_size_parity.py make --size "$size" --dir "$dir"
fi
if [ "$step" = engine ] || [ "$step" = all ]; then
  cli logits --model "$dir" --input "$par/prompt.safetensors" --quant none --out "$par/ours.safetensors"
  cli logits --model "$dir" --input "$par/prompt.safetensors" --quant q4 --out "$par/ours_q4.safetensors"
  cli generate --model "$dir" --input "$par/prompt.safetensors" --quant none --max-new-tokens 8 --temperature 0 > "$par/ours_greedy.json"
  cli grads --model "$dir" --batch "$par/batch.json" --config "$par/config.json" --lora "$par/lora/adapter_model.safetensors" --out "$par/ours_grads.safetensors"
fi
if [ "$step" = compare ] || [ "$step" = all ]; then
  python3 tools/full_size_parity.py compare --dir "$dir" --out "${OUT:-$dir}/parity-$size.json"
fi
