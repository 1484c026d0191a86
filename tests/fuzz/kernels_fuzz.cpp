// libFuzzer harness: the metadata kernels with arbitrary parameters. Scalars come from the bytes;
// every buffer is allocated by the harness exactly as large as the parameters describe, with
// poisoned canaries before and after it. Each input runs one kernel on one path:
//   kernel: expand page table, prefix metadata, sparse stage, sparse fallback (host only);
//   path:   launch_* on the host executor (eager), on a deferred host executor, recorded into a
//           graph and replayed, or the *_host entry point.
//
// Promises checked:
//   * a rejected call throws invalid_argument naming its field, and writes nothing: every output
//     buffer and every canary is unchanged;
//   * an accepted call never writes outside its buffers (canaries intact; ASan reports any access
//     to them at once), leaves its inputs unchanged, and leaves a consistent guard word: clean and
//     all zero, or a valid kind and the kernel's own id;
//   * no stored page id is negative;
//   * every output equals an independent reference written from docs/metadata.md (sections 2, 3
//     and 6): rows with an out-of-range input keep their previous contents, other rows hold the
//     reference's values, cells past a row's capacity are never written, and a violation is
//     recorded exactly when the reference has one (which one is recorded is not asserted);
//   * the *_host entry points accept no input the kernel would refuse as bad input.
//
// This file decodes which kernel and path an input drives; the drivers and their references are
// in kernels_fuzz_expand.cpp, kernels_fuzz_prefix.cpp and kernels_fuzz_sparse.cpp.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/kernels_fuzz.hpp"

namespace harness = specgraph::fuzz::kernels_harness;

// The select byte: kernel = select % 4, path = (select >> 2) % 4 (make_corpus.py writes seeds in
// this encoding; the corpus depends on it).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specgraph::fuzz::reader in(data, size);
  const std::uint8_t select = in.byte();
  const harness::path how = static_cast<harness::path>((select >> 2) % 4);
  switch (select % 4) {
    case 0: harness::fuzz_expand(in, how); break;
    case 1: harness::fuzz_prefix(in, how); break;
    case 2: harness::fuzz_sparse(in, how); break;
    default: harness::fuzz_fallback(in); break;
  }
  return 0;
}
