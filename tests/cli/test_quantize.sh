#!/usr/bin/env bash
# tensorops quantize: the report, --format all, -o + --dequantize round trips,
# f16 and 1-D inputs, bad files (exit 1) and bad usage (exit 2).  Inputs are
# written here with perl (pack "f<"), so no Python is needed.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/tops_test_quantize.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# make_npy ROWS COLS SEED > file: f32, roughly normal weights with rare 8x outliers (ROWS 0 = 1-D).
make_npy() {
  perl -e '
    my ($rows, $cols, $seed) = @ARGV; srand($seed);
    my $shape = $rows > 0 ? "($rows, $cols)" : "($cols,)";
    my $h = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: $shape, }";
    my $total = 10 + length($h) + 1; $h .= " " x ((64 - $total % 64) % 64) . "\n";
    binmode STDOUT; print "\x93NUMPY\x01\x00" . pack("v", length($h)) . $h;
    my $n = ($rows > 0 ? $rows : 1) * $cols;
    for (1..$n) { my $x = 0; $x += rand() for 1..4; $x = ($x - 2) * 0.05; $x *= 8 if rand() < 0.01; print pack("f<", $x); }
  ' "$@"
}
# rel_l2 A.npy B.npy: ||a - b|| / ||a|| over two f32 .npy files of equal shape.
rel_l2() {
  perl -e '
    sub load { open(my $f, "<:raw", $_[0]) or die; local $/; my $b = <$f>;
               my $len = unpack("v", substr($b, 8, 2)); return unpack("f<*", substr($b, 10 + $len)); }
    my @a = load($ARGV[0]); my @b = load($ARGV[1]); die "sizes differ\n" if @a != @b;
    my ($num, $den) = (0, 0); for my $i (0..$#a) { $num += ($a[$i]-$b[$i])**2; $den += $a[$i]**2; }
    printf "%.9g\n", sqrt($num / $den);
  ' "$@"
}
# json_field NAME < json: the first number of that key.
json_field() { perl -ne 'print "$1\n" if /"'"$1"'":(-?[0-9.eE+-]+)/'; }
# close_to A B TOL: |A - B| <= TOL * |B|
close_to() { perl -e 'exit(abs($ARGV[0] - $ARGV[1]) <= $ARGV[2] * abs($ARGV[1]) ? 0 : 1)' "$@"; }

make_npy 48 200 1 > "$tmp/w.npy"     # K = 200: the last block of every row is short
make_npy 0 100 2 > "$tmp/v.npy"      # 1-D

# --- the report -------------------------------------------------------------------
check "quantize prints a report" bash -c "'$cli' quantize '$tmp/w.npy' --format int4-g32 | grep -Eq '^int4-g32 +4\.(5|6)'"
check "quantize --json has the error fields" bash -c \
  "'$cli' quantize '$tmp/w.npy' --format mxfp4 --json | grep -q '\"format\":\"mxfp4\",\"bits_per_weight\":4.2.*\"snr_db\":.*\"rel_l2\":.*\"cos_sim\":.*\"max_abs\":'"
"$cli" quantize "$tmp/w.npy" --format all > "$tmp/all.txt" 2>"$tmp/all.err"
rc=$?
if [ "$rc" = 0 ]; then ok "--format all succeeds"; else bad "--format all succeeds (rc $rc)"; sed 's/^/     /' "$tmp/all.err" | head; fi
for f in int4-g32 int4-g32:e8m0 mxfp4 nvfp4 q4_0 lut4 mxfp8 int8-g32 f16; do
  if grep -Eq "^$f " "$tmp/all.txt"; then ok "--format all has $f"; else bad "--format all has $f"; fi
done
if grep -Eq '^e8m0 +int4-g32:e8m0 vs int4-g32 \(f16 scales\): -[0-9.]+ dB SNR at -0\.[0-9]+ bits/weight; mxfp4 vs int4-g32: [-+][0-9.]+ dB at -0\.[0-9]+$' "$tmp/all.txt"
then ok "--format all answers the e8m0 question"; else bad "--format all answers the e8m0 question"; tail -2 "$tmp/all.txt"; fi
sed -i '/^e8m0 /d' "$tmp/all.txt"
if awk 'NR > 2 { if ($2 + 0 < prev) exit 1; prev = $2 + 0 }' "$tmp/all.txt"; then ok "--format all is sorted by bits/weight"; else bad "--format all is sorted by bits/weight"; fi
if awk 'NR > 2 && ($4 + 0 <= 0 || $5 + 0 <= 0.5 || $5 + 0 > 1.0000001) { exit 1 }' "$tmp/all.txt"; then ok "--format all rows are sane"; else bad "--format all rows are sane"; cat "$tmp/all.txt"; fi
check "--format all --json" bash -c "'$cli' quantize '$tmp/v.npy' --format all --json | grep -q '\"format\":\"int4-g32:e8m0\"'"

# --- -o and --dequantize round trips -------------------------------------------------
for f in int4-g32 int4-g32:e8m0 mxfp4 nvfp4 int4-g64-affine lut4 lut4-row q4_0 q8_0 mxfp6 e4m3-ch int2-g16 f16; do
  out=$("$cli" quantize "$tmp/w.npy" --format "$f" -o "$tmp/q.safetensors" --report --json 2>"$tmp/err")
  reported=$(printf '%s' "$out" | json_field rel_l2)
  if [ -n "$reported" ] && "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/d.npy" 2>>"$tmp/err"; then
    measured=$(rel_l2 "$tmp/w.npy" "$tmp/d.npy")
    # The file decodes to exactly what the report measured (f32 vs f64 sums aside).
    if close_to "$measured" "$reported" 1e-5; then ok "$f: -o then --dequantize reproduces rel-L2 $reported"
    else bad "$f: --dequantize gives rel-L2 $measured, the report said $reported"; fi
  else
    bad "$f: -o then --dequantize"; sed 's/^/     /' "$tmp/err" | head -5
  fi
done
check "the safetensors header names format and shape" \
  bash -c "'$cli' quantize '$tmp/w.npy' --format int4-g32 -o '$tmp/q.safetensors' && head -c 400 '$tmp/q.safetensors' | grep -q '\"format\":\"int4-g32\",\"shape\":\"\[48, 200\]\"'"
check "-o without --report prints one line" bash -c "[ \$('$cli' quantize '$tmp/w.npy' --format q4_0 -o '$tmp/q.safetensors' | wc -l) = 1 ]"

# f16 input: written by --dequantize --dtype f16, then quantized again.
check "--dequantize --dtype f16" "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/h.npy" --dtype f16
check "the f16 .npy says '<f2'" grep -q "'descr': '<f2'" "$tmp/h.npy"
check "quantize reads an f16 .npy" bash -c "'$cli' quantize '$tmp/h.npy' --format int8-g32 | grep -q '^input .*f16 \[48, 200\]'"
check "--dequantize --dtype bf16 writes u16" bash -c \
  "'$cli' quantize --dequantize '$tmp/q.safetensors' -o '$tmp/b.npy' --dtype bf16 && grep -q \"'descr': '<u2'\" '$tmp/b.npy'"
check "1-D input" bash -c "'$cli' quantize '$tmp/v.npy' --format nvfp4 | grep -q '^input .*f32 \[100\]'"

# --- failures: exit 1 with a sentence -----------------------------------------------
expect_rc "missing input exits 1" 1 "$cli" quantize "$tmp/nope.npy" --format mxfp4
check "missing input names the file" bash -c "'$cli' quantize '$tmp/nope.npy' --format mxfp4 2>&1 | grep -q 'nope.npy'"
head -c 100 "$tmp/w.npy" > "$tmp/cut.npy"
expect_rc "truncated .npy exits 1" 1 "$cli" quantize "$tmp/cut.npy" --format mxfp4
check "truncated header says why" bash -c "'$cli' quantize '$tmp/cut.npy' --format mxfp4 2>&1 | grep -q 'truncated'"
head -c 200 "$tmp/w.npy" > "$tmp/cut.npy"
check "truncated data says why" bash -c "'$cli' quantize '$tmp/cut.npy' --format mxfp4 2>&1 | grep -q 'holds 72 data bytes'"
expect_rc "--dequantize of a .npy exits 1" 1 "$cli" quantize --dequantize "$tmp/w.npy" -o "$tmp/x.npy"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"weight": 1}   ' > "$tmp/bad.safetensors"
check "--dequantize of a bad header says why" bash -c \
  "'$cli' quantize --dequantize '$tmp/bad.safetensors' -o '$tmp/x.npy' 2>&1 | grep -q '__metadata__'"
