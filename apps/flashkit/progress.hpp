// Progress of long runs on stderr ("N=65536 flash 2/5..."), so a quiet minute is not mistaken for
// a hang. On a terminal each line overwrites the last and is erased before the table goes on;
// elsewhere (logs, CI) they are plain lines.
#pragma once

#include <string>

namespace flashkit::app {

class Progress {
 public:
  Progress();
  void show(const std::string& line);
  // Erases the last line on a terminal; call before writing to stdout.
  void clear();

 private:
  bool terminal_;
  bool shown_ = false;
};

}  // namespace flashkit::app
