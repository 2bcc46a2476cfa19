// version, build_info, devices and scratch_memory as plain Python values (str, dict, list of
// dicts), and release_scratch_memory.
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/info.hpp"
#include "flashkit/memory.hpp"

namespace nb = nanobind;

namespace flashkit::python {

void bind_info(nb::module_& m) {
  m.def("version", [] { return std::string(flashkit::version()); });
  m.def("build_info", [] {
    const BuildInfo b = flashkit::build_info();
    nb::dict d;
    d["cuda"] = b.cuda;
    d["cuda_archs"] = b.cuda_archs;
    d["nccl"] = b.nccl;
    d["cpu_isa"] = b.cpu_isa;
    d["compiler"] = b.compiler;
    d["build_type"] = b.build_type;
    return d;
  });
  m.def("devices", [] {
    nb::list out;
    for (const DeviceInfo& info : flashkit::devices()) {
      nb::dict d;
      d["name"] = info.name;
      d["backend"] = info.backend;
      d["kernels"] = info.kernels;
      out.append(d);
    }
    return out;
  });
  m.def("scratch_memory", [] {
    const ScratchMemory mem = flashkit::scratch_memory();
    nb::dict d;
    d["reserved_bytes"] = mem.reserved_bytes;
    d["keep_bytes"] = mem.keep_bytes;
    return d;
  });
  m.def("release_scratch_memory", [] { flashkit::release_scratch_memory(); });
}

}  // namespace flashkit::python
