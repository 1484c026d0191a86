#include "tools/json.hpp"

#include "tools/cli_text.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace specgraph::tools {
namespace {

class parser {
 public:
  explicit parser(const std::string& s) : s_(s) {}

  json document() {
    json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw json_error("invalid JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) == 0) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  json value(int depth) {
    if (depth > 64) fail("nesting deeper than 64");
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    json v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.type = json::kind::object;
      if (consume('}')) return v;
      do {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
        std::string key = string_literal();
        expect(':');
        v.members[key] = value(depth + 1);
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.type = json::kind::array;
      if (consume(']')) return v;
      do {
        v.items.push_back(value(depth + 1));
      } while (consume(','));
      expect(']');
    } else if (c == '"') {
      v.type = json::kind::string;
      v.text = string_literal();
    } else if (literal("true")) {
      v.type = json::kind::boolean;
      v.boolean = true;
    } else if (literal("false")) {
      v.type = json::kind::boolean;
    } else if (literal("null")) {
      v.type = json::kind::null;
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v = number();
    } else {
      fail("unexpected character " + echo(std::string(1, c)));
    }
    return v;
  }

  std::string string_literal() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) fail("unterminated escape");
        const char e = s_[pos_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case '"':
          case '\\':
          case '/': c = e; break;
          default: fail("unsupported escape");
        }
      }
      out.push_back(c);
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  json number() {
    const std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool integral = true;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || (c == '-' && pos_ > start)) {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    const std::string lexeme = s_.substr(start, pos_ - start);
    json v;
    v.type = json::kind::number;
    char* end = nullptr;
    v.number = std::strtod(lexeme.c_str(), &end);
    if (end == lexeme.c_str() || *end != '\0') fail("malformed number " + echo(lexeme));
    v.integral = integral;
    if (integral) {
      errno = 0;
      v.integer = std::strtoll(lexeme.c_str(), &end, 10);
      if (errno == ERANGE) fail("integer out of range " + echo(lexeme));
    }
    return v;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

}  // namespace

json json::parse(const std::string& source) {
  return parser(source).document();
}

std::int64_t as_int(const json& v, const std::string& field) {
  if (v.type != json::kind::number || !v.integral) {
    throw json_error(field + ": expected an integer");
  }
  return v.integer;
}

const std::vector<json>& as_array(const json& v, const std::string& field) {
  if (v.type != json::kind::array) throw json_error(field + ": expected a list");
  return v.items;
}

const json* member(const json& object, const std::string& key) {
  const auto it = object.members.find(key);
  return it == object.members.end() ? nullptr : &it->second;
}

void expect_only_keys(const json& object, const std::vector<std::string>& allowed) {
  if (object.type != json::kind::object) throw json_error("input: expected a JSON object");
  for (const auto& [key, value] : object.members) {
    bool known = false;
    for (const auto& a : allowed) known = known || a == key;
    if (!known) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw json_error(echo(key) + ": unknown key (expected one of " + list + ")");
    }
  }
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace specgraph::tools
