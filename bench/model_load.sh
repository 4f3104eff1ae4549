#!/usr/bin/env bash
# Load time and peak memory of a Qwen3-0.6B-shaped model (random weights, the real Qwen3
# tokenizer) on CPU, stored in float32 and in bfloat16: what `tandem generate` (the
# rollout engine) and `tandem logprobs` (the learner's module) take to load it and
# evaluate 3 tokens. The reference, measured in the same run, is reading the
# model.safetensors file once (`cat > /dev/null`, page cache dropped where allowed) and
# its size. Prints one JSON line per (dtype, path).
#
#   bench/model_load.sh [BUILD_DIR]   (default build; needs build/test-assets/qwen3 from
#                                      scripts/fetch_tokenizer_assets.sh and ~4 GB of disk)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tandem=$build/controller/tandem
tokenizer=build/test-assets/qwen3
[ -f "$tokenizer/tokenizer.json" ] || { echo "model_load: run scripts/fetch_tokenizer_assets.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Qwen3-0.6B's config.json shape (Hugging Face Qwen/Qwen3-0.6B).
cat > "$work/config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
 "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
 "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
 "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 151643,
 "eos_token_id": 151645, "torch_dtype": "bfloat16"}
JSON

# Wall seconds and peak RSS (KiB) of a command, as "seconds kib".
measure() {
  /usr/bin/python3 - "$@" <<'PY'
import resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}

for dtype in float32 bfloat16; do
  model=$work/$dtype
  "$tandem" init-model --config "$work/config.json" --tokenizer "$tokenizer" --out "$model" --dtype "$dtype" >/dev/null
  bytes=$(stat -c %s "$model/model.safetensors")
  sync; (echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null || true
  read -r raw_s _ < <(measure cat "$model/model.safetensors")
  for path in engine learner; do
    sync; (echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null || true
    if [ $path = engine ]; then
      read -r seconds kib < <(measure "$tandem" generate --model "$model" --prompt-ids 1,2,3 --max-new-tokens 1 --temperature 0)
    else
      read -r seconds kib < <(measure "$tandem" logprobs --model "$model" --ids 1,2,3)
    fi
    /usr/bin/python3 -c "
import json, sys
seconds, kib, raw, size = map(float, sys.argv[3:])
print(json.dumps({'bench': 'model_load', 'model': 'qwen3-0.6b-shape', 'file_dtype': sys.argv[1], 'path': sys.argv[2],
                  'load_and_3_tokens_s': round(seconds, 3), 'peak_rss_mib': round(kib / 1024, 1),
                  'file_mib': round(size / 2**20, 1), 'reference': 'cat model.safetensors > /dev/null',
                  'reference_s': round(raw, 3), 'ratio_time': round(seconds / raw, 2),
                  'ratio_rss_to_file': round(kib * 1024 / size, 2)}))" "$dtype" "$path" "$seconds" "$kib" "$raw_s" "$bytes"
  done
done
