#!/usr/bin/env bash
# The CUDA parts of the CLI on any machine: info lists the GPUs (or says why
# there are none); bench and validate with --device cuda either run or fail
# with one sentence, never crash; bad --device values are usage errors.
set -u
cli=$1
pass=0; fail=0
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then pass=$((pass+1)); echo "ok   $name"; else fail=$((fail+1)); echo "FAIL $name"; fi
}
expect_rc() { # name, rc, command...
  local name=$1 want=$2; shift 2
  "$@" >/dev/null 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then pass=$((pass+1)); echo "ok   $name"; else fail=$((fail+1)); echo "FAIL $name (rc $rc, want $want)"; fi
}

ngpu=$("$cli" info --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cuda_devices"]))')
check "info --json lists cuda_devices" test -n "$ngpu"
check "info has a cuda line" bash -c "'$cli' info | grep -Eq '^cuda(:| )'"
expect_rc "validate --device gpu:0 is a usage error" 2 "$cli" validate --quick --device gpu:0
expect_rc "validate --device cuda:x is a usage error" 2 "$cli" validate --quick --device cuda:x
if [ "$ngpu" = 0 ]; then
  echo "skip: no CUDA device; only the failure paths run"
  expect_rc "validate --device cuda exits 1 without a GPU" 1 "$cli" validate --quick --device cuda
  check "validate --device cuda says why" bash -c "'$cli' validate --quick --device cuda 2>&1 | grep -q 'cuda:0'"
  expect_rc "bench --device cuda exits 1 without a GPU" 1 "$cli" bench --device cuda --m 1 --no-progress
else
  expect_rc "validate --quick --device cuda passes" 0 "$cli" validate --quick --device cuda --only M2,mxfp4,q4_0
fi
expect_rc "validate --device cuda:99 exits 1" 1 "$cli" validate --quick --device cuda:99
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
