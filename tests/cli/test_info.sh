#!/usr/bin/env bash
# tensorops info, --help, usage errors and the TOPS_ISA override.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
py() { command -v python3 >/dev/null && python3 "$@"; }

check "info runs" "$cli" info
check "info names the chosen level" bash -c "'$cli' info | grep -q '^isa '"
check "info --json is valid JSON with the keys" bash -c \
  "'$cli' info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"isa\"] and \"avx2\" in d[\"features\"] and \"l3\" in d[\"cache_bytes\"] and \"openmp\" in d[\"build\"]'"
check "--help lists commands" bash -c "'$cli' --help | grep -q 'info'"
check "info --help" bash -c "'$cli' info --help | grep -q 'usage: tensorops info'"
expect_rc "no command exits 2" 2 "$cli"
expect_rc "unknown command exits 2" 2 "$cli" frobnicate
expect_rc "unknown flag exits 2" 2 "$cli" info --frob
check "unknown command goes to stderr" bash -c "'$cli' frobnicate 2>&1 >/dev/null | grep -q 'unknown command'"
check "TOPS_ISA=ref is honoured" bash -c \
  "TOPS_ISA=ref '$cli' info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"isa\"]==\"ref\" and d[\"isa_forced\"]'"
expect_rc "TOPS_ISA unknown fails" 1 env TOPS_ISA=avx3000 "$cli" info
check "TOPS_ISA unknown lists valid levels" bash -c "TOPS_ISA=avx3000 '$cli' info | grep -q 'valid here: ref'"
# A level the machine lacks (avx2 on arm) is refused the same way.
if [ "$(uname -m)" = aarch64 ]; then
  expect_rc "TOPS_ISA unavailable fails" 1 env TOPS_ISA=avx2 "$cli" info
  check "TOPS_ISA unavailable says so" bash -c "TOPS_ISA=avx2 '$cli' info | grep -q 'not available on this machine'"
fi
# Levels without kernels of their own are not offered: neon* are no levels,
# amx only where the build has AMX kernels (and the machine the tiles).
for lv in neon neon_dotprod neon_i8mm; do
  expect_rc "TOPS_ISA=$lv is no level" 1 env TOPS_ISA=$lv "$cli" info
  check "TOPS_ISA=$lv is unknown" bash -c "TOPS_ISA=$lv '$cli' info | grep -q 'not a known level; valid here: ref'"
done
check "info lists no neon level" bash -c "! '$cli' info | grep -E '^(levels|isa) ' | grep -q neon"
check "info --json offers no neon level" bash -c \
  "'$cli' info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert not [l for l in d[\"isa_available\"] if l.startswith(\"neon\")]'"
if "$cli" info --json | python3 -c 'import json,sys; sys.exit("amx" not in json.load(sys.stdin)["isa_available"])'; then
  skip "TOPS_ISA=amx refused" "this build and machine run the AMX kernels"
else
  expect_rc "TOPS_ISA=amx refused" 1 env TOPS_ISA=amx "$cli" info
  check "TOPS_ISA=amx says why and lists levels" bash -c \
    "TOPS_ISA=amx '$cli' info | grep -E -q '(no amx kernels|not available on this machine); valid here: ref'"
fi
finish
