#!/usr/bin/env bash
# Installs what the build and the tests need, or says what to install.
#   scripts/deps.sh build   Debian packages for the C build
#   scripts/deps.sh python  the project venv (.venv) with numpy, ml_dtypes, pytest, safetensors
#   scripts/deps.sh fuzz    clang with libFuzzer for make fuzz
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
elif [ "$what" = python ]; then
  stamp=.venv/.tops-deps-$(cksum < scripts/requirements-test.txt | cut -d" " -f1)
  if [ ! -f "$stamp" ]; then
    py=$(command -v python3 || true)
    [ -n "$py" ] || { echo "deps: python3 is missing; install it (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
    if ! "$py" -m venv .venv 2>/dev/null; then
      if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$py" -m venv .venv
      else
        echo "deps: python3 cannot make a venv; install python3-venv" >&2; exit 1
      fi
    fi
    echo "deps: installing numpy, ml_dtypes, pytest into .venv" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
    touch "$stamp"
  fi
else
  echo "usage: scripts/deps.sh build|python|fuzz" >&2; exit 2
fi
