# Shared by the CLI tests (sourced): counters, checks, and the closing
# "N passed, N failed" line.  A failing check shows the start of its output.
pass=0; fail=0
_tops_cli_log=$(mktemp)  # removed by finish (scripts keep their own EXIT traps)
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@" >"$_tops_cli_log" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/     /' "$_tops_cli_log" | head -5; fi
}
expect_rc() { # name, wanted exit status, then the command
  local name=$1 want=$2; shift 2
  "$@" >"$_tops_cli_log" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name"; else bad "$name (rc $rc, want $want)"; sed 's/^/     /' "$_tops_cli_log" | head -5; fi
}
skip() { echo "skip $1 ($2)"; } # name, reason
finish() { rm -f "$_tops_cli_log"; echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; }
