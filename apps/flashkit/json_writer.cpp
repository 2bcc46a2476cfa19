#include "json_writer.hpp"

#include <cmath>
#include <cstdio>

namespace flashkit::app {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (first_.empty()) return;
  out_ << (first_.back() ? "\n" : ",\n") << std::string(2 * first_.size(), ' ');
  first_.back() = false;
}

void JsonWriter::begin_object() {
  separate();
  out_ << '{';
  first_.push_back(true);
}

void JsonWriter::end_object() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) out_ << '\n' << std::string(2 * first_.size(), ' ');
  out_ << '}';
  if (first_.empty()) out_ << '\n';
}

void JsonWriter::begin_array() {
  separate();
  out_ << '[';
  first_.push_back(true);
}

void JsonWriter::end_array() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) out_ << '\n' << std::string(2 * first_.size(), ' ');
  out_ << ']';
}

JsonWriter& JsonWriter::key(const std::string& name) {
  separate();
  write_string(name);
  out_ << ": ";
  after_key_ = true;
  return *this;
}

void JsonWriter::value(const std::string& text) {
  separate();
  write_string(text);
}

void JsonWriter::value(double number) {
  separate();
  if (!std::isfinite(number)) {
    out_ << "null";
    return;
  }
  // Whole numbers (byte counts) print exactly; measurements keep 6 significant digits.
  const bool whole = number == std::floor(number) && std::fabs(number) < 0x1p53;
  char text[32];
  std::snprintf(text, sizeof(text), whole ? "%.0f" : "%.6g", number);
  out_ << text;
}

void JsonWriter::value(std::int64_t number) {
  separate();
  out_ << number;
}

void JsonWriter::value(bool flag) {
  separate();
  out_ << (flag ? "true" : "false");
}

void JsonWriter::null() {
  separate();
  out_ << "null";
}

void JsonWriter::value(const std::optional<double>& number) {
  if (number) {
    value(*number);
  } else {
    null();
  }
}

void JsonWriter::write_string(const std::string& text) {
  out_ << '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out_ << "\\\"";
        break;
      case '\\':
        out_ << "\\\\";
        break;
      case '\n':
        out_ << "\\n";
        break;
      case '\r':
        out_ << "\\r";
        break;
      case '\t':
        out_ << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out_ << escaped;
        } else {
          out_ << c;  // UTF-8 passes through unchanged
        }
    }
  }
  out_ << '"';
}

}  // namespace flashkit::app
