#!/usr/bin/env bash
# Runs each libFuzzer target for a short time from a generated seed corpus
# (make fuzz-smoke; CI).  usage: tests/fuzz/smoke.sh BUILD_DIR SECONDS
# A longer run of one target, from the same seeds and dictionary:
#   build-fuzz/fuzz_make_seeds /tmp/seeds
#   build-fuzz/fuzz_gguf -runs=10000000 -max_len=4096 -dict=tests/fuzz/gguf.dict CORPUS /tmp/seeds/gguf
set -euo pipefail
build=${1:-build-fuzz}
seconds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
seeds=$build/fuzz-seeds
rm -rf "$seeds"
"$build/fuzz_make_seeds" "$seeds"
mkdir -p "$build/fuzz-artifacts"
status=0
for target in npy safetensors gguf model_safetensors; do
  corpus=$build/fuzz-corpus/$target
  mkdir -p "$corpus"
  echo "== fuzz_$target for ${seconds}s ($(ls "$seeds/$target" | wc -l) seeds)"
  if ! "$build/fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -dict="$here/$target.dict" -artifact_prefix="$build/fuzz-artifacts/$target-" -print_final_stats=1 \
      "$corpus" "$seeds/$target" 2>"$build/fuzz-$target.log"; then
    tail -n 60 "$build/fuzz-$target.log" >&2
    echo "fuzz_$target found a failure; the input is in $build/fuzz-artifacts/" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^Done" "$build/fuzz-$target.log" || true
  fi
done
exit $status
