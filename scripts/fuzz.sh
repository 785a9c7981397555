#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang and runs each in turn.
usage() {
  cat <<'EOF'
usage: scripts/fuzz.sh [--keep-going] [SECONDS] [HARNESS...]

Builds tests/fuzz/fuzz_*.c with clang, -fsanitize=fuzzer,address,undefined
(cmake -DDIFFRT_FUZZ=ON, GPU backends off) in $BUILD_DIR (default build-fuzz)
and runs each HARNESS (default: all of safetensors config index tokenizer
request chat) for SECONDS (default 600), one after the other, one process each.

Each run starts from the committed seeds (tests/fuzz/corpus/<h>) and the
inputs that once crashed (tests/fuzz/regress/<h>), with the harness's
dictionary (tests/fuzz/*.dict). New inputs go to $BUILD_DIR/corpus/<h>, kept
between runs; the committed directories are only read. A crash, leak,
timeout (> 30 s per input) or out-of-memory (> 2 GiB) stops that harness; its
input is kept in $BUILD_DIR/crashes/<h>/ and the log in $BUILD_DIR/logs/<h>.log.

  --keep-going   fork mode (-fork=1: still one process at a time): fuzzing
                 goes on after a crash, every crashing input is kept
  -h, --help     this text

Prints executions, exec/s, new inputs and crashes per harness; exits 1 if
any harness crashed. Installs clang and libclang-rt-14-dev with apt-get when
they are missing (Debian/Ubuntu; root or sudo). Environment: BUILD_DIR, JOBS
(build parallelism, default nproc), FUZZ_ARGS (extra libFuzzer flags).
To replay one input: $BUILD_DIR/tests/fuzz/fuzz_<h> FILE
EOF
}
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(safetensors config index tokenizer request chat)
SECONDS_PER=600
KEEP_GOING=0
harnesses=()
got_seconds=0
for a in "$@"; do
  case "$a" in
    -h|--help) usage; exit 0 ;;
    --keep-going) KEEP_GOING=1 ;;
    -*) echo "fuzz.sh: unknown option $a" >&2; usage >&2; exit 2 ;;
    *)
      if [[ "$a" =~ ^[0-9]+$ ]] && [ $got_seconds = 0 ] && [ ${#harnesses[@]} -eq 0 ]; then
        SECONDS_PER=$a
        got_seconds=1
      elif [ -f "tests/fuzz/fuzz_${a#fuzz_}.c" ]; then
        harnesses+=("${a#fuzz_}")
      else
        echo "fuzz.sh: no harness '$a' (have: ${ALL[*]})" >&2; exit 2
      fi ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${ALL[@]}")
[ "$SECONDS_PER" -gt 0 ] || { echo "fuzz.sh: SECONDS must be > 0" >&2; exit 2; }
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}

# ---- tools: clang with its libFuzzer runtime, and the project's build deps
if command -v dpkg-query >/dev/null; then
  PKGS=(cmake clang libclang-rt-14-dev libcjson-dev libpcre2-dev)
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "fuzz.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi
CC_FUZZ=${CC_FUZZ:-$(command -v clang || command -v clang-14 || true)}
[ -n "$CC_FUZZ" ] || { echo "fuzz.sh: clang not found" >&2; exit 1; }

# ---- build
cmake -B "$BUILD_DIR" -DCMAKE_C_COMPILER="$CC_FUZZ" -DDIFFRT_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIFFRT_OPENCL=OFF -DDIFFRT_VULKAN=OFF -DDIFFRT_CUDA=OFF >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=(--target "fuzz_$h"); done
cmake --build "$BUILD_DIR" -j"$JOBS" "${targets[@]}"

# ---- run
# tmpfs scratch for the harnesses' files (they write one per input)
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  TMP_ROOT=$(mktemp -d /dev/shm/diffrt-fuzz.XXXXXX)
else
  TMP_ROOT=$(mktemp -d)
fi
trap 'rm -rf "$TMP_ROOT"' EXIT
trap 'exit 130' INT TERM
export DRT_FUZZ_TMPDIR=$TMP_ROOT
# a UBSan report names its call stack (the build already stops on the first)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

summary=()
failed=0
for h in "${harnesses[@]}"; do
  dict=tests/fuzz/json.dict
  [ "$h" = safetensors ] && dict=tests/fuzz/safetensors.dict
  work=$BUILD_DIR/corpus/$h
  crashes=$BUILD_DIR/crashes/$h
  log=$BUILD_DIR/logs/$h.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  seeds=(tests/fuzz/corpus/"$h")
  [ -d tests/fuzz/regress/"$h" ] && seeds+=(tests/fuzz/regress/"$h")
  before=$(find "$crashes" -type f | wc -l)
  mode=()
  [ "$KEEP_GOING" = 1 ] && mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  echo "== fuzz_$h: ${SECONDS_PER} s (log: $log)"
  rc=0
  # shellcheck disable=SC2086
  "$BUILD_DIR/tests/fuzz/fuzz_$h" -max_total_time="$SECONDS_PER" -timeout=30 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$crashes/" -print_final_stats=1 "${mode[@]}" ${FUZZ_ARGS:-} \
    "$work" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  if [ -z "$execs" ]; then # fork mode prints no final stats: take the last status line
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
    [ -n "$execs" ] && rate=$((execs / SECONDS_PER))
  fi
  added=$(grep -o 'stat::new_units_added: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  after=$(find "$crashes" -type f | wc -l)
  new_crashes=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$new_crashes" -eq 0 ]; then new_crashes=1; fi
  line=$(printf "%-12s execs %10s  exec/s %7s  new inputs %5s  corpus %5s  crashes %s" "$h" \
    "${execs:-?}" "${rate:-?}" "${added:-?}" "$(find "$work" -type f | wc -l)" "$new_crashes")
  summary+=("$line")
  echo "$line"
  if [ "$new_crashes" -gt 0 ]; then
    failed=1
    echo "-- fuzz_$h failed (exit $rc); the report:"
    { grep -E '^(==[0-9]+==|SUMMARY|    #[0-9]+ |fuzz: |.*runtime error|.*Test unit written|.*ERROR)' "$log" || tail -40 "$log"; } | head -60
    echo "-- inputs kept in $crashes:"
    find "$crashes" -type f | sort | sed 's/^/   /'
  fi
done
echo "== fuzz summary (${SECONDS_PER} s each)"
printf '%s\n' "${summary[@]}"
exit $failed
