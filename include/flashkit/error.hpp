// flashkit::Error: the one exception type of the library. Every invalid call throws it before any
// work starts, with a message that names the argument, what was expected and what was got.
#pragma once

#include <stdexcept>
#include <string>

namespace flashkit {

class Error : public std::runtime_error {
 public:
  // "q.shape[3]: expected a head dim in 1..512, got 600"
  Error(std::string argument, const std::string& expected, const std::string& got)
      : std::runtime_error(argument + ": expected " + expected + ", got " + got),
        argument_(std::move(argument)) {}

  // For failures that are not about one argument (a CUDA launch failing, say).
  explicit Error(const std::string& message) : std::runtime_error(message) {}

  // The argument the message is about ("" when it is not about one).
  const std::string& argument() const noexcept { return argument_; }

 private:
  std::string argument_;
};

}  // namespace flashkit
