#!/usr/bin/env bash
# The CUDA parts of the CLI on any machine: info lists the GPUs (or says why
# there are none); bench and validate with --device cuda either run or fail
# with one sentence, never crash; bad --device values are usage errors.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"

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
finish
