#!/usr/bin/env bash
# tensorops bench: usage errors (exit 2), the hooks not yet filled (exit 1),
# and one tiny run whose JSON has exactly the documented keys and whose SVG
# is written.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

check "bench --help names the flags" bash -c "'$cli' bench --help | grep -q -- '--format LIST'"
expect_rc "unknown flag exits 2" 2 "$cli" bench --frob
expect_rc "--m 0 exits 2" 2 "$cli" bench --m 0
expect_rc "--m with junk exits 2" 2 "$cli" bench --m 1,x
expect_rc "--k not a number exits 2" 2 "$cli" bench --k abc
expect_rc "--n missing value exits 2" 2 "$cli" bench --n
expect_rc "--threads 0 exits 2" 2 "$cli" bench --threads 0
expect_rc "--repeat -1 exits 2" 2 "$cli" bench --repeat -1
expect_rc "unknown format exits 2" 2 "$cli" bench --format f32,int5-g32
expect_rc "unknown op exits 2" 2 "$cli" bench --op conv
expect_rc "unknown device exits 2" 2 "$cli" bench --device tpu
expect_rc "unknown isa exits 2" 2 "$cli" bench --isa avx3000
check "a bad format is named" bash -c "'$cli' bench --format int5-g32 2>&1 | grep -q int5-g32"

# The hook the CUDA engineer fills: until then a clear exit 1.
if ! "$cli" info | grep -q "cuda      not compiled in"; then
  echo "skip --device cuda (this build has CUDA)"
else
  expect_rc "--device cuda without CUDA exits 1" 1 "$cli" bench --device cuda
  check "--device cuda says why" bash -c "'$cli' bench --device cuda 2>&1 | grep -q 'no CUDA support'"
fi

# One tiny run of both ops: ragged matmul sizes, two formats, two M, and a
# small causal attention case; one table, one JSON, one SVG.
"$cli" bench --op matmul,attention --format f32,f16 --m 1,3 --k 67 --n 45 --batch 1 --heads 2 --seq 24 \
  --head-dim 16 --causal --repeat 1 --no-progress \
  --json "$tmp/b.json" --plot "$tmp/b.svg" >"$tmp/table.txt" 2>"$tmp/err.txt"; rc=$?
check "tiny run exits 0" test $rc = 0
[ $rc = 0 ] || cat "$tmp/err.txt"
check "table has the header and a row" bash -c "grep -q 'median ms' '$tmp/table.txt' && grep -q '^matmul *f16 *3 *67 *45' '$tmp/table.txt'"
check "table prints the roofline" grep -q "^roofline" "$tmp/table.txt"
check "JSON: 4 matmul rows with exactly the documented keys, then attention with its 4 more" python3 - "$tmp/b.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
keys = ["op", "format", "m", "k", "n", "threads", "isa", "path", "median_s", "min_s", "gflops", "gbps",
        "pack_s", "baseline", "baseline_median_s", "speedup", "floor_s", "floor_ratio", "rel_l2", "cos_sim"]
ours = [r for r in rows if r["op"] == "matmul" and not r["format"].startswith("onednn-")]
dnn = [r for r in rows if r["format"].startswith("onednn-")]
assert [r["op"] for r in rows] == ["matmul"] * (4 + len(dnn)) + ["attention"], rows
assert rows[:4] == ours and len(dnn) in (0, 2, 4), rows  # 2: a case oneDNN has no kernel for here (bf16 on AVX2)
for r in ours + dnn:
    assert sorted(r) == sorted(keys), sorted(r)
    assert r["k"] == 67 and r["n"] == 45
    assert r["median_s"] > 0 and r["min_s"] <= r["median_s"]
    assert r["rel_l2"] < (5e-2 if r in dnn else 1e-5) and r["cos_sim"] > 0.999
    assert abs(r["floor_ratio"] - r["median_s"] / r["floor_s"]) < 1e-9 * r["floor_ratio"]
    if r["baseline"] != "none":
        assert abs(r["speedup"] - r["baseline_median_s"] / r["median_s"]) < 1e-9 * r["speedup"]
