#!/usr/bin/env bash
# tensorops bench --op attention: one small case end to end (JSON keys and
# values, accuracy checked against f64 inside the bench), and usage errors.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

expect_rc "small GQA case runs and meets its accuracy bound" 0 "$cli" bench --op attention --batch 2 --heads 4 \
  --kv-heads 2 --seq 40 --kv-seq 70 --head-dim 48 --dtype f32 --dtype bf16 --repeat 1 --threads 2 --no-progress \
  --json "$work/a.json"
if command -v python3 >/dev/null; then
  expect_rc "JSON rows carry the attention keys" 0 python3 - "$work/a.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, rows
for r in rows:
    assert r["op"] == "attention" and r["format"] in ("f32", "bf16")
    assert (r["m"], r["n"], r["k"], r["batch"], r["heads"], r["kv_heads"]) == (40, 70, 48, 2, 4, 2)
    assert r["median_s"] > 0 and r["gflops"] > 0 and r["cos_sim"] > 0.999
assert sorted(bool(r["causal"]) for r in rows) == [False, False, True, True]
PY
fi
expect_rc "varlen case runs (packed call against the padded batch)" 0 "$cli" bench --op attention --varlen 1,7,33,70 \
  --heads 4 --kv-heads 2 --head-dim 32 --dtype f32 --dtype f16 --repeat 1 --threads 2 --no-progress --json "$work/v.json"
if command -v python3 >/dev/null; then
  expect_rc "varlen rows: all tokens, the longest, the padded baseline" 0 python3 - "$work/v.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, rows
for r in rows:
    assert r["path"].startswith("varlen/") and r["baseline"] == "tops-padded"
    assert (r["m"], r["n"], r["k"], r["batch"], r["heads"], r["kv_heads"]) == (111, 70, 32, 4, 4, 2)
    assert r["median_s"] > 0 and r["baseline_median_s"] > 0 and r["speedup"] > 0 and r["cos_sim"] > 0.999
PY
fi
expect_rc "varlen takes no --seq" 2 "$cli" bench --op attention --varlen 5,6 --seq 7
expect_rc "varlen lengths must be positive integers" 2 "$cli" bench --op attention --varlen 5,,6
expect_rc "varlen needs a list" 2 "$cli" bench --op attention --varlen
expect_rc "matmul flags are refused" 2 "$cli" bench --op attention --m 4
expect_rc "heads must be a multiple of kv heads" 2 "$cli" bench --op attention --heads 3 --kv-heads 2
expect_rc "bad dtype" 2 "$cli" bench --op attention --dtype int8
expect_rc "head dim out of range" 2 "$cli" bench --op attention --head-dim 300
expect_rc "head dim below 16" 2 "$cli" bench --op attention --head-dim 8

finish
