#!/usr/bin/env bash
# The default thread count: OMP_NUM_THREADS, the affinity mask (taskset), as
# tensorops info reports it.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
threads() { "$@" info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["threads"], d["threads_reason"])'; }
unset OMP_NUM_THREADS

check "info reports the default threads" bash -c "'$cli' info | grep -E -q '^threads +[0-9]+ \\(.*affinity mask'"
for n in 1 3; do
  check "OMP_NUM_THREADS=$n gives $n" bash -c "OMP_NUM_THREADS=$n '$cli' info --json | python3 -c \
    'import json,sys; d=json.load(sys.stdin); assert d[\"threads\"]==$n and \"OMP_NUM_THREADS=$n\" in d[\"threads_reason\"], d'"
done
check "OMP_NUM_THREADS list: its first element" bash -c "OMP_NUM_THREADS=3,2 '$cli' info | grep -q '^threads   3 '"
base=$("$cli" info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["threads"])')
check "OMP_NUM_THREADS=abc is ignored, with a note" bash -c \
  "OMP_NUM_THREADS=abc '$cli' info | grep -E -q '^threads   $base .*OMP_NUM_THREADS=\"abc\" ignored'"
if command -v taskset >/dev/null; then
  check "taskset -c 0 gives 1 thread" bash -c "taskset -c 0 '$cli' info --json | python3 -c \
    'import json,sys; d=json.load(sys.stdin); assert d[\"threads\"]==1 and \"1 in the affinity mask\" in d[\"threads_reason\"], d'"
  check "OMP_NUM_THREADS beats the affinity mask" bash -c \
    "OMP_NUM_THREADS=3 taskset -c 0 '$cli' info | grep -q '^threads   3 '"
  check "a matmul under taskset -c 0 runs" bash -c "taskset -c 0 '$cli' bench --op matmul --format f32 --m 4 --k 64 --n 64 --repeat 1 >/dev/null"
else
  skip "taskset -c 0 gives 1 thread" "taskset is not installed"
fi
finish
