#!/usr/bin/env bash
# Installs what the build and the tests need, or says what to install.
#   scripts/deps.sh build   Debian packages for the C build
#   scripts/deps.sh python  the project venv (.venv) with the exact versions of
#                           scripts/requirements-test.txt (remade when that file changes)
#   scripts/deps.sh package [DIR]  the Python package (pyproject.toml) built and installed
#                           into .venv, its CMake build kept in DIR (build/python-package)
#   scripts/deps.sh bump    rewrites those pins with the newest releases (a scratch venv
#                           and pip freeze); review the diff and run make test
#   scripts/deps.sh fuzz    clang with libFuzzer for make fuzz
#   scripts/deps.sh onednn  oneDNN for the bench's baseline rows (x86-64): the pinned PyPI
#                           wheels' headers and libdnnl.so.3 in .deps/onednn/
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-build}

need_pkgs=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkgconfig() { pkg-config --exists "$1" 2>/dev/null; }

if [ "$what" = build ]; then
  have_cmd cmake || need_pkgs+=(cmake)
  have_cmd cc || need_pkgs+=(gcc)
  have_cmd pkg-config || need_pkgs+=(pkg-config)
  have_pkgconfig libcjson || need_pkgs+=(libcjson-dev)
  have_pkgconfig openblas || need_pkgs+=(libopenblas-dev)
  [ -e /usr/lib/gcc/x86_64-linux-gnu/12/include/omp.h ] || ls /usr/lib/gcc/*/*/include/omp.h >/dev/null 2>&1 || need_pkgs+=(libgomp1)
  if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
      echo "deps: installing ${need_pkgs[*]}" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >/dev/null
      apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
    else
      echo "deps: missing ${need_pkgs[*]}; install them (Debian: sudo apt-get install ${need_pkgs[*]})" >&2
      exit 1
    fi
  fi
elif [ "$what" = fuzz ]; then
  # clang with libFuzzer and the sanitizer runtimes: probe by linking a tiny target.
  probe=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}\n' > "$probe/p.c"
  if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
      echo "deps: installing clang and libclang-rt-dev (libFuzzer)" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >/dev/null
      apt-get install -y -qq clang libclang-rt-dev >/dev/null
    else
      rm -rf "$probe"
      echo "deps: clang with libFuzzer is missing; install it (Debian: apt-get install clang libclang-rt-dev)" >&2
      exit 1
    fi
  fi
  rm -rf "$probe"
