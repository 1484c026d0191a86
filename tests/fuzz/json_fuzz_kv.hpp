// json_fuzz's check of `metadata kv-indices` output (json_fuzz_kv.cpp).
#pragma once

#include <string>

#include "tools/json.hpp"

namespace specgraph::fuzz {

// For an input the command accepted (exit 0): aborts with PROMISE BROKEN unless the output
// equals docs/csr.md computed independently.
void check_kv_indices_output(const std::string& input, const std::string& output);

}  // namespace specgraph::fuzz
