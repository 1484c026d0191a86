// json_fuzz's check of `metadata verify` output (json_fuzz_verify.cpp).
#pragma once

#include <string>

namespace specgraph::fuzz {

// For an input the command accepted (exit 0): aborts with PROMISE BROKEN unless the output
// equals docs/verify.md computed independently (tests/verify_reference.hpp).
void check_verify_output(const std::string& input, const std::string& output);

}  // namespace specgraph::fuzz
