// flashkit._flashkit: the Python extension. Bindings only; the Python package python/flashkit
// allocates outputs and offers the user-facing functions.
#include "bindings.hpp"

NB_MODULE(_flashkit, m) {
  m.doc() = "flashkit native bindings (use the flashkit package, not this module)";
  flashkit::python::bind_errors(m);
  flashkit::python::bind_attention(m);
  flashkit::python::bind_info(m);
  flashkit::python::bind_paged(m);
  flashkit::python::bind_mla(m);
  flashkit::python::bind_rotary(m);
  flashkit::python::bind_fp8(m);
  flashkit::python::bind_cascade(m);
  flashkit::python::bind_cache(m);
  flashkit::python::bind_ring(m);
}
