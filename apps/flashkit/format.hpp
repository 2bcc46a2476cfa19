// Number formatting shared by the commands' reports.
#pragma once

#include <string>

namespace flashkit::app {

// "512.0 KiB", "4.5 MiB", "32.0 GiB": binary units, like the classic lesson's table.
std::string human_bytes(double bytes);
// printf-style formatting into a std::string.
[[gnu::format(printf, 1, 2)]] std::string format(const char* fmt, ...);

}  // namespace flashkit::app
