#!/usr/bin/env bash
# Installs the library into a scratch prefix, then builds examples/ against it
# twice: with pkg-config and with CMake's find_package(tensorops).
set -euo pipefail
src=$1; build=$2
prefix=$(mktemp -d); work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig:${PKG_CONFIG_PATH:-}"
libdir=$(pkg-config --variable=libdir tensorops)
cc -std=c11 -Wall -Wextra -Werror "$src/examples/hello_tensorops.c" $(pkg-config --cflags --libs tensorops) \
   -Wl,-rpath,"$libdir" -o "$work/hello_pc"
"$work/hello_pc" > "$work/out_pc.txt"
grep -q "tensorops" "$work/out_pc.txt"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/tile_softmax.c" $(pkg-config --cflags --libs tensorops) -lm \
   -Wl,-rpath,"$libdir" -o "$work/tile_softmax_pc"
"$work/tile_softmax_pc" > "$work/tiles_pc.txt"
grep -q "tile softmax matches tops_attention" "$work/tiles_pc.txt"
cmake -S "$src/examples" -B "$work/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cm" >/dev/null
"$work/cm/hello_tensorops" > "$work/out_cm.txt"
cmp "$work/out_pc.txt" "$work/out_cm.txt"
"$work/cm/tile_softmax" > "$work/tiles_cm.txt"
cmp "$work/tiles_pc.txt" "$work/tiles_cm.txt"
# Where CMake found nvcc: the device-tiles example, built against the
# installed tensorops_cuda_tiles.cuh (it prints "skip" without a Hopper GPU).
if [ -x "$work/cm/cuda_tile_softmax" ]; then "$work/cm/cuda_tile_softmax"; fi
echo "examples built with pkg-config and find_package: ok"
