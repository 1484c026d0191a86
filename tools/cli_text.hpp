// Text the command-line program echoes back: quoted and escaped, so an error message is always
// one printable line whatever bytes the user passed.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

namespace specgraph::tools {

// 'value' with control and non-ASCII bytes written as \xNN and quotes and backslashes escaped.
inline std::string echo(const std::string& value) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out + "'";
}

// One printable line: control and non-ASCII bytes written as \xNN.
inline std::string one_line(const std::string& message) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

// A one-line progress bar on stderr, shown only on a terminal.
class progress_bar {
 public:
  explicit progress_bar(std::string label)
      : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0) {}
  void operator()(int done, int total) const {
    if (!tty_ || total <= 0) return;
    const int width = 30;
    const int filled = static_cast<int>(static_cast<long long>(width) * done / total);
    std::fprintf(stderr, "\r%-10s [%s%s] %d/%d", label_.c_str(),
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
};

}  // namespace specgraph::tools
