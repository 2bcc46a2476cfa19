// The pieces of the flashkit._flashkit module, each bound in its own file.
#pragma once

#include <nanobind/nanobind.h>

namespace flashkit::python {

// flashkit.FlashkitError (a ValueError) and the translation of flashkit::Error into it.
void bind_errors(nanobind::module_& m);
// forward, backward, merge_states and the Options they take.
void bind_attention(nanobind::module_& m);
// version, build_info, devices.
void bind_info(nanobind::module_& m);
// paged_attention, append_kv, plan_paged_split, paged_workspace_elems.
void bind_paged(nanobind::module_& m);
// mla_decode, mla_append.
void bind_mla(nanobind::module_& m);
// quantize_fp8, hadamard_transform, attention_fp8.
void bind_fp8(nanobind::module_& m);
// apply_rotary.
void bind_rotary(nanobind::module_& m);
// cascade_attention, cascade_workspace_elems.
void bind_cascade(nanobind::module_& m);
// BlockAllocator.
void bind_cache(nanobind::module_& m);
// ring_forward, ring_backward, in_process_ring, nccl_ring, ring_positions.
void bind_ring(nanobind::module_& m);

}  // namespace flashkit::python
