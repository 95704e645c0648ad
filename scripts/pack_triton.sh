#!/usr/bin/env bash
# Pack a Triton release small enough to travel to a GPU machine that cannot download anything
# (the wheel is ~190 MiB; this tarball ~47 MiB for 3.7.1). Kept: the compiler, the NVIDIA
# backend with ptxas, the dist-info. Dropped: the AMD backend, CUPTI, the Blackwell ptxas,
# proton, the plugin and instrumentation test libraries; libtriton.so loses its debug symbols.
# gpu_round.sh's `triton-new` section unpacks it ahead of the image's Triton.
# Usage: scripts/pack_triton.sh 3.7.1   (writes .tri/triton-3.7.1.tar.xz; needs pip, strip, xz)
set -euo pipefail
version=${1:?usage: scripts/pack_triton.sh VERSION}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$work" "triton==$version"
(cd "$work" && unzip -q triton-*.whl && rm triton-*.whl \
  && rm -rf triton/backends/amd triton/backends/nvidia/lib/cupti triton/backends/nvidia/bin/ptxas-blackwell \
       triton/_C/libproton.so triton/instrumentation triton/plugins triton/FileCheck \
  && strip --strip-unneeded triton/_C/libtriton.so \
  && sed -i '/^amd = /d' triton-*.dist-info/entry_points.txt)  # its backend is not packed
mkdir -p .tri
tar -C "$work" -cf - triton "triton-$version.dist-info" | xz -9e -T0 > ".tri/triton-$version.tar.xz"
ls -la ".tri/triton-$version.tar.xz"
