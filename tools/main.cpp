// The specgraph command-line program.
#include <iostream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "tools/cli_text.hpp"
#include "tools/metadata_command.hpp"
#include "tools/plan_command.hpp"
#include "tools/run_command.hpp"

namespace {

constexpr const char* usage =
    "usage: specgraph <command> [options]\n"
    "\n"
    "commands:\n"
    "  run                 the end-to-end simulated EAGLE draft loop (run --help for flags)\n"
    "  plan                the static buffers of a configuration vs today's engine sizing\n"
    "  metadata expand     read an expand-page-table case as JSON on stdin, print the result\n"
    "  metadata fallback   read a sparse-fallback case as JSON on stdin, print the indices\n"
    "  metadata kv-indices read a CSR draft-decode case as JSON on stdin, print every step\n"
    "  metadata verify     read a draft-tree verify case as JSON on stdin, print both layouts\n"
    "  metadata accept     read a round after verify as JSON on stdin, print its bookkeeping\n"
    "  help                this text\n";

int dispatch(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << usage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "run") {
    return specgraph::tools::run_command(std::vector<std::string>(args.begin() + 1, args.end()),
                                         std::cout, std::cerr);
  }
  if (args[0] == "plan") {
    return specgraph::tools::plan_command(std::vector<std::string>(args.begin() + 1, args.end()),
                                          std::cout, std::cerr);
  }
  if (args[0] == "metadata") {
    return specgraph::tools::metadata_command(
        std::vector<std::string>(args.begin() + 1, args.end()), std::cin, std::cout, std::cerr);
  }
  std::string command;
  for (std::size_t i = 0; i < args.size(); ++i) command += (i ? " " : "") + args[i];
  std::cerr << "specgraph: error: unknown command " << specgraph::tools::echo(command)
            << " (run 'specgraph help')\n";
  return 2;
}

}  // namespace

// Every exception ends as one line and an exit status: 2 for bad input, 1 for anything else.
int main(int argc, char** argv) {
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const specgraph::invalid_argument& e) {
    std::cerr << "specgraph: error: " << specgraph::tools::one_line(e.what()) << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "specgraph: error: " << specgraph::tools::one_line(e.what()) << '\n';
    return 1;
  } catch (...) {
    std::cerr << "specgraph: error: unknown exception\n";
    return 1;
  }
}
