// One test per validation error of paged_attention and append_kv: each bad call throws
// flashkit::Error naming the argument, and nothing is computed (outputs stay poisoned, pages
// unchanged).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "expect_error.hpp"
#include "flashkit/error.hpp"
#include "flashkit/info.hpp"
#include "flashkit/paged.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {
namespace {

PagedSpec small_spec(DType kv_dtype = DType::bf16) {
  PagedSpec s;
  s.kv_dtype = kv_dtype;
  s.page_size = 4;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 8;
  s.seq_lens = {5, 10};
  s.q_lens = {2, 2};
  return s;
}

class PagedValidation : public ::testing::Test {
 protected:
  PagedValidation()
      : c(make_paged_case(small_spec())),
        out(DType::f32, c.out_shape()),
        lse(DType::f32, c.lse_shape()) {
    out.poison();
  }
  PagedAttentionArgs args() const { return c.args(out, lse, Algo::automatic, 0); }
  void fails(const PagedAttentionArgs& a, const std::string& argument,
             const std::string& fragment = "") {
    expect_error([&] { paged_attention(a); }, argument, fragment);
    EXPECT_TRUE(std::isnan(out.at(0))) << "output written despite the error";
  }
  // An i32 tensor holding `values`.
  static HostTensor ints(std::vector<std::int64_t> shape, const std::vector<double>& values) {
    HostTensor t(DType::i32, std::move(shape));
    t.set_values(values);
    return t;
  }