check "no output left behind" test ! -e "$tmp/x.npy"
perl -e 'my $h = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: (2, 2, 2), }";
  $h .= " " x (117 - length($h)) . "\n"; binmode STDOUT; print "\x93NUMPY\x01\x00" . pack("v", length($h)) . $h . pack("f<*", 1..8);' > "$tmp/r3.npy"
expect_rc "3-D input exits 1" 1 "$cli" quantize "$tmp/r3.npy" --format mxfp4

# --- usage: exit 2 -----------------------------------------------------------------
check "quantize --help" bash -c "'$cli' quantize --help | grep -q 'usage: tensorops quantize'"
check "the command table lists quantize" bash -c "'$cli' --help | grep -q 'quantize'"
expect_rc "no arguments exit 2" 2 "$cli" quantize
expect_rc "unknown flag exits 2" 2 "$cli" quantize "$tmp/w.npy" --format mxfp4 --frob
expect_rc "no --format exits 2" 2 "$cli" quantize "$tmp/w.npy"
expect_rc "--format without a value exits 2" 2 "$cli" quantize "$tmp/w.npy" --format
expect_rc "unknown format exits 2" 2 "$cli" quantize "$tmp/w.npy" --format int5-g32
expect_rc "bad group exits 2" 2 "$cli" quantize "$tmp/w.npy" --format int4-g33
expect_rc "--format all with -o exits 2" 2 "$cli" quantize "$tmp/w.npy" --format all -o "$tmp/q.safetensors"
expect_rc "two inputs exit 2" 2 "$cli" quantize "$tmp/w.npy" "$tmp/v.npy" --format mxfp4
expect_rc "--format twice exits 2" 2 "$cli" quantize "$tmp/w.npy" --format mxfp4 --format=nvfp4
expect_rc "--dequantize without -o exits 2" 2 "$cli" quantize --dequantize "$tmp/q.safetensors"
expect_rc "--dequantize with --format exits 2" 2 "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/x.npy" --format mxfp4
expect_rc "--dtype i8 exits 2" 2 "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/x.npy" --dtype i8
expect_rc "--dtype without --dequantize exits 2" 2 "$cli" quantize "$tmp/w.npy" --format mxfp4 --dtype f16
check "usage errors go to stderr with the usage" bash -c "'$cli' quantize --frob 2>&1 >/dev/null | grep -q 'unknown option'"

finish
