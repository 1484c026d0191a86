// `specgraph metadata expand|fallback|kv-indices|verify|extend|accept`: one case as JSON on stdin,
// the result as JSON on stdout.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace specgraph::tools {

// Each returns the process exit code: 0 on success, 2 on invalid input (one line on `err`
// naming the field).
// `specgraph metadata [expand|fallback|kv-indices|verify|extend|accept] [--help]`: the usage
// (listing the commands, or a command's input fields) or the command itself on `in`; 2 for an
// unknown command or argument.
int metadata_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
                     std::ostream& err);
int metadata_expand(std::istream& in, std::ostream& out, std::ostream& err);
int metadata_fallback(std::istream& in, std::ostream& out, std::ostream& err);
// `metadata kv-indices`: the CSR draft-decode indices of every step (docs/csr.md).
int metadata_kv_indices(std::istream& in, std::ostream& out, std::ostream& err);
// `metadata verify`: the target-verify metadata of a draft tree (docs/verify.md).
int metadata_verify(std::istream& in, std::ostream& out, std::ostream& err);
// `metadata extend`: the draft-extend metadata of a round (docs/extend-cli.md).
int metadata_extend(std::istream& in, std::ostream& out, std::ostream& err);
// `metadata accept`: a round's acceptance, commit and next-round inputs (docs/round-cli.md).
int metadata_accept(std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace specgraph::tools
