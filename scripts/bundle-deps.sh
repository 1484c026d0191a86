#!/usr/bin/env bash
# Run on a CPU machine before a GPU session: puts the sources of GoogleTest and Google Benchmark
# into .deps/ (git-ignored), so scripts/gpu-check.sh can build them on a GPU machine that has
# CUDA, CMake and ninja but neither library. Carry the folder: run(carry=[".deps"], ...).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .deps && mkdir -p .deps
cp -r /usr/src/googletest .deps/googletest

# Google Benchmark's source from Debian's own archive (the version the CPU build uses).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
cat > "$work/src.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work" -o "Dir::State::Lists=$work/lists")
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only benchmark >/dev/null 2>&1)
cp "$work"/benchmark_*.orig.tar.gz .deps/
du -sh .deps
