// Text the command-line program echoes back: quoted and escaped, so an error message is always
// one printable line whatever bytes the user passed.
#pragma once

#include <string>

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

}  // namespace specgraph::tools