elif [ "$what" = python ] || [ "$what" = bump ]; then
  req=scripts/requirements-test.txt
  py=$(command -v python3 || true)
  [ -n "$py" ] || { echo "deps: python3 is missing; install it (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
  make_venv() { # make_venv DIR
    if ! "$py" -m venv "$1" 2>/dev/null; then
      if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$1"
        "$py" -m venv "$1"
      else
        echo "deps: python3 cannot make a venv; install python3-venv" >&2; exit 1
      fi
    fi
  }
  pins() { grep -v '^[[:space:]]*\(#\|$\)' "$req" | tr -d ' \r'; }
  lower() { tr '[:upper:]_' '[:lower:]-'; }
  if [ "$what" = bump ]; then
    direct=$(sed -n 's/^# direct: *//p' "$req")
    [ -n "$direct" ] || { echo "deps: $req has no '# direct:' line naming the packages the tests import" >&2; exit 1; }
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    make_venv "$scratch/venv"
    # shellcheck disable=SC2086
    "$scratch/venv/bin/python" -m pip install -q --disable-pip-version-check $direct
    { grep '^#' "$req"; "$scratch/venv/bin/python" -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel |
        LC_ALL=C sort -f; } > "$scratch/req"
    if cmp -s "$scratch/req" "$req"; then echo "deps: $req is already the newest"; exit 0; fi
    diff -u "$req" "$scratch/req" || true
    cp "$scratch/req" "$req"
    echo "deps: $req rewritten; run make test (the venv is remade) and review the diff: an oracle may have changed" >&2
    exit 0
  fi
  stamp=.venv/.tops-deps-$(cksum < "$req" | cut -d" " -f1)
  if [ ! -f "$stamp" ]; then
    bad=$(pins | grep -v '^[A-Za-z0-9._-]*==[A-Za-z0-9.+!-]*$' || true)
    [ -z "$bad" ] || { echo "deps: $req: every line must be NAME==VERSION; not: $bad" >&2; exit 1; }
    rm -rf .venv # remade from nothing, so that nothing unpinned stays behind
    make_venv .venv
    echo "deps: installing the pinned test packages into .venv" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
    # Every installed package must be pinned: a new transitive dependency is named here.
    extra=$(comm -13 <(pins | lower | LC_ALL=C sort) \
      <(.venv/bin/python -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel | lower | LC_ALL=C sort))
    if [ -n "$extra" ]; then
      echo "deps: .venv holds packages $req does not pin: $(echo $extra); add them (or make bump-test-deps)" >&2
      exit 1
    fi
    touch "$stamp"
  fi
  echo "python tests: $(pins | tr '\n' ' ')(scripts/requirements-test.txt)"
elif [ "$what" = onednn ]; then
  # oneDNN 3.2.0, the newest CPU-only OpenMP (GOMP) build on PyPI.  The `onednn` wheels
  # of 2024-2026 are DPC++ builds: their CPU engine runs on SYCL and TBB and needs the
  # oneAPI compiler and OpenCL runtimes (hundreds of MB); docs/bench.md says more.
  # A new pin changes the version, both hashes and so the stamp.
  ver=2023.2.0
  sha_lib=2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb
  sha_dev=9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284
  dest=.deps/onednn
  stamp=$dest/.stamp-cpu-gomp-$ver
  case "$(uname -m)" in
    x86_64|amd64) ;;
    *) echo "deps: oneDNN skipped: its PyPI wheels are for x86-64 only" >&2; exit 0 ;;
  esac
  if [ ! -f "$stamp" ]; then
    if python3 -m pip --version >/dev/null 2>&1; then py=python3
    else "$0" python; py=.venv/bin/python; fi
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    printf 'onednn-cpu-gomp==%s --hash=sha256:%s\nonednn-devel-cpu-gomp==%s --hash=sha256:%s\n' \
      "$ver" "$sha_lib" "$ver" "$sha_dev" > "$tmp/req.txt"
    echo "deps: downloading oneDNN (onednn-cpu-gomp $ver, 39 MB) into $dest" >&2
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --require-hashes -r "$tmp/req.txt" -d "$tmp/whl"
    rm -rf "$dest"
    # the headers, and one copy of the library (the wheel holds three)
    "$py" - "$tmp/whl" "$dest" <<'EOF'
import glob, os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
for w in glob.glob(os.path.join(whl, "*.whl")):
    with zipfile.ZipFile(w) as z:
        for name in z.namelist():
            parts = name.split("/")
            if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data":
                continue
            rel = parts[2:]
            if rel[0] == "include" and name.endswith((".h", ".hpp")):
                out = os.path.join(dest, *rel)
            elif rel[0] == "lib" and rel[-1].startswith("libdnnl.so.3."):
                out = os.path.join(dest, "lib", "libdnnl.so.3")
            elif rel[0] == "share" and rel[-1] in ("LICENSE", "THIRD-PARTY-PROGRAMS"):
                out = os.path.join(dest, "share", rel[-1])
            else:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                dst.write(src.read())
lib = os.path.join(dest, "lib", "libdnnl.so.3")
if not os.path.exists(lib) or not os.path.exists(os.path.join(dest, "include", "oneapi", "dnnl", "dnnl.h")):
    sys.exit("deps: the oneDNN wheels lack lib/libdnnl.so.3 or include/oneapi/dnnl/dnnl.h")
os.chmod(lib, 0o755)
os.symlink("libdnnl.so.3", os.path.join(dest, "lib", "libdnnl.so"))
EOF
    touch "$stamp"
  fi
elif [ "$what" = package ]; then
  # The package's tests import the installed copy, so make test reinstalls it each run
  # (the CMake build in DIR is incremental).  --no-build-isolation: the backend comes
  # from .venv's pins, and nothing is downloaded.  The CUDA backend only where a GPU can
  # run its tests (the C build compiles the CUDA sources already; this halves the build).
  "$0" python >/dev/null
  dir=${2:-build/python-package}
  cuda=OFF
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then cuda=AUTO; fi
  echo "deps: installing the Python package into .venv (CMake build in $dir, TOPS_CUDA=$cuda)" >&2
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
    --config-settings=build-dir="$dir" --config-settings=cmake.define.TOPS_WERROR=ON \
    --config-settings=cmake.define.TOPS_CUDA=$cuda .
else
  echo "usage: scripts/deps.sh build|python|package|bump|fuzz|onednn" >&2; exit 2
fi