assert [r["m"] for r in rows[:4]] == [1, 3, 1, 3]
att = rows[-1]
assert sorted(att) == sorted(keys + ["batch", "heads", "kv_heads", "causal"]) and att["causal"] in (True, 1)
PY
check "SVG written, one panel per op" bash -c "head -c 5 '$tmp/b.svg' | grep -q '<?xml' && grep -q '</svg>' '$tmp/b.svg' && grep -c '<g transform' '$tmp/b.svg' | grep -qx 2"
check "the table names the baseline's kernels" grep -q "^baseline: OpenBLAS, .* kernels" "$tmp/table.txt"
# The results carry OpenBLAS's core: each matmul row's baseline is
# openblas-sgemv:CORE or openblas-sgemm:CORE, the core the header names.
if grep -q "^baseline: OpenBLAS" "$tmp/table.txt"; then
  core=$(sed -n 's/^baseline: OpenBLAS, \([^ ]*\) kernels.*/\1/p' "$tmp/table.txt")
  check "JSON rows carry OpenBLAS's core ($core)" python3 - "$tmp/b.json" "$core" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["op"] == "matmul"]
want = {1: "openblas-sgemv:" + sys.argv[2]}
assert rows and all(r["baseline"] == want.get(r["m"], "openblas-sgemm:" + sys.argv[2]) for r in rows), rows
PY
fi
# oneDNN: built with it (scripts/deps.sh onednn before configuring), its
# rows follow ours and the header names its version and ISA; absent, one
# line says why and the run still passes.
if grep -q "^baseline: oneDNN: no rows: this build has no oneDNN" "$tmp/table.txt"; then
  echo "skip oneDNN rows (this build has no oneDNN: scripts/deps.sh onednn, then configure)"
else
  check "the header names oneDNN's version and ISA" grep -Eq "^baseline: oneDNN [0-9]+\.[0-9]+\.[0-9]+ \(.*\), isa [a-z0-9_]+" "$tmp/table.txt"
  check "oneDNN rows: bf16 and int8-dyn at each M, their path with the version and the kernel" python3 - "$tmp/b.json" "$tmp/table.txt" <<'PY'
import json, re, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["format"].startswith("onednn-")]
# a case oneDNN has no implementation of on this CPU (bf16 on AVX2) is named in the header instead
header = [l for l in open(sys.argv[2]) if l.startswith("baseline: oneDNN")][0]
want = [(f, m) for f in ("onednn-bf16", "onednn-int8-dyn") if f + ": no rows" not in header for m in (1, 3)]
assert want and [(r["format"], r["m"]) for r in rows] == want, (rows, header)
for r in rows:
    assert re.match(r"oneDNN \d+\.\d+\.\d+ \S+:\S+", r["path"]), r["path"]
    assert r["median_s"] > 0 and r["rel_l2"] > 1e-5 and r["baseline"].startswith("openblas-"), r
PY
  check "a oneDNN that cannot load: no rows, one line why, exit 0" bash -c "TOPS_ONEDNN_LIB=/nonexistent/libdnnl.so.3 '$cli' bench --format f32 --m 1 --k 8 --n 8 --repeat 1 --no-progress > '$tmp/nodnn.txt' && grep -q '^baseline: oneDNN: no rows: cannot load libdnnl.so.3' '$tmp/nodnn.txt' && ! grep -q '^matmul *onednn-' '$tmp/nodnn.txt'"
fi
# --isa avx2 on a machine with AVX-512: the baseline is pinned to OpenBLAS's
# AVX2 (Haswell) kernels too; a user's OPENBLAS_CORETYPE is kept.
if "$cli" info | grep -q "avx512f=yes"; then
  check "--isa avx2 pins the baseline to Haswell" bash -c "env -u OPENBLAS_CORETYPE '$cli' bench --isa avx2 --format f32 --m 1 --k 8 --n 8 --repeat 1 --no-progress | grep -Eq '^baseline: OpenBLAS, Haswell kernels \(OPENBLAS_CORETYPE=Haswell[,)]'"
  check "a user's OPENBLAS_CORETYPE is kept" bash -c "OPENBLAS_CORETYPE=SkylakeX '$cli' bench --isa avx2 --format f32 --m 1 --k 8 --n 8 --repeat 1 --no-progress | grep -q 'OPENBLAS_CORETYPE=SkylakeX'"
else
  echo "skip --isa avx2 baseline pinning (no AVX-512 here: OpenBLAS already runs AVX2 kernels)"
fi
expect_rc "an unknown op in a list exits 2" 2 "$cli" bench --op matmul,conv
expect_rc "unwritable --json exits 1 before running" 1 "$cli" bench --format f32 --m 1 --k 8 --n 8 --json /nonexistent-dir/x.json
finish
