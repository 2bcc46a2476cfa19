// flashkit::Error becomes flashkit.FlashkitError, a ValueError (invalid arguments are what it
// reports), with the message intact and the argument it names as `.argument`.
#include <Python.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/error.hpp"

namespace nb = nanobind;

namespace flashkit::python {

void bind_errors(nb::module_& m) {
  // Created here rather than with nb::exception so that only one translator exists: the one that
  // also sets `.argument`. The dotted name makes tracebacks read "flashkit.FlashkitError".
  PyObject* type = PyErr_NewExceptionWithDoc(
      "flashkit.FlashkitError",
      "An invalid flashkit call. The message names the argument, what was expected and what was "
      "got; `argument` holds the argument's name ('' when the error is not about one).",
      PyExc_ValueError, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr("FlashkitError") = nb::steal(type);

  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const flashkit::Error& e) {
          nb::handle error_type(static_cast<PyObject*>(payload));
          nb::object error = error_type(e.what());
          error.attr("argument") = e.argument();
          PyErr_SetObject(error_type.ptr(), error.ptr());
        }
      },
      type);
}

}  // namespace flashkit::python
