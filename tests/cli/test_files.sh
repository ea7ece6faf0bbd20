#!/usr/bin/env bash
# Files in and out of the CLI: an output is replaced only once written whole
# (a write cut short by `ulimit -f` leaves the old file byte-identical and no
# temporary); -o naming an input (same path, ./ path, hard or symbolic link)
# and an output name whose extension is not what is written are usage errors
# (exit 2) before anything is written; a FIFO, socket, device or directory
# given as an input or output is refused at once (exit 1), never waited on.
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/tops_test_files.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# make_npy ROWS COLS SEED > file: an f32 [ROWS, COLS] .npy of small values.
make_npy() {
  perl -e '
    my ($rows, $cols, $seed) = @ARGV; srand($seed);
    my $h = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: ($rows, $cols), }";
    my $total = 10 + length($h) + 1; $h .= " " x ((64 - $total % 64) % 64) . "\n";
    binmode STDOUT; print "\x93NUMPY\x01\x00" . pack("v", length($h)) . $h;
    print pack("f<", rand() - 0.5) for 1 .. $rows * $cols;
  ' "$@"
}
# said NAME TEXT: the last expect_rc's output contains TEXT.
said() { cp "$_tops_cli_log" "$tmp/said.log"; check "$1" grep -qF -- "$2" "$tmp/said.log"; }
# no_temporaries: nothing named like a temporary output is left in $tmp.
no_temporaries() { [ -z "$(find "$tmp" -name '*.tmp-*' -print -quit)" ]; }
# limited BLOCKS CMD...: CMD under a file-size limit of BLOCKS KiB, SIGXFSZ ignored.
limited() { local blocks=$1; shift; (ulimit -f "$blocks"; trap '' XFSZ; exec "$@"); }
# elapsed_ms CMD...: runs CMD (output to the log), prints its wall time in ms.
elapsed_ms() {
  local t0 t1; t0=$(date +%s%N); "$@" >"$tmp/last.log" 2>&1; echo $? >"$tmp/last.rc"; t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

make_npy 48 200 1 > "$tmp/w.npy"
make_npy 64 64 2 > "$tmp/a.npy"
make_npy 64 64 3 > "$tmp/b.npy"

# --- a write cut short leaves the old file as it was -------------------------------
"$cli" quantize "$tmp/w.npy" --format q4_0 -o "$tmp/q.safetensors" >/dev/null   # 5.5 KB
cp "$tmp/q.safetensors" "$tmp/q.orig"
# f16 planes are 19 KB: past an 8 KiB limit the write fails half-way
expect_rc "quantize -o past ulimit -f exits 1" 1 limited 8 "$cli" quantize "$tmp/w.npy" --format f16 -o "$tmp/q.safetensors"
said "... and says why" "File too large; a file already there is unchanged"
check "... the old file is byte-identical" cmp "$tmp/q.safetensors" "$tmp/q.orig"
check "... no temporary is left" no_temporaries
# the CLI ignores SIGXFSZ itself: a plain `ulimit -f` is an error, not a kill
expect_rc "SIGXFSZ left at its default: still exit 1" 1 bash -c "ulimit -f 8; exec '$cli' quantize '$tmp/w.npy' --format f16 -o '$tmp/q.safetensors'"
check "... the old file is byte-identical" cmp "$tmp/q.safetensors" "$tmp/q.orig"
check "... no temporary is left" no_temporaries
check "without a limit the same command replaces it" bash -c \
  "'$cli' quantize '$tmp/w.npy' --format f16 -o '$tmp/q.safetensors' >/dev/null && ! cmp -s '$tmp/q.safetensors' '$tmp/q.orig'"

"$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/c.npy" --dest f16 >/dev/null   # 8 KB
cp "$tmp/c.npy" "$tmp/c.orig"
expect_rc "matmul -o past ulimit -f exits 1" 1 limited 12 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/c.npy"
check "... the old file is byte-identical" cmp "$tmp/c.npy" "$tmp/c.orig"
expect_rc "--dequantize -o past ulimit -f exits 1" 1 limited 12 "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/c.npy"
check "... the old file is byte-identical" cmp "$tmp/c.npy" "$tmp/c.orig"
check "... no temporary is left" no_temporaries
expect_rc "a new name past ulimit -f exits 1" 1 limited 12 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/new.npy"
check "... and leaves nothing" bash -c "[ ! -e '$tmp/new.npy' ]"

# bench: the SVG (3 KB) runs past a 1 KiB limit, the JSON (0.6 KB) does not; no oneDNN rows
# (TOPS_ONEDNN_LIB naming no library), which would make the JSON 1.8 KB
mkdir "$tmp/bench"
echo old-json > "$tmp/bench/b.json"; echo old-svg > "$tmp/bench/b.svg"
expect_rc "bench --plot past ulimit -f exits 1" 1 limited 1 env TOPS_ONEDNN_LIB="$tmp/no-libdnnl.so" "$cli" bench --op matmul --format f32 --m 1 --k 67 --n 45 \
  --repeat 1 --no-progress --json "$tmp/bench/b.json" --plot "$tmp/bench/b.svg"
check "... the old SVG is untouched" bash -c "[ \"\$(cat '$tmp/bench/b.svg')\" = old-svg ]"
check "... the JSON was written whole" python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/bench/b.json"
check "... no temporary is left" no_temporaries

# --- outputs: modes and links ------------------------------------------------------
check "a replaced file keeps its mode" bash -c \
  "chmod 640 '$tmp/c.npy' && '$cli' matmul '$tmp/a.npy' '$tmp/b.npy' -o '$tmp/c.npy' >/dev/null && [ \$(stat -c %a '$tmp/c.npy') = 640 ]"
check "a new file is 0666 less the umask" bash -c \
  "umask 027 && '$cli' matmul '$tmp/a.npy' '$tmp/b.npy' -o '$tmp/m.npy' >/dev/null && [ \$(stat -c %a '$tmp/m.npy') = 640 ]"
ln -s c.npy "$tmp/to_c.npy"
check "-o through a symbolic link replaces the file it names; the link stays" bash -c \
  "'$cli' matmul '$tmp/a.npy' '$tmp/a.npy' -o '$tmp/to_c.npy' >/dev/null && [ -L '$tmp/to_c.npy' ] && ! cmp -s '$tmp/c.npy' '$tmp/c.orig'"
ln -s /dev/null "$tmp/null.npy"
expect_rc "-o a link to /dev/null exits 1" 1 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/null.npy"
said "... says it is a device" "is a character device; outputs are written only to regular files"
check "... /dev/null is still a device, the link still a link" bash -c "[ -c /dev/null ] && [ -L '$tmp/null.npy' ]"
mkfifo "$tmp/out_fifo.npy"
expect_rc "-o a FIFO exits 1 at once" 1 timeout 5 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/out_fifo.npy"
said "... says it is a FIFO" "is a FIFO"
mkdir "$tmp/dir.npy"
expect_rc "-o a directory exits 1" 1 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/dir.npy"
mkdir "$tmp/dir.json"
expect_rc "bench --json a directory exits 1 before timing" 1 timeout 5 "$cli" bench --json "$tmp/dir.json"
said "... says it is a directory" "is a directory; outputs are written only to regular files"
expect_rc "bench --json in a missing directory exits 1 before timing" 1 timeout 5 "$cli" bench --json "$tmp/no/such.json"

# --- -o naming an input: exit 2, nothing written ------------------------------------
cp "$tmp/a.npy" "$tmp/a.orig"
expect_rc "matmul -o LEFT exits 2" 2 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/a.npy"
said "... says so" "is the same file as the input"
expect_rc "matmul -o ./LEFT exits 2" 2 bash -c "cd '$tmp' && exec '$cli' matmul a.npy b.npy -o ./a.npy"
expect_rc "matmul -o RIGHT through another path exits 2" 2 "$cli" matmul "$tmp/b.npy" "$tmp/a.npy" -o "$tmp/../$(basename "$tmp")/a.npy"
ln "$tmp/a.npy" "$tmp/hard.npy"
expect_rc "matmul -o a hard link of LEFT exits 2" 2 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/hard.npy"
ln -s a.npy "$tmp/soft.npy"
expect_rc "matmul -o a symbolic link to RIGHT exits 2" 2 "$cli" matmul "$tmp/b.npy" "$tmp/a.npy" -o "$tmp/soft.npy"
check "... the input is untouched" cmp "$tmp/a.npy" "$tmp/a.orig"
ln "$tmp/w.npy" "$tmp/w.safetensors"
expect_rc "quantize -o a hard link of IN exits 2" 2 "$cli" quantize "$tmp/w.npy" --format q4_0 -o "$tmp/w.safetensors"
check "... the input is untouched" bash -c "head -c 6 '$tmp/w.npy' | grep -q NUMPY"
ln "$tmp/q.safetensors" "$tmp/q.npy"
expect_rc "--dequantize -o a hard link of IN exits 2" 2 "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/q.npy"
check "... the input is untouched" cmp "$tmp/q.safetensors" "$tmp/q.npy"
check "no temporary is left" no_temporaries

# --- output names end in what is written --------------------------------------------
expect_rc "matmul -o x.safetensors exits 2" 2 "$cli" matmul "$tmp/a.npy" "$tmp/b.npy" -o "$tmp/x.safetensors"
said "... says the name must end in .npy" "must end in .npy"
expect_rc "quantize -o x.npy exits 2" 2 "$cli" quantize "$tmp/w.npy" --format q4_0 -o "$tmp/x.npy"
said "... says the name must end in .safetensors" "must end in .safetensors"
expect_rc "--dequantize -o x.safetensors exits 2" 2 "$cli" quantize --dequantize "$tmp/q.safetensors" -o "$tmp/x.safetensors"
expect_rc "bench --json x.txt exits 2" 2 "$cli" bench --json "$tmp/x.txt"
expect_rc "bench --plot x.png exits 2" 2 "$cli" bench --plot "$tmp/x.png"
check "nothing was written" bash -c "[ ! -e '$tmp/x.safetensors' ] && [ ! -e '$tmp/x.npy' ] && [ ! -e '$tmp/x.txt' ] && [ ! -e '$tmp/x.png' ]"

# --- inputs: regular files only, refused within a second ------------------------------
mkfifo "$tmp/fifo.npy" "$tmp/fifo.safetensors"
ms=$(elapsed_ms timeout 5 "$cli" matmul "$tmp/fifo.npy" "$tmp/b.npy" -o "$tmp/f.npy")
check "matmul LEFT a FIFO exits 1 within a second ($ms ms)" bash -c "[ $(cat "$tmp/last.rc") = 1 ] && [ $ms -lt 1000 ]"
check "... says it is a FIFO" grep -q "is a FIFO, not a regular file" "$tmp/last.log"
ms=$(elapsed_ms timeout 5 "$cli" matmul "$tmp/a.npy" "$tmp/fifo.npy" -o "$tmp/f.npy")
check "matmul RIGHT a FIFO exits 1 within a second ($ms ms)" bash -c "[ $(cat "$tmp/last.rc") = 1 ] && [ $ms -lt 1000 ]"
ms=$(elapsed_ms timeout 5 "$cli" quantize "$tmp/fifo.npy" --format q4_0)
check "quantize IN a FIFO exits 1 within a second ($ms ms)" bash -c "[ $(cat "$tmp/last.rc") = 1 ] && [ $ms -lt 1000 ]"
ms=$(elapsed_ms timeout 5 "$cli" quantize --dequantize "$tmp/fifo.safetensors" -o "$tmp/f.npy")
check "--dequantize IN a FIFO exits 1 within a second ($ms ms)" bash -c "[ $(cat "$tmp/last.rc") = 1 ] && [ $ms -lt 1000 ]"
expect_rc "quantize /dev/null exits 1" 1 timeout 5 "$cli" quantize /dev/null --format q4_0
said "... says it is a device" "is a character device, not a regular file"
expect_rc "quantize /dev/zero exits 1 (never read)" 1 timeout 5 "$cli" quantize /dev/zero --format q4_0
expect_rc "matmul LEFT a directory exits 1" 1 timeout 5 "$cli" matmul "$tmp/dir.npy" "$tmp/b.npy" -o "$tmp/f.npy"
said "... says it is a directory" "is a directory, not a regular file"
if python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$tmp/sock.npy" 2>/dev/null; then
  expect_rc "quantize a socket exits 1" 1 timeout 5 "$cli" quantize "$tmp/sock.npy" --format q4_0
  said "... says it is a socket" "is a socket, not a regular file"
fi
check "nothing was written" bash -c "[ ! -e '$tmp/f.npy' ]"
check "no temporary is left" no_temporaries

finish
