#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace flashkit::app {

Progress::Progress() : terminal_(isatty(STDERR_FILENO) == 1) {}

void Progress::show(const std::string& line) {
  if (terminal_) {
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (terminal_ && shown_) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace flashkit::app
