#!/usr/bin/env bash
# Run this on a CPU machine right before every GPU run (it is idempotent: a second run downloads
# nothing and only rewrites .gpu-commit). It prepares what scripts/gpu-check.sh needs on a GPU
# machine that has CUDA, CMake, ninja and a compiler but neither GoogleTest nor Google Benchmark
# and no network:
#
#   .deps/debs/*.deb  the distribution's binary packages of GoogleTest (libgtest-dev, libgmock-dev,
#                     and googletest, the sources, for a rebuild if the prebuilt libraries do not
#                     link there) and of Google Benchmark (libbenchmark-dev plus the runtime library
#                     it depends on), fetched with `apt-get download` from THIS machine's configured
#                     package sources (nothing here names an archive). gpu-check.sh unpacks them with
#                     `dpkg-deb -x` into a prefix inside its build folder; the packages' CMake config
#                     files are relocatable (they locate themselves through _IMPORT_PREFIX).
#   .whl/             optional: the cp312 manylinux wheel of apache-tvm-ffi for the Python steps,
#                     and the pure-Python wheel of typing-extensions>=4.13 it requires (for an
#                     image whose own copy is older); gpu-check.sh installs them offline into its
#                     build folder. Only when pip can reach its configured index; never fails the
#                     bundle.
#   .gpu-commit       line 1: `git rev-parse HEAD`; line 2: `git describe --always --dirty`.
#                     The copy on the GPU machine may carry no git metadata.
#
# All three are git-ignored. Then, with this workplace's device tool:
#   run(command="bash scripts/gpu-check.sh $OUT", carry=[".deps", ".whl", ".gpu-commit"], timeout_s=540)
#
# Environment: SPECGRAPH_BUNDLE_WHEELS=0 skips the wheel download; SPECGRAPH_BUNDLE_REFRESH=1 asks
# apt for the packages again even when .deps/debs is complete (e.g. after a distribution upgrade).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "bundle-deps: $*"; }

# ---- .gpu-commit (always rewritten: it is cheap and must match the tree that travels) ----------
if git rev-parse --git-dir >/dev/null 2>&1; then
  { git rev-parse HEAD; git describe --always --dirty; } >.gpu-commit.tmp
  mv .gpu-commit.tmp .gpu-commit
  say ".gpu-commit: $(tr '\n' ' ' <.gpu-commit)"
else
  say "not a git checkout: .gpu-commit not written (set SPECGRAPH_COMMIT for gpu-check.sh instead)"
fi

