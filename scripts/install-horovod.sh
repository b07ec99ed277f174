#!/usr/bin/env bash
# Build Horovod 0.28.1 (the last release) for the torch that is installed, with gloo + PyTorch.
#
# Why not `pip install horovod`: pip's isolated build cannot see the installed torch ("Could NOT
# find Pytorch") and Horovod compiles with C++14 while torch >= 2.1 headers need C++17 (2.14: C++20).  So: fetch
# the sdist, switch both CMakeLists to C++17 (C++20 for torch 2.14), and build without isolation.
# ~3 min on 2 idle cores; much longer on a loaded machine.
# Horovod stays optional: distrain imports and works without it.
set -euo pipefail
VERSION="${HOROVOD_VERSION:-0.28.1}"
PY="${PYTHON:-python3}"
if "$PY" -c "import horovod.torch" 2>/dev/null; then
    echo "horovod already installed: $("$PY" -c 'import horovod; print(horovod.__version__)')"
    exit 0
fi
"$PY" -c "import torch" || { echo "install torch first" >&2; exit 1; }
command -v cmake >/dev/null || "$PY" -m pip install -q cmake
"$PY" -m pip install -q wheel
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps --no-binary :all: -d "$work" "horovod==$VERSION"
tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
src="$work/horovod-$VERSION"
# torch >= 2.1 headers need C++17; torch 2.14's need C++20 ("#error C++20 or later compatible
# compiler is required to use PyTorch"): use what the installed headers ask for.
torch_inc="$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')"
std=17
grep -rqs "C++20 or later" "$torch_inc/torch/csrc/api/include/torch/all.h" "$torch_inc/ATen/ATen.h" && std=20
echo "building Horovod $VERSION with C++$std for torch $("$PY" -c 'import torch; print(torch.__version__)')"
for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
    sed -i "s/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD $std)/" "$f"
    grep -q "CMAKE_CXX_STANDARD $std" "$f" || { echo "could not switch $f to C++$std" >&2; exit 1; }
done
# A CUDA build of torch makes Horovod's torch module require the CUDA toolkit (headers, cudart).
# Without a usable GPU build the CPU-only variant (gloo/MPI ops on CPU tensors), which is what a
# CPU machine can use anyway; HOROVOD_CPU_ONLY=0/1 forces the choice.
cpu_only="${HOROVOD_CPU_ONLY:-$("$PY" -c 'import torch; print(0 if torch.cuda.is_available() else 1)')}"
if [ "$cpu_only" = 1 ]; then
    # FindPytorch decides "CUDA torch" from torch.version.cuda + CUDA_HOME and then links cudart
    sed -i 's/print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)/print(False)/' \
        "$src/cmake/Modules/FindPytorch.cmake"
    grep -q 'CUDA_HOME; print(False)' "$src/cmake/Modules/FindPytorch.cmake" || { echo "could not patch FindPytorch.cmake" >&2; exit 1; }
    unset HOROVOD_GPU_OPERATIONS HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_BROADCAST
fi
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 \
    MAKEFLAGS="${MAKEFLAGS:--j2}" "$PY" -m pip install --no-build-isolation "$src"
"$PY" -c "import horovod.torch as hvd; print('horovod', __import__('horovod').__version__, 'gloo built:', hvd.gloo_built())"
