// The `flashkit` command: usage, argument parsing and the exit-code contract
//   0 success, 1 error or failed check ("flashkit: error: ..."), 2 bad usage (usage on stderr).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_device.hpp"
#include "commands.hpp"

namespace {

using flashkit::Algo;
using flashkit::DType;
using flashkit::app::BenchOptions;
using flashkit::app::ServeSimOptions;

constexpr const char* kUsage = R"(usage: flashkit <command> [options]

commands:
  bench      time naive against flash attention over growing N (the attention lineage)
  check      self-test every algorithm, and MLA, FP8, ring and rotary, against slower paths
  info       version, build options, backends and devices
  serve-sim  simulate a decode server's paged KV cache with radix prefix reuse

bench options:
  --algo LIST    algorithms: naive, fa1 (CUDA only), fa2 (default naive,fa2)
  --n LIST       sequence lengths, e.g. 512,1024 (default 512,1024,2048,4096,8192
                 and a flash-only 65536 with one head)
  --d D          head dim (default 64)
  --heads H      heads (default 1)
  --batch B      sequences (default 1)
  --dtype T      f32, f16 or bf16 (default f32)
  --causal       causal mask
  --repeats R    timed runs per measurement, the median is reported
                 (default: 3 to 20, about 4 s per measurement)
  --json FILE    write the results as JSON (BENCH.md's schema, suite "lineage")
  --device DEV   auto, cpu or cuda (default auto: the best device present)

serve-sim options:
  --workload W   chat, multiturn, fewshot, agent or all (default all)
  --requests N   requests per workload (default 2000)
  --pages N      KV pool size in pages (default 16384)
  --page-size N  tokens per page, a power of two in 1..256 (default 16)
  --seed S       workload seed, an integer >= 0 (default 1); same seed, same results
  --json FILE    write the results as JSON (suite "serve-sim")

exit status: 0 success, 1 error or failed check, 2 bad usage
)";

// A command line the usage does not allow: main prints the usage and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (std::size_t comma; (comma = list.find(',', start)) != std::string::npos; start = comma + 1) {
    items.push_back(list.substr(start, comma - start));
  }
  items.push_back(list.substr(start));
  return items;
}

// A whole decimal integer in [1, max]; the bounds keep sizes far from overflow.
std::int64_t parse_count(const std::string& option, const std::string& text, std::int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 1 || v > max) {
    throw UsageError(option + ": expected an integer in 1.." + std::to_string(max) + ", got '" +
                     text + "'");
  }
  return v;
}

Algo parse_algo(const std::string& text) {
  if (text == "naive") return Algo::naive;
  if (text == "fa1") return Algo::fa1;
  if (text == "fa2") return Algo::fa2;
  throw UsageError("--algo: expected naive, fa1 or fa2, got '" + text + "'");
}

DType parse_dtype(const std::string& text) {
  if (text == "f32") return DType::f32;
  if (text == "f16") return DType::f16;
  if (text == "bf16") return DType::bf16;
  throw UsageError("--dtype: expected f32, f16 or bf16, got '" + text + "'");
}

std::string parse_device(const std::string& text) {
  for (const std::string& name : flashkit::app::bench_device_names()) {
    if (text == name) return text;
  }
  throw UsageError("--device: expected auto, cpu or cuda, got '" + text + "'");
}

// Reads "--name value" and "--name=value" forms from argv[first..].
class OptionReader {
 public:
  OptionReader(int argc, char** argv, int first) : args_(argv + first, argv + argc) {}

  bool next() {
    if (pos_ >= args_.size()) return false;
    const std::string& arg = args_[pos_++];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) throw UsageError("unexpected '" + arg + "'");
    const std::size_t eq = arg.find('=');
    name_ = arg.substr(0, eq);
    inline_value_ = eq == std::string::npos ? "" : arg.substr(eq + 1);
    has_inline_ = eq != std::string::npos;
    return true;
  }
  const std::string& name() const { return name_; }
  std::string value() {
    if (has_inline_) return inline_value_;
    if (pos_ >= args_.size()) throw UsageError(name_ + ": missing value");
    return args_[pos_++];
  }
  void expect_flag() const {
    if (has_inline_) throw UsageError(name_ + ": takes no value");
  }

 private:
  std::vector<std::string> args_;
  std::size_t pos_ = 0;
  std::string name_, inline_value_;
  bool has_inline_ = false;
};

