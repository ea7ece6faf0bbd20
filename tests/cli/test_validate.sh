#!/usr/bin/env bash
# tensorops validate: usage errors (exit 2), and the quick ladder: JSON
# rows with their keys, an exit status that agrees with the rows, the
# rows every build supports passing, and --isa reaching the kernels.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

check "validate --help names the rows" bash -c "'$cli' validate --help | grep -q 'M1b'"
expect_rc "unknown flag exits 2" 2 "$cli" validate --frob
expect_rc "unknown isa exits 2" 2 "$cli" validate --isa avx3000
expect_rc "--isa without a value exits 2" 2 "$cli" validate --isa
# The highest level `tensorops info` does not list (avx2 on arm); none
# where the machine has every x86 level (a Xeon with AMX).
levels=$("$cli" info | awk '$1 == "levels"')
other=
for l in amx avx512_vnni avx512 avx2; do
  case " $levels " in *" $l "*) ;; *) other=$l; break ;; esac
done
if [ -n "$other" ]; then
  expect_rc "an isa this machine lacks exits 1" 1 "$cli" validate --quick --isa $other
else
  skip "an isa this machine lacks exits 1" "this machine has every level: $levels"
fi

# A subset of the quick ladder keeps this test short under the sanitizers
# (make run runs the whole quick ladder).
rows="M0,M1a,M1b,M2,f32,bf16-dest,mxfp4,nvfp4,q4_0,lut4,R-int4-g32"
expect_rc "--only with an unknown row exits 2" 2 "$cli" validate --quick --only M0,M9
"$cli" validate --quick --json --only "$rows" >"$tmp/v.json" 2>"$tmp/err.txt"; rc=$?
check "quick --json exits 0 or 1" test $rc -le 1
check "JSON rows agree with the exit status; M0 and f32 pass" python3 - "$tmp/v.json" $rc <<'PY'
import json, sys
rows = json.load(open(sys.argv[1])); rc = int(sys.argv[2])
keys = {"row", "format", "left", "dest", "relaxed", "m", "k", "n", "path", "cos_sim", "rel_l2", "max_abs",
        "snr_db", "bound", "pass", "error"}
assert rows and all(set(r) == keys for r in rows)
assert {r["row"] for r in rows} == set("M0,M1a,M1b,M2,f32,bf16-dest,mxfp4,nvfp4,q4_0,lut4,R-int4-g32".split(","))
assert any(r["relaxed"] for r in rows)
assert {(r["m"], r["k"], r["n"]) for r in rows} >= {(1, 4095, 31), (7, 4095, 1), (33, 4095, 31)}
for r in rows:
    if r["pass"]:
        assert r["rel_l2"] <= r["bound"] and not r["error"]
    else:
        assert r["error"] or r["rel_l2"] is None or r["rel_l2"] > r["bound"]
# f16 and f32 weights run on every build since the first matmul
for r in rows:
    if r["row"] in ("M0", "f32"):
        assert r["pass"], r
assert (rc == 1) == any(not r["pass"] for r in rows)
PY
"$cli" validate --quick --only "$rows" >"$tmp/v.txt" 2>&1; rc2=$?
check "table and JSON give the same status" test $rc = $rc2
check "table prints a verdict" grep -Eq "^(ok|FAILED): [0-9]+ row" "$tmp/v.txt"
# the table: a summary line per family, a line for each failing row; --verbose: every row
nrow=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$tmp/v.json")
nfail=$(python3 -c 'import json,sys; print(sum(not r["pass"] for r in json.load(open(sys.argv[1]))))' "$tmp/v.json")
re="^(${rows//,/|}) "
check "the summary counts every row run" grep -Eq "^matmul +$nrow row\(s\), $nfail failed, 0 skipped" "$tmp/v.txt"
check "without --verbose a line per failing row only" test "$(grep -Ec "$re" "$tmp/v.txt")" = "$nfail"
"$cli" validate --quick --verbose --only "$rows" >"$tmp/vv.txt" 2>&1
check "--verbose prints every row's line" test "$(grep -Ec "$re" "$tmp/vv.txt")" = "$nrow"
check "--isa ref runs the reference kernels" bash -c \
  "'$cli' validate --quick --isa ref --json --only M0 | python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin) if x[\"row\"]==\"M0\"]; assert r and all(\"ref\" in x[\"path\"] and x[\"pass\"] for x in r)'"
check "the varlen and key-length attention rows pass" bash -c \
  "'$cli' validate --json --only A-kv-lens,A-varlen,A-varlen-win | python3 -c 'import json,sys; r=json.load(sys.stdin); assert len(r)==3 and all(x[\"pass\"] for x in r), r'"
finish
