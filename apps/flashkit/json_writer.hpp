// A small streaming JSON writer: enough for the bench's result files, with correct string
// escaping and no dependency. Commas and nesting are tracked so callers only name keys and values.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace flashkit::app {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Names the next value inside an object.
  JsonWriter& key(const std::string& name);

  void value(const std::string& text);
  void value(const char* text) { value(std::string(text)); }
  void value(double number);  // NaN and infinities become null (JSON has no such numbers)
  void value(std::int64_t number);
  void value(bool flag);
  void null();
  // A number, or null when absent.
  void value(const std::optional<double>& number);

 private:
  void separate();  // the comma and indentation before a new element
  void write_string(const std::string& text);

  std::ostream& out_;
  std::vector<bool> first_;  // per open container: nothing written into it yet
  bool after_key_ = false;
};

}  // namespace flashkit::app
