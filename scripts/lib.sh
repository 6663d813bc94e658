# shellcheck shell=bash
# Shared set-up for scripts/test and scripts/demo (sourced, not run).
#
# fsdptune_setup: installs the Debian packages fsdptune builds against when any is
# missing (apt-get, as root or through sudo), and exports what Open MPI needs to run as
# root. fsdptune_build DIR [CMAKE ARGS...]: configures DIR (Release, warnings as errors,
# CUDA parts when the toolkit is found) and builds it. Both print nothing when all is in
# place and show the log only when a step fails.
#
# FSDPTUNE_JOBS overrides the build parallelism (default: nproc).

FSDPTUNE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FSDPTUNE_JOBS="${FSDPTUNE_JOBS:-$(nproc)}"
FSDPTUNE_PACKAGES=(cmake g++ clang-format libeigen3-dev libcli11-dev libfmt-dev
  nlohmann-json3-dev catch2 libbenchmark-dev libopenmpi-dev openmpi-bin libtoml11-dev)

# Open MPI refuses to run as root without these (containers, CI runners).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

fsdptune_setup() {
  local missing=()
  local package
  for package in "${FSDPTUNE_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "fsdptune: missing packages (${missing[*]}); run as root or install them" >&2
      return 1
    fi
  fi
  echo "fsdptune: installing ${missing[*]}" >&2
  local log
  log="$(mktemp)"
  if ! { "${sudo[@]}" apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
        "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "fsdptune: apt-get failed" >&2
    return 1
  fi
  rm -f "$log"
}

# Runs a command with its output in a log that is shown only when it fails.
fsdptune_quietly() {
  local log
  log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "fsdptune: failed: $*" >&2
    return 1
  fi
  rm -f "$log"
}

fsdptune_build() {
  local dir="$1"
  shift
  fsdptune_quietly cmake -S "$FSDPTUNE_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DFSDPTUNE_WERROR=ON -DFSDPTUNE_CUDA=AUTO "$@"
  fsdptune_quietly cmake --build "$dir" -j "$FSDPTUNE_JOBS"
}

# For the GPU scripts (gpu-check, gpu-loop, h200-profile).
# fsdptune_gpu_binary TARGET...: unless FSDPTUNE names a binary already, builds the targets
# in build-gpu/ with the CUDA parts for sm_90 (H100/H200) and sets FSDPTUNE to its
# fsdptune.
fsdptune_gpu_binary() {
  [[ -n "${FSDPTUNE:-}" ]] && return 0
  fsdptune_quietly cmake -S "$FSDPTUNE_ROOT" -B "$FSDPTUNE_ROOT/build-gpu" -DFSDPTUNE_CUDA=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
  fsdptune_quietly cmake --build "$FSDPTUNE_ROOT/build-gpu" -j "$FSDPTUNE_JOBS" --target "$@" ||
    return 1
  FSDPTUNE=$FSDPTUNE_ROOT/build-gpu/src/cli/fsdptune
}

# fsdptune_backend_binary BACKEND: FSDPTUNE for replays on BACKEND: the cuda backend's as
# fsdptune_gpu_binary builds it; the cpu backend's FSDPTUNE if set, else build/'s (what
# scripts/demo builds), which must be there (found by QA: BACKEND=cpu built the CUDA tree,
# or failed on an unset FSDPTUNE).
fsdptune_backend_binary() {
  if [[ $1 == cuda ]]; then
    fsdptune_gpu_binary fsdptune
    return
  fi
  FSDPTUNE=${FSDPTUNE:-$FSDPTUNE_ROOT/build/src/cli/fsdptune}
  if [[ ! -x $FSDPTUNE ]]; then
    echo "no fsdptune at $FSDPTUNE: build it (scripts/demo) or set FSDPTUNE" >&2
    return 1
  fi
}

# fsdptune_llama3_8b_2layers DIR: writes DIR/llama3-8b-2layers.json, Llama 3 8B with 2
# blocks (every per-layer shape of the 8B model in a step that fits one GPU), and prints
# its path.
fsdptune_llama3_8b_2layers() {
  local file="$1/llama3-8b-2layers.json"
  sed -e 's/"name": "llama3-8b"/"name": "llama3-8b-2layers"/' -e 's/"n_layers": 32/"n_layers": 2/' \
    "$FSDPTUNE_ROOT/models/llama3-8b.json" >"$file" &&
    grep -q '"n_layers": 2,' "$file" && echo "$file"
}

# fsdptune_validate_case OUT NAME RANKS BACKEND [VALIDATE FLAGS...] -- TUNE ARGS...: tunes
# TUNE ARGS for the h200 (40 evaluations) into OUT/NAME-schedule.json, replays it under
# mpirun on RANKS ranks with BACKEND and --check-data (10 steps after 3 warm-up), and
# writes compare's table and JSON next to it (OUT/NAME-measured.json, -compare.txt,
# -compare.json). Prints "== NAME: ok" or "== NAME: FAILED"; returns 1 on a failure.
# Uses $FSDPTUNE.
fsdptune_validate_case() {
  local out=$1 name=$2 ranks=$3 backend=$4
  shift 4
  local validate=()
  while (($#)) && [[ $1 != -- ]]; do
    validate+=("$1")
    shift
  done
  shift
  echo "== $name"
  local schedule="$out/$name-schedule.json" measured="$out/$name-measured.json"
  if "$FSDPTUNE" tune "$@" --hardware h200 --max-evaluations 40 --out "$schedule" &&
    mpirun --oversubscribe -np "$ranks" "$FSDPTUNE" validate "$schedule" --backend "$backend" \
      --iters 10 --warmup 3 --check-data --timeout 60 "${validate[@]}" --out "$measured" &&
    "$FSDPTUNE" compare "$schedule" "$measured" | tee "$out/$name-compare.txt" &&
    "$FSDPTUNE" compare "$schedule" "$measured" --json >"$out/$name-compare.json"; then
    echo "== $name: ok"
  else
    echo "== $name: FAILED"
    return 1
  fi
}
