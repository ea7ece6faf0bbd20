#!/usr/bin/env bash
# tensorops conv2d: usage errors (exit 2), file and descriptor errors
# (exit 1), and results checked in Python (stdlib only) against a float64
# direct convolution: padding, stride with dilation, groups, depthwise,
# "same", f16 input, a quantized weight through --format and through a
# .safetensors file; -o never replaces an input.
set -u
cli=$1
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/npy.py" <<'PY'
import ast, struct
def save(path, shape, vals, descr="<f4"):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d, " % d for d in shape))
    hdr = hdr + " " * (64 - (10 + len(hdr) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%d%s" % (len(vals), "f" if descr == "<f4" else "e"), *vals))
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    h = ast.literal_eval(b[10:10 + n].decode())
    count = 1
    for d in h["shape"]: count *= d
    code = {"<f4": "f", "<f2": "e"}[h["descr"]]
    return tuple(h["shape"]), list(struct.unpack("<%d%s" % (count, code), b[10 + n:10 + n + count * struct.calcsize(code)]))
PY
python3 - "$tmp" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[1]); from npy import save
random.seed(11)
d = sys.argv[1]
N, H, W, C = 2, 9, 7, 6
x = [random.gauss(0, 1) for _ in range(N * H * W * C)]
save(d + "/x.npy", (N, H, W, C), x)
save(d + "/x16.npy", (N, H, W, C), x, "<f2")
def weight(name, O, KH, KW, CG):
    save(d + "/" + name, (O, KH, KW, CG), [random.gauss(0, 1) for _ in range(O * KH * KW * CG)])
weight("w.npy", 5, 3, 3, 6)      # groups 1
weight("wg.npy", 4, 3, 2, 3)     # groups 2
weight("wd.npy", 6, 3, 3, 1)     # depthwise
weight("w1.npy", 7, 1, 1, 6)     # 1x1
weight("wq.npy", 8, 3, 3, 6)     # quantized (K = 54)
PY
cat >"$tmp/check.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); from npy import load
out, xp, wp = sys.argv[2], sys.argv[3], sys.argv[4]
sh, sw, pt, pb, pl, pr, dh, dw, g = map(int, sys.argv[5:14])
bound = float(sys.argv[14])
(xs, X), (ws, Wt), (os_, Y) = load(xp), load(wp), load(out)
N, H, W, C = xs; O, KH, KW, CG = ws
OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
assert os_ == (N, OH, OW, O), (os_, (N, OH, OW, O))
og = O // g
num = den = 0.0
for n in range(N):
    for y in range(OH):
        for xx in range(OW):
            for o in range(O):
                s = 0.0
                c0 = (o // og) * CG
                for i in range(KH):
                    for j in range(KW):
                        ih, iw = y * sh - pt + i * dh, xx * sw - pl + j * dw
                        if 0 <= ih < H and 0 <= iw < W:
                            for c in range(CG):
                                s += X[((n * H + ih) * W + iw) * C + c0 + c] * Wt[((o * KH + i) * KW + j) * CG + c]
                got = Y[((n * OH + y) * OW + xx) * O + o]
                num += (got - s) ** 2; den += s * s
err = (num / den) ** 0.5
assert err <= bound, err
PY
run() { # name, check args (sh sw pt pb pl pr dh dw g bound), then conv2d args
  local name=$1 out=$2 x=$3 w=$4; shift 4
  local chk="$1 $2 $3 $4 $5 $6 $7 $8 $9 ${10}"; shift 10
  check "$name" bash -c "'$cli' conv2d '$x' '$w' -o '$out' $* >/dev/null && python3 '$tmp/check.py' '$tmp' '$out' '$x' '$w' $chk"
}
check "conv2d --help" bash -c "'$cli' conv2d --help | grep -q -- '--dilation'"
check "listed in --help" bash -c "'$cli' --help | grep -q conv2d"
expect_rc "no files exits 2" 2 "$cli" conv2d
expect_rc "missing -o exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy"
expect_rc "unknown flag exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --frob
expect_rc "bad --stride exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --stride 0
expect_rc "bad --padding exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --padding 1,2,3
expect_rc "negative padding exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --padding -1
expect_rc "-o not .npy exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.txt"
cp "$tmp/x.npy" "$tmp/keep.npy"
expect_rc "-o naming the input exits 2" 2 "$cli" conv2d "$tmp/keep.npy" "$tmp/w.npy" -o "$tmp/keep.npy"
check "the input is untouched" cmp "$tmp/x.npy" "$tmp/keep.npy"
expect_rc "missing file exits 1" 1 "$cli" conv2d "$tmp/nope.npy" "$tmp/w.npy" -o "$tmp/y.npy"
expect_rc "groups not dividing C exits 1" 1 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --groups 4
check "the descriptor error is explained" bash -c "'$cli' conv2d '$tmp/x.npy' '$tmp/w.npy' -o '$tmp/y.npy' --groups 4 2>&1 | grep -q 'must divide'"
expect_rc "kernel larger than the padded input exits 1" 1 "$cli" conv2d "$tmp/x.npy" "$tmp/w.npy" -o "$tmp/y.npy" --dilation 4
check "a failed call leaves no output" test ! -e "$tmp/y.npy"

run "3x3 pad 1 matches f64" "$tmp/y1.npy" "$tmp/x.npy" "$tmp/w.npy" 1 1 1 1 1 1 1 1 1 1e-5 --padding 1
run "stride 2 dilation 2, uneven pads" "$tmp/y2.npy" "$tmp/x.npy" "$tmp/w.npy" 2 2 2 1 0 3 2 2 1 1e-5 --stride 2 --dilation 2 --padding 2,1,0,3
run "groups 2, stride 2,1" "$tmp/y3.npy" "$tmp/x.npy" "$tmp/wg.npy" 2 1 1 1 0 0 1 1 2 1e-5 --groups 2 --stride 2,1 --padding 1,0
run "depthwise, same" "$tmp/y4.npy" "$tmp/x.npy" "$tmp/wd.npy" 1 1 1 1 1 1 1 1 6 1e-5 --groups 6 --padding same
run "1x1" "$tmp/y5.npy" "$tmp/x.npy" "$tmp/w1.npy" 1 1 0 0 0 0 1 1 1 1e-5
run "f16 input" "$tmp/y6.npy" "$tmp/x16.npy" "$tmp/w.npy" 1 1 1 1 1 1 1 1 1 1e-3 --padding 1
run "--format int8-g32 near f64" "$tmp/y7.npy" "$tmp/x.npy" "$tmp/wq.npy" 1 1 1 1 1 1 1 1 1 2e-2 --padding 1 --format int8-g32
run "--relaxed int4-g32 near f64" "$tmp/y8.npy" "$tmp/x.npy" "$tmp/wq.npy" 1 1 1 1 1 1 1 1 1 2e-1 --padding 1 --format int4-g32 --relaxed
# the same weights quantized by `tensorops quantize` as [O, KH*KW*C]
python3 - "$tmp" <<'PY'
import sys
sys.path.insert(0, sys.argv[1]); from npy import load, save
s, v = load(sys.argv[1] + "/wq.npy")
save(sys.argv[1] + "/wq2.npy", (s[0], s[1] * s[2] * s[3]), v)
PY
if "$cli" quantize "$tmp/wq2.npy" --format int8-g32 -o "$tmp/wq.safetensors" >/dev/null 2>&1; then
  check "a .safetensors WEIGHT gives the same result" bash -c "'$cli' conv2d '$tmp/x.npy' '$tmp/wq.safetensors' --padding 1 -o '$tmp/y9.npy' >/dev/null && cmp '$tmp/y7.npy' '$tmp/y9.npy'"
  check "--kernel 3,3 gives the same result" bash -c "'$cli' conv2d '$tmp/x.npy' '$tmp/wq.safetensors' --kernel 3,3 --padding 1 -o '$tmp/y10.npy' >/dev/null && cmp '$tmp/y7.npy' '$tmp/y10.npy'"
  expect_rc "--format with a .safetensors exits 2" 2 "$cli" conv2d "$tmp/x.npy" "$tmp/wq.safetensors" --format f16 -o "$tmp/y11.npy"
else
  skip "safetensors WEIGHT" "tensorops quantize failed"
fi
finish