BenchOptions parse_bench(int argc, char** argv) {
  BenchOptions o;
  OptionReader r(argc, argv, 2);
  while (r.next()) {
    const std::string& n = r.name();
    if (n == "--algo") {
      o.algos.clear();
      for (const std::string& a : split(r.value())) o.algos.push_back(parse_algo(a));
    } else if (n == "--n") {
      o.seqlens.clear();
      for (const std::string& s : split(r.value())) {
        o.seqlens.push_back(parse_count("--n", s, std::int64_t(1) << 24));
      }
    } else if (n == "--d") {
      o.head_dim = parse_count(n, r.value(), 4096);
    } else if (n == "--heads") {
      o.heads = parse_count(n, r.value(), 65536);
    } else if (n == "--batch") {
      o.batch = parse_count(n, r.value(), 65536);
    } else if (n == "--dtype") {
      o.dtype = parse_dtype(r.value());
    } else if (n == "--causal") {
      r.expect_flag();
      o.causal = true;
    } else if (n == "--repeats") {
      o.repeats = int(parse_count(n, r.value(), 10000));
    } else if (n == "--json") {
      o.json_path = r.value();
      if (o.json_path.empty()) throw UsageError("--json: expected a file name");
    } else if (n == "--device") {
      o.device = parse_device(r.value());
    } else {
      throw UsageError("unknown option '" + n + "' for bench");
    }
  }
  return o;
}

std::uint64_t parse_seed(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0) {
    throw UsageError("--seed: expected an integer >= 0, got '" + text + "'");
  }
  return std::uint64_t(v);
}

ServeSimOptions parse_serve_sim(int argc, char** argv) {
  ServeSimOptions o;
  OptionReader r(argc, argv, 2);
  while (r.next()) {
    const std::string& n = r.name();
    if (n == "--workload") {
      const std::string w = r.value();
      if (w != "all") {
        if (w != "chat" && w != "multiturn" && w != "fewshot" && w != "agent") {
          throw UsageError("--workload: expected chat, multiturn, fewshot, agent or all, got '" +
                           w + "'");
        }
        o.workloads = {w};
      }
    } else if (n == "--requests") {
      o.requests = parse_count(n, r.value(), 10000000);
    } else if (n == "--pages") {
      o.pages = parse_count(n, r.value(), 2147483647);
    } else if (n == "--page-size") {
      o.page_size = parse_count(n, r.value(), 256);
      if ((o.page_size & (o.page_size - 1)) != 0) {
        throw UsageError("--page-size: expected a power of two in 1..256, got " +
                         std::to_string(o.page_size));
      }
    } else if (n == "--seed") {
      o.seed = parse_seed(r.value());
    } else if (n == "--json") {
      o.json_path = r.value();
      if (o.json_path.empty()) throw UsageError("--json: expected a file name");
    } else {
      throw UsageError("unknown option '" + n + "' for serve-sim");
    }
  }
  return o;
}

void expect_no_options(int argc, char** argv, const std::string& command) {
  if (argc > 2) throw UsageError(command + " takes no options, got '" + argv[2] + "'");
}

bool wants_help(int argc, char** argv) {
  if (std::string(argv[1]) == "help") return true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

int dispatch(int argc, char** argv) {
  const std::string command = argv[1];
  if (command == "bench") return flashkit::app::run_bench(parse_bench(argc, argv));
  if (command == "serve-sim") return flashkit::app::run_serve_sim(parse_serve_sim(argc, argv));
  if (command == "check") {
    expect_no_options(argc, argv, command);
    return flashkit::app::run_check();
  }
  if (command == "info") {
    expect_no_options(argc, argv, command);
    return flashkit::app::run_info();
  }
  throw UsageError("unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {  // no command: a usage error, but the usage is what the user wants to see
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (wants_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return dispatch(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flashkit: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {  // flashkit::Error and the runtime's (bad_alloc, I/O)
    std::fflush(stdout);
    std::fprintf(stderr, "flashkit: error: %s\n", e.what());
    return 1;
  }
}
