# shellcheck shell=bash
# Shared by jetson/setup.sh (the board's training install) and jetson/deploy.sh (the robot's
# torch-free deploy image): sourced, not run. Each function takes the venv's folder.

# The robot's wire (orin-rl run --plant unitree-g1): the CycloneDDS Python binding.
# - A wheel where PyPI has one (x86-64).
# - Else (aarch64: no cyclonedds wheel of any version) built from source against a CycloneDDS
#   C library of the same release: CYCLONEDDS_HOME names one already installed (Debian's
#   cyclonedds-dev: CYCLONEDDS_HOME=/usr CYCLONEDDS_VERSION=0.10.2; its lib is found in the
#   multiarch folder by the compiler's default search), otherwise the C library at
#   CYCLONEDDS_VERSION (default 11.0.1) is cloned from GitHub and built into $venv/cyclonedds,
#   as Unitree's SDK README does it (needs git, cmake and a compiler).
# Returns non-zero with one line on stderr when the binding cannot be installed.
install_cyclonedds() {
  local venv="$1"
  local version="${CYCLONEDDS_VERSION:-11.0.1}"
  if "$venv/bin/python" -c 'import cyclonedds' 2>/dev/null; then
    return 0
  fi
  if [[ -z "${CYCLONEDDS_HOME:-}" ]] \
    && "$venv/bin/python" -m pip install --only-binary cyclonedds "cyclonedds==$version" 2>/dev/null; then
    echo "cyclonedds $version from its wheel (the robot wire)"
    return 0
  fi
  local home="${CYCLONEDDS_HOME:-$venv/cyclonedds}"
  if [[ -z "${CYCLONEDDS_HOME:-}" ]]; then
    local src
    src="$(mktemp -d)"
    if ! { git clone --quiet --depth 1 --branch "$version" \
        https://github.com/eclipse-cyclonedds/cyclonedds "$src" \
      && cmake -S "$src" -B "$src/build" -DCMAKE_INSTALL_PREFIX="$home" \
        -DBUILD_EXAMPLES=OFF -DBUILD_TESTING=OFF -DBUILD_IDLC_TESTING=OFF \
      && cmake --build "$src/build" --target install --parallel "$(nproc)"; }; then
      rm -rf "$src"
      echo "cyclonedds: the C library $version did not build (needs git, cmake and a compiler: sudo apt install git cmake build-essential; or CYCLONEDDS_HOME=/usr with the distribution's cyclonedds-dev); the robot wire is unavailable, the rest works" >&2
      return 1
    fi
    rm -rf "$src"
  fi
  if [[ ! -e "$home/lib/libddsc.so" && ! -e "$home/lib64/libddsc.so" ]]; then
    # A distribution's layout (Debian/Ubuntu: /usr/lib/<multiarch>/libddsc.so): the binding's
    # build looks in $home/lib only, so it gets a prefix of links to the library's parts.
    local lib
    lib="$(find "$home/lib" -maxdepth 2 -name libddsc.so -print -quit 2>/dev/null || true)"
    if [[ -n "$lib" ]]; then
      local prefix="$venv/cyclonedds-prefix"
      mkdir -p "$prefix"
      ln -sfn "$home/include" "$prefix/include"
      ln -sfn "$home/bin" "$prefix/bin"
      ln -sfn "$(dirname "$lib")" "$prefix/lib"
      home="$prefix"
    fi
  fi
  if CYCLONEDDS_HOME="$home" "$venv/bin/python" -m pip install --no-binary cyclonedds \
    "cyclonedds==$version"; then
    echo "cyclonedds $version built against $home (the robot wire)"
    return 0
  fi
  echo "cyclonedds: the Python binding $version did not build against $home (its C library must be the same release; needs python3-dev and a compiler)" >&2
  return 1
}

# PyPI's onnxruntime on aarch64 is CPU-only: NVIDIA's Jetson build (CUDA and TensorRT execution
# providers) from the Jetson AI Lab index in its place. PyPI has no aarch64 onnxruntime-gpu, so
# the name resolves to the Jetson wheel on that index; if it fails, PyPI's CPU build stays.
install_ort_gpu() {
  local venv="$1" index="$2"
  "$venv/bin/python" -m pip uninstall -y onnxruntime
  if ! "$venv/bin/python" -m pip install --index-url "$index" onnxruntime-gpu; then
    echo "onnxruntime-gpu not installed from $index; ONNX Runtime stays CPU-only: set JETSON_INDEX=..." >&2
    "$venv/bin/python" -m pip install "onnxruntime>=1.18"
  fi
}