# ---- .deps/test-ages: the newest test files first (the GPU check's sanitizers run in that order) -
# One "EPOCH NAME" line per tests/*_test.cpp: the time of the commit that added it, now for a file
# not committed yet. The copy on the GPU machine has no history to ask.
if git rev-parse --git-dir >/dev/null 2>&1; then
  mkdir -p .deps
  now=$(date +%s)
  for f in tests/*_test.cpp; do
    t=$(git log --diff-filter=A --format=%at -- "$f" 2>/dev/null | tail -1)
    echo "${t:-$now} $(basename "$f" .cpp)"
  done | sort -k1,1nr >.deps/test-ages.tmp
  mv .deps/test-ages.tmp .deps/test-ages
  say ".deps/test-ages: $(wc -l <.deps/test-ages) test files, newest $(head -1 .deps/test-ages | cut -d' ' -f2)"
fi

# ---- .deps/debs: binary packages from the configured package sources ---------------------------
# Up to date when every file of the last run's MANIFEST is still there and readable: then no apt
# call at all (SPECGRAPH_BUNDLE_REFRESH=1 asks apt again, e.g. after a distribution upgrade).
up_to_date=0
if [ -s .deps/debs/MANIFEST ] && [ "${SPECGRAPH_BUNDLE_REFRESH:-0}" = 0 ]; then
  up_to_date=1
  while read -r f; do
    dpkg-deb --info ".deps/debs/$f" >/dev/null 2>&1 || up_to_date=0
  done <.deps/debs/MANIFEST
fi

if [ $up_to_date = 1 ]; then
  say ".deps/debs is up to date ($(wc -l <.deps/debs/MANIFEST) packages; SPECGRAPH_BUNDLE_REFRESH=1 re-resolves)"
else
  # The GPU machine is x86-64: ask for amd64 packages whatever this machine is.
  apt_opts=(-o APT::Architecture=amd64 -o APT::Sandbox::User=root)
  candidates() {  # candidates PKG...: "PKG VERSION" per package apt can download
    apt-cache "${apt_opts[@]}" policy "$@" 2>/dev/null |
      awk '/^[^ ].*:$/ { p = substr($1, 1, length($1) - 1); sub(/:amd64$/, "", p) }
           /^  Candidate:/ && $2 != "(none)" { print p, $2 }'
  }
  wanted=(libgtest-dev libgmock-dev googletest libbenchmark-dev)
  # Package lists missing (a fresh container)? One `apt-get update` of the configured sources.
  if [ "$(candidates "${wanted[@]}" | wc -l)" -lt ${#wanted[@]} ]; then
    say "apt does not know the packages yet: apt-get update"
    apt-get "${apt_opts[@]}" update -qq
  fi
  # Google Benchmark's runtime library is named per release (libbenchmark1, libbenchmark1debian):
  # take it, and any other GoogleTest/Benchmark library, from the -dev packages' dependencies.
  while read -r dep; do
    case " ${wanted[*]} " in *" $dep "*) ;; *) wanted+=("$dep") ;; esac
  done < <(apt-cache "${apt_opts[@]}" depends "${wanted[@]}" 2>/dev/null |
    awk '$1 == "Depends:" { print $2 }' | grep -E '^(lib)?(gtest|gmock|googletest|benchmark)' || true)

  declare -A version
  while read -r p v; do version[$p]=$v; done < <(candidates "${wanted[@]}")
  declare -A debarch
  while read -r p a; do debarch[$p]=$a; done < <(apt-cache "${apt_opts[@]}" show --no-all-versions \
    "${wanted[@]}" 2>/dev/null | awk '/^Package:/ { p = $2 } /^Architecture:/ { print p, $2 }')

  mkdir -p .deps/debs
  # Leftovers of the older source-based bundle: no longer used, and they would travel.
  rm -rf .deps/googletest .deps/benchmark_*.orig.tar.gz .deps/prefix
  expected=()
  missing=()
  for p in "${wanted[@]}"; do
    v=${version[$p]:-}
    [ -n "$v" ] || { say "no candidate version for '$p' in the configured package sources"; exit 1; }
    # apt-get download's file name: NAME_VERSION_ARCH.deb, with an epoch's ':' written as %3a.
    f="${p}_${v//:/%3a}_${debarch[$p]:-amd64}.deb"
    expected+=("$f")
    dpkg-deb --info ".deps/debs/$f" >/dev/null 2>&1 || missing+=("$p=$v")
  done
  if ((${#missing[@]})); then
    say "downloading ${missing[*]}"
    (cd .deps/debs && apt-get "${apt_opts[@]}" download "${missing[@]}")
  fi
  # Drop other versions (an older bundle): two copies of one library would both unpack.
  for f in .deps/debs/*.deb; do
    case " ${expected[*]} " in *" $(basename "$f") "*) ;; *) say "removing stale $f"; rm -f "$f" ;; esac
  done
  for f in "${expected[@]}"; do
    dpkg-deb --info ".deps/debs/$f" >/dev/null 2>&1 || { say "not a readable package: .deps/debs/$f"; exit 1; }
  done
  printf '%s\n' "${expected[@]}" >.deps/debs/MANIFEST
  say ".deps/debs: ${expected[*]}"
fi

# ---- .whl: optional wheels for the python step --------------------------------------------------
if [ "${SPECGRAPH_BUNDLE_WHEELS:-1}" != 0 ]; then
  if ls .whl/apache_tvm_ffi-*.whl .whl/typing_extensions-*.whl >/dev/null 2>&1; then
    say ".whl already holds $(cd .whl && ls apache_tvm_ffi-*.whl typing_extensions-*.whl | tr '\n' ' ')"
  elif python3 -m pip --version >/dev/null 2>&1; then
    mkdir -p .whl
    # The same range as pyproject.toml's build and runtime requirement (one place: read from it).
    tvm_req=$(grep -oE '"apache-tvm-ffi[^"]*"' pyproject.toml | head -1 | tr -d '"' | tr -d ' ')
    tvm_req=${tvm_req:-apache-tvm-ffi>=0.1.15,<0.2}
    say "wheel: $tvm_req"
    if ! timeout 180 python3 -m pip download -q "$tvm_req" --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl; then
      say "pip could not fetch apache-tvm-ffi: .whl left without it (the python steps may fail)"
    fi
    # apache-tvm-ffi's one requirement (pure Python): installed only where the image's is older.
    if ! timeout 120 python3 -m pip download -q "typing-extensions>=4.13" --no-deps \
        --only-binary=:all: --python-version 3.12 -d .whl; then
      say "pip could not fetch typing-extensions: an image with an older one cannot install tvm_ffi"
    fi
    rmdir .whl 2>/dev/null || true
  else
    say "no pip here: no wheels bundled"
  fi
fi

du -sh .deps .whl 2>/dev/null || true
