#!/usr/bin/env bash
# tensorops bench --op conv2d: two small layers end to end (a depthwise and a
# 3x3, relaxed formats too; accuracy checked against f64 inside the bench;
# oneDNN rows where the build and machine have it), and usage errors.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

expect_rc "two layers run and meet their accuracy bounds" 0 "$cli" bench --op conv2d --relaxed \
  --layers mobilenetv2-dw-s1,resnet50-res5-3x3 --conv-batch 1 --repeat 1 --threads 2 --no-progress --json "$work/c.json"
if command -v python3 >/dev/null; then
  expect_rc "JSON rows: ours in three formats per layer, oneDNN's where present" 0 python3 - "$work/c.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ours = [r for r in rows if not r["format"].startswith("onednn")]
assert sorted(r["format"] for r in ours) == sorted(["f32", "int8-g32", "int4-g32"] * 2), ours
for r in rows:
    assert r["op"] == "conv2d" and r["median_s"] > 0 and r["cos_sim"] > 0.99
    assert r["path"].startswith(("mobilenetv2-dw-s1 b1", "resnet50-res5-3x3 b1")), r["path"]
res5 = [r for r in ours if r["path"].startswith("resnet50-res5")]
assert all((r["m"], r["k"], r["n"]) == (49, 4608, 512) for r in res5), res5
PY
fi
expect_rc "matmul's shape flags are refused" 2 "$cli" bench --op conv2d --m 4
expect_rc "unknown layer" 2 "$cli" bench --op conv2d --layers resnet50-res9
expect_rc "bad batch" 2 "$cli" bench --op conv2d --conv-batch 0
expect_rc "unknown op" 2 "$cli" bench --op conv3d
check "--help lists the conv2d flags" bash -c "'$cli' bench --help | grep -q -- '--conv-batch'"

finish
