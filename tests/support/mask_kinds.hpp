// The mask settings every attention suite sweeps (CPU and GPU, forward and backward), so all
// grids test the same seven cases.
#pragma once

#include "attention_case.hpp"

namespace flashkit::testing {

enum class MaskKind { none, causal_tl, causal_br, window, alibi, softcap, prefix };
inline constexpr MaskKind kAllMasks[] = {MaskKind::none,   MaskKind::causal_tl, MaskKind::causal_br,
                                         MaskKind::window, MaskKind::alibi,     MaskKind::softcap,
                                         MaskKind::prefix};
const char* mask_name(MaskKind m);
// Sets the spec's mask fields for `m` (window and prefix lengths chosen off every tile size).
void apply_mask(CaseSpec& s, MaskKind m);

}  // namespace flashkit::testing
