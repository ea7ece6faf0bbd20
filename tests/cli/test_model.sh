#!/usr/bin/env bash
# Model files: tensorops inspect, FILE:tensor.name in matmul and quantize,
# the whole-checkpoint rewrite, and their errors (exit 1) and usage errors
# (exit 2).  The safetensors and GGUF files are made here with perl.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/tops_test_model.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# A safetensors file: "model.w" F32 [4, 64], "model.b" F32 [64], "ids" I64 [2].
perl -e '
  my $j = "{\"__metadata__\":{\"format\":\"pt\"},\"model.w\":{\"dtype\":\"F32\",\"shape\":[4,64],\"data_offsets\":[0,1024]},"
        . "\"model.b\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[1024,1280]},"
        . "\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[1280,1296]}}";
  $j .= " " x ((8 - length($j) % 8) % 8);
  binmode STDOUT; print pack("Q<", length($j)) . $j;
  srand(3); print pack("f<", rand() - 0.5) for 1..320; print pack("q<", 7) . pack("q<", 9);
' > "$tmp/m.safetensors"
# A GGUF v3 file: a string key, "w" F32 ne=[64, 4] (numpy [4, 64]) and "k" Q4_K ne=[256, 1].
perl -e '
  sub gs { pack("Q<", length($_[0])) . $_[0] }
  my $h = "GGUF" . pack("V Q< Q<", 3, 2, 1) . gs("general.name") . pack("V", 8) . gs("tiny");
  $h .= gs("w") . pack("V Q< Q< V Q<", 2, 64, 4, 0, 0);
  $h .= gs("k") . pack("V Q< Q< V Q<", 2, 256, 1, 12, 1024);
  $h .= "\0" x ((32 - length($h) % 32) % 32);
  binmode STDOUT; print $h; srand(4); print pack("f<", rand() - 0.5) for 1..256; print "\0" x 144;
' > "$tmp/m.gguf"
# x.npy: f32 [3, 64]
perl -e '
  my $h = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: (3, 64), }";
  my $total = 10 + length($h) + 1; $h .= " " x ((64 - $total % 64) % 64) . "\n";
  binmode STDOUT; print "\x93NUMPY\x01\x00" . pack("v", length($h)) . $h; srand(5); print pack("f<", rand() - 0.5) for 1..192;
' > "$tmp/x.npy"

check "inspect lists a safetensors file" bash -c "'$cli' inspect '$tmp/m.safetensors' | grep -q 'model.w *F32 *\[4, 64\] *f32'"
check "inspect names the dtype it cannot view" bash -c "'$cli' inspect '$tmp/m.safetensors' | grep -q 'ids.*I64.*which tensorops has no format'"
check "inspect lists a GGUF file in numpy order" bash -c "'$cli' inspect '$tmp/m.gguf' | grep -q 'w *F32 *\[4, 64\]'"
check "inspect names Q4_K" bash -c "'$cli' inspect '$tmp/m.gguf' | grep -q 'k *Q4_K.*another issue'"
check "inspect --json" bash -c "'$cli' inspect --json '$tmp/m.gguf' | grep -q '\"general.name\":{\"type\":\"STRING\",\"value\":\"tiny\"}'"
expect_rc "inspect a .npy is a clean failure" 1 "$cli" inspect "$tmp/x.npy"
expect_rc "inspect a directory" 1 "$cli" inspect "$tmp"
expect_rc "inspect without a file" 2 "$cli" inspect
expect_rc "inspect an unknown option" 2 "$cli" inspect --bogus "$tmp/m.gguf"

check "matmul RIGHT from safetensors by name" "$cli" matmul "$tmp/x.npy" "$tmp/m.safetensors:model.w" -o "$tmp/y.npy" --transpose-right
check "matmul RIGHT from GGUF by name" "$cli" matmul "$tmp/x.npy" "$tmp/m.gguf:w" -o "$tmp/y2.npy" --transpose-right
check "matmul RIGHT by name, quantized first" "$cli" matmul "$tmp/x.npy" "$tmp/m.gguf:w" -o "$tmp/y3.npy" --transpose-right --format q8_0
check "matmul LEFT by name" "$cli" matmul "$tmp/m.safetensors:model.w" "$tmp/m.safetensors:model.w" -o "$tmp/y4.npy" --transpose-right
expect_rc "matmul: a missing tensor" 1 "$cli" matmul "$tmp/x.npy" "$tmp/m.gguf:nope" -o "$tmp/y5.npy"
check "matmul: Q4_K is named" bash -c "'$cli' matmul '$tmp/x.npy' '$tmp/m.gguf:k' -o '$tmp/y5.npy' --transpose-right 2>&1 | grep -q 'GGUF type Q4_K'"
expect_rc "matmul: -o over an input file" 2 "$cli" matmul "$tmp/x.npy" "$tmp/m.gguf:w" -o "$tmp/m.gguf"
expect_rc "matmul: an empty tensor name" 2 "$cli" matmul "$tmp/x.npy" "$tmp/m.gguf:" -o "$tmp/y5.npy"

check "quantize FILE:tensor reports" bash -c "'$cli' quantize '$tmp/m.safetensors:model.w' --format int4-g32 | grep -q int4-g32"
check "quantize a checkpoint" "$cli" quantize "$tmp/m.safetensors" --format int4-g32 -o "$tmp/q.safetensors" --quiet
check "the checkpoint holds the quantized weight" bash -c "'$cli' inspect '$tmp/q.safetensors' | grep -q 'model.w *U8 *\[4, 64\] *int4-g32'"
check "and the copies" bash -c "'$cli' inspect '$tmp/q.safetensors' | grep -q 'model.b *F32 *\[64\]' && '$cli' inspect '$tmp/q.safetensors' | grep -q 'ids *I64'"
check "matmul on the rewritten checkpoint" "$cli" matmul "$tmp/x.npy" "$tmp/q.safetensors:model.w" -o "$tmp/y6.npy" --transpose-right
check "quantize a GGUF checkpoint holding a Q4_K fails, naming it" bash -c "'$cli' quantize '$tmp/m.gguf' --format q8_0 -o '$tmp/g.safetensors' --quiet 2>&1 | grep -q 'GGUF type Q4_K'"
expect_rc "quantize a checkpoint over itself" 2 "$cli" quantize "$tmp/m.safetensors" --format q8_0 -o "$tmp/m.safetensors"
ln -s "$tmp/m.safetensors" "$tmp/link.safetensors"
expect_rc "quantize a checkpoint over itself through a link" 2 "$cli" quantize "$tmp/m.safetensors" --format q8_0 -o "$tmp/link.safetensors"
expect_rc "a checkpoint needs -o" 2 "$cli" quantize "$tmp/m.safetensors" --format q8_0
expect_rc "a checkpoint takes one format" 2 "$cli" quantize "$tmp/m.safetensors" --format all -o "$tmp/z.safetensors"
check "a failed checkpoint leaves no file" test ! -e "$tmp/g.safetensors"
finish