  PagedCase c;
  HostTensor out, lse;
};

TEST_F(PagedValidation, ValidCallRuns) {
  EXPECT_NO_THROW(paged_attention(args()));
  EXPECT_FALSE(std::isnan(out.at(0)));
}

TEST_F(PagedValidation, MissingQ) {
  auto a = args();
  a.q = Tensor();
  fails(a, "q", "none");
}

TEST_F(PagedValidation, QDtype) {
  HostTensor qi(DType::i32, c.q.shape());
  auto a = args();
  a.q = qi;
  fails(a, "q.dtype", "i32");
}

TEST_F(PagedValidation, PagesRank) {
  auto a = args();
  HostTensor p(DType::bf16, {4, 4, 8});
  a.kv.k_pages = p;
  fails(a, "kv.k_pages", "rank 4");
}

TEST_F(PagedValidation, PageSizeNotAPowerOfTwo) {
  for (std::int64_t ps : {3, 512}) {
    HostTensor k(DType::bf16, {c.num_pages, ps, 2, 8}), v(DType::bf16, {c.num_pages, ps, 2, 8});
    auto a = args();
    a.kv.k_pages = k;
    a.kv.v_pages = v;
    fails(a, "kv.k_pages.shape[1]", "power of two");
  }
}

TEST_F(PagedValidation, VPagesShapeDiffers) {
  HostTensor v(DType::bf16, {c.num_pages, 4, 1, 8});
  auto a = args();
  a.kv.v_pages = v;
  fails(a, "kv.v_pages.shape[2]", "as k_pages");
}

TEST_F(PagedValidation, OutHasTheHeadDimOfV) {
  HostTensor v(DType::bf16, {c.num_pages, 4, 2, 16});  // d_v = 16 is allowed; out keeps d = 8
  auto a = args();
  a.kv.v_pages = v;
  fails(a, "out.shape[3]", "head dim of v");
}

TEST_F(PagedValidation, VPagesDtypeDiffers) {
  HostTensor v(DType::f16, {c.num_pages, 4, 2, 8});
  auto a = args();
  a.kv.v_pages = v;
  fails(a, "kv.v_pages.dtype", "f16");
}

TEST_F(PagedValidation, PagesDtypeDiffersFromQ) {
  HostTensor k(DType::f16, {c.num_pages, 4, 2, 8}), v(DType::f16, {c.num_pages, 4, 2, 8});
  auto a = args();
  a.kv.k_pages = k;
  a.kv.v_pages = v;
  fails(a, "kv.k_pages.dtype", "or e4m3");
}

TEST_F(PagedValidation, HeadDimDiffersFromQ) {
  HostTensor k(DType::bf16, {c.num_pages, 4, 2, 16}), v(DType::bf16, {c.num_pages, 4, 2, 16});
  auto a = args();
  a.kv.k_pages = k;
  a.kv.v_pages = v;
  fails(a, "kv.k_pages.shape[3]", "head dim of q");
}

TEST_F(PagedValidation, GqaGroupsNotWhole) {
  HostTensor k(DType::bf16, {c.num_pages, 4, 3, 8}), v(DType::bf16, {c.num_pages, 4, 3, 8});
  auto a = args();
  a.kv.k_pages = k;
  a.kv.v_pages = v;
  fails(a, "kv.k_pages.shape[2]", "GQA");
}

TEST_F(PagedValidation, ScalesOnBf16Pages) {
  HostTensor s(DType::f32, {c.num_pages, 2});
  auto a = args();
  a.kv.k_scale = s;
  fails(a, "kv.k_scale", "e4m3");
}

TEST_F(PagedValidation, Fp8PagesNeedScales) {
  const PagedCase f = make_paged_case(small_spec(DType::e4m3));
  auto a = f.args(out, lse, Algo::automatic, 0);
  a.kv.v_scale = Tensor();
  fails(a, "kv.v_scale", "none");
}

TEST_F(PagedValidation, Fp8ScaleShapeAndDtype) {
  const PagedCase f = make_paged_case(small_spec(DType::e4m3));
  HostTensor wrong_rows(DType::f32, {f.num_pages + 1, 2}), halves(DType::f16, {f.num_pages, 2});
  auto a = f.args(out, lse, Algo::automatic, 0);
  a.kv.k_scale = wrong_rows;
  fails(a, "kv.k_scale.shape[0]", "num_pages");
  a = f.args(out, lse, Algo::automatic, 0);
  a.kv.k_scale = halves;
  fails(a, "kv.k_scale.dtype", "f32");
}

TEST_F(PagedValidation, BlockTableDtypeAndBatch) {
  HostTensor f(DType::f32, {2, c.max_pages}), short_table(DType::i32, {1, c.max_pages});
  auto a = args();
  a.kv.block_table = f;
  fails(a, "kv.block_table.dtype", "i32");
  a = args();
  a.kv.block_table = short_table;
  fails(a, "kv.block_table.shape[0]", "batch");
}

TEST_F(PagedValidation, SeqLensShape) {
  HostTensor lens = ints({3}, {5, 10, 1});
  auto a = args();
  a.kv.seq_lens = lens;
  fails(a, "kv.seq_lens.shape[0]", "batch");
}

TEST_F(PagedValidation, SeqLenShorterThanItsQueries) {
  HostTensor lens = ints({2}, {5, 1});
  auto a = args();
  a.kv.seq_lens = lens;
  fails(a, "kv.seq_lens[1]", "in the cache");
}

TEST_F(PagedValidation, SequenceLongerThanItsPages) {
  HostTensor lens = ints({2}, {5, double(c.max_pages * 4 + 1)});
  auto a = args();
  a.kv.seq_lens = lens;
  fails(a, "kv.seq_lens[1]", "sequence longer than its pages");
}

TEST_F(PagedValidation, PageIdOutOfRange) {
  for (double bad : {-1.0, double(c.num_pages)}) {
    std::vector<double> table = c.block_table.values();
    table[std::size_t(c.max_pages + 2)] = bad;  // sequence 1's third page (tokens 8, 9)
    HostTensor t = ints({2, c.max_pages}, table);
    auto a = args();
    a.kv.block_table = t;
    fails(a, "kv.block_table[1, 2]", "page id out of range");
  }
}

TEST_F(PagedValidation, UnusedTableSlotsAreNotRead) {
  std::vector<double> table = c.block_table.values();
  table[std::size_t(c.max_pages - 1)] = 1e6;  // past sequence 0's two pages
  HostTensor t = ints({2, c.max_pages}, table);
  auto a = args();
  a.kv.block_table = t;
  EXPECT_NO_THROW(paged_attention(a));
}

TEST_F(PagedValidation, OutShapeAndDtype) {
  HostTensor wrong(DType::f32, {2, 2, 4, 16}), ints_out(DType::i32, c.out_shape());
  auto a = args();
  a.out = wrong;
  fails(a, "out.shape[3]", "head dim");
  a = args();
  a.out = ints_out;
  fails(a, "out.dtype", "i32");
}

TEST_F(PagedValidation, LseShape) {
  HostTensor wrong(DType::f32, {2, 4, 3});
  auto a = args();
  a.lse = wrong;
  fails(a, "lse.shape[2]", "q_len");
}

TEST_F(PagedValidation, TopLeftCausal) {
  auto a = args();
  a.mask.align = CausalAlign::top_left;
  fails(a, "mask.align", "bottom_right");
}

TEST_F(PagedValidation, DiagonalOffset) {
  auto a = args();
  a.mask.diagonal_offset = 4;
  fails(a, "mask.diagonal_offset", "last tokens of each sequence");
}

TEST_F(PagedValidation, WindowAndSoftcap) {
  auto a = args();
  a.mask.window_left = -2;
  fails(a, "mask.window_left");
  a = args();
  a.mask.softcap = -1.0f;
  fails(a, "mask.softcap");
}

TEST_F(PagedValidation, AlibiShape) {
  HostTensor slopes(DType::f32, {3});
  auto a = args();
  a.mask.alibi_slopes = slopes;
  fails(a, "mask.alibi_slopes.shape[0]", "heads_q");
}

TEST_F(PagedValidation, NegativeSplits) {
  auto a = args();
  a.num_splits = -1;
  fails(a, "num_splits");
}

TEST_F(PagedValidation, WorkspaceTooSmallOrNotF32) {
  HostTensor small(DType::f32, {10}), halves(DType::f16, {100000});
  auto a = args();
  a.num_splits = 2;
  a.workspace = small;
  fails(a, "workspace", "2 splits");
  a.workspace = halves;
  fails(a, "workspace.dtype", "f32");
}

TEST_F(PagedValidation, PackedQueries) {
  PagedSpec s = small_spec();
  s.packed = true;
  s.q_lens = {1, 3};
  PagedCase p = make_paged_case(s);
  HostTensor o(DType::f32, p.out_shape()), l(DType::f32, p.lse_shape());
  o.poison();
  auto a = p.args(o, l, Algo::automatic, 0);
  EXPECT_NO_THROW(paged_attention(a));

  a.max_seqlen_q = 2;
  expect_error([&] { paged_attention(a); }, "cu_seqlens_q", "max_seqlen_q");
  HostTensor cu = ints({3}, {1, 1, 4});
  a = p.args(o, l, Algo::automatic, 0);
  a.cu_seqlens_q = cu;
  expect_error([&] { paged_attention(a); }, "cu_seqlens_q[0]");
  HostTensor past = ints({3}, {0, 3, 6});
  a = p.args(o, l, Algo::automatic, 0);
  a.cu_seqlens_q = past;
  expect_error([&] { paged_attention(a); }, "cu_seqlens_q[2]", "packed query tokens");
}

TEST_F(PagedValidation, CpuHeadDimLimit) {
  PagedSpec s = small_spec();
  s.seq_lens = {2, 2};
  s.head_dim = 1040;
  const PagedCase big = make_paged_case(s);
  HostTensor o(DType::f32, big.out_shape());
  expect_error([&] { paged_attention(big.args(o, Tensor(), Algo::automatic, 1)); }, "q.shape[-1]",
               "1040");
  s.head_dim = 64;
  s.head_dim_v = 1040;
  const PagedCase wide_v = make_paged_case(s);
  HostTensor ov(DType::f32, wide_v.out_shape());
  expect_error([&] { paged_attention(wide_v.args(ov, Tensor(), Algo::automatic, 1)); },
               "kv.v_pages.shape[3]", "1040");
}

TEST_F(PagedValidation, CpuAlgos) {
  auto a = args();
  a.algo = Algo::fa3;
  fails(a, "algo", "fa3");
}

TEST_F(PagedValidation, MixedDevices) {
  auto a = args();
  a.kv.block_table =
      Tensor(c.block_table.view().data(), DType::i32, {2, c.max_pages}, Device::cuda(0));
  fails(a, "kv.block_table.device", "cpu");
}

TEST_F(PagedValidation, DeviceWithoutBackend) {
  if (build_info().cuda) {
    SUCCEED() << "CUDA build: covered by the GPU suite";
    return;
  }
  // Device tables are not read by validation, so the call gets as far as the missing backend.
  float x[64] = {};
  std::int32_t ids[4] = {0, 1, 0, 1};
  const Device gpu = Device::cuda(0);
  PagedAttentionArgs a;
  a.q = Tensor(x, DType::f32, {2, 1, 2, 8}, gpu);
  a.out = Tensor(x, DType::f32, {2, 1, 2, 8}, gpu);
  a.kv.k_pages = Tensor(x, DType::f32, {2, 2, 2, 8}, gpu);
  a.kv.v_pages = Tensor(x, DType::f32, {2, 2, 2, 8}, gpu);
  a.kv.block_table = Tensor(ids, DType::i32, {2, 2}, gpu);
  a.kv.seq_lens = Tensor(ids, DType::i32, {2}, gpu);
  expect_error([&] { paged_attention(a); }, "q.device", "no CUDA backend");
}

// --- append_kv -------------------------------------------------------------------------------

class AppendValidation : public PagedValidation {
 protected:
  AppendValidation() : k_new(DType::bf16, {2, 3, 2, 8}), v_new(DType::bf16, {2, 3, 2, 8}) {
    std::mt19937 rng(3);
    k_new.fill_random(rng);
    v_new.fill_random(rng);
    start = ints({2}, {2, 5});
  }
  AppendKVArgs append_args(const PagedCase& into) const {
    AppendKVArgs a;
    a.k_new = k_new;
    a.v_new = v_new;
    a.start_pos = start;
    a.kv = into.kv();
    return a;
  }
  void append_fails(const AppendKVArgs& a, const std::string& argument,
                    const std::string& fragment = "") {
    const std::vector<double> before = c.k_pages.values();
    expect_error([&] { append_kv(a); }, argument, fragment);
    const std::vector<double> after = c.k_pages.values();
    for (std::size_t i = 0; i < after.size(); ++i) {  // NaN marks the slots no token uses
      ASSERT_TRUE(after[i] == before[i] || (std::isnan(after[i]) && std::isnan(before[i])))
          << "pages written despite the error";
    }
  }
  HostTensor k_new, v_new, start;
};

TEST_F(AppendValidation, ValidCallRuns) {
  EXPECT_NO_THROW(append_kv(append_args(c)));
}

TEST_F(AppendValidation, NewRowsShape) {
  HostTensor k(DType::bf16, {2, 3, 4, 8});
  auto a = append_args(c);
  a.k_new = k;
  append_fails(a, "v_new.shape[2]", "as k_new");
  a.v_new = k;
  append_fails(a, "k_new.shape[2]", "KV heads of the pages");
}

TEST_F(AppendValidation, NewValuesHaveTheHeadDimOfVPages) {
  HostTensor v(DType::bf16, {2, 3, 2, 16});
  auto a = append_args(c);
  a.v_new = v;
  append_fails(a, "v_new.shape[3]", "head dim of kv.v_pages");
}

TEST_F(AppendValidation, NewRowsDtype) {
  HostTensor k(DType::f16, {2, 3, 2, 8}), v(DType::f16, {2, 3, 2, 8});
  auto a = append_args(c);
  a.v_new = v;
  append_fails(a, "v_new.dtype", "the dtype of k_new");
  a.k_new = k;
  append_fails(a, "kv.k_pages.dtype", "f16");  // bf16 pages take bf16 rows (or are e4m3)
}

TEST_F(AppendValidation, StartPosShapeAndRange) {
  HostTensor three = ints({3}, {0, 0, 0}), past = ints({2}, {2, double(c.max_pages * 4 - 2)});
  HostTensor negative = ints({2}, {-1, 0});
  auto a = append_args(c);
  a.start_pos = three;
  append_fails(a, "start_pos.shape[0]", "batch");
  a.start_pos = past;
  append_fails(a, "start_pos[1]", "within max_pages * page_size");
  a.start_pos = negative;
  append_fails(a, "start_pos[0]");
}

TEST_F(AppendValidation, PageIdOutOfRange) {
  std::vector<double> table = c.block_table.values();
  table[1] = double(c.num_pages + 5);  // sequence 0's second page: tokens 4.., written from 2
  HostTensor t = ints({2, c.max_pages}, table);
  auto a = append_args(c);
  a.kv.block_table = t;
  append_fails(a, "kv.block_table[0, 1]", "page id out of range");
}

TEST_F(AppendValidation, Fp8PageWithoutAUsableScale) {
  PagedCase f = make_paged_case(small_spec(DType::e4m3));
  const std::int32_t page = f.pages[1][1];  // tokens 4..7 of sequence 1: written from 5
  f.k_scale.view().data_as<float>()[page * 2 + 1] = 0.0f;
  expect_error([&] { append_kv(append_args(f)); }, "kv.k_scale[" + std::to_string(page) + ", 1]",
               "finite scale > 0");
}

}  // namespace
}  // namespace flashkit::testing
