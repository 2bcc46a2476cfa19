#include "mask_kinds.hpp"

namespace flashkit::testing {

const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::none:
      return "none";
    case MaskKind::causal_tl:
      return "causal_tl";
    case MaskKind::causal_br:
      return "causal_br";
    case MaskKind::window:
      return "window";
    case MaskKind::alibi:
      return "alibi";
    case MaskKind::softcap:
      return "softcap";
    case MaskKind::prefix:
      return "prefix";
  }
  return "?";
}

void apply_mask(CaseSpec& s, MaskKind m) {
  switch (m) {
    case MaskKind::none:
      return;
    case MaskKind::causal_tl:
      s.causal = true;
      s.align = CausalAlign::top_left;
      return;
    case MaskKind::causal_br:
      s.causal = true;
      return;
    case MaskKind::window:  // both sides bounded, not aligned with any tile size
      s.window_left = 37;
      s.window_right = 9;
      return;
    case MaskKind::alibi:
      s.alibi = true;
      s.causal = true;
      return;
    case MaskKind::softcap:  // scale 1 pushes scores to |s| ~ 4, where tanh bends
      s.softcap = 2.5f;
      s.softmax_scale = 1.0f;
      return;
    case MaskKind::prefix:
      s.causal = true;
      s.align = CausalAlign::top_left;
      s.prefix_len = 29;
      return;
  }
}

}  // namespace flashkit::testing
