// FP8 paged decode (fp8_decode.hpp): the host entry points. Checks the parameters, carves the
// workspace (the BF16 decode's layout + merge counters), and launches the scheduler (the BF16
// decode's, 64-token tiles; skipped for a planned call, fp8_decode_plan; with a BF16 query the
// same launch may quantise it), a split kernel and the LSE combine (the BF16 decode's). Requests
// of <= 32 query rows (s_q H) take the narrow split kernel (kernels/fp8_decode_narrow.cu:
// transposed products, no 64-row padding; it quantises an aligned BF16 query itself and merges
// each request's splits in the CTA that finishes its last one, so no combine launch); more rows take the
// 64-row kernel (kernels/fp8_decode_rows64.cu), or at d_c <= 256 (TPLA slices) the 128-row
// kernel (kernels/fp8_decode_pair.cu). All compute P.V as O^T = V8^T P8^T with V^T built in
// registers (FP8 wgmma cannot transpose an 8-bit operand; docs/formats/kv-fp8.md).
#include "kernels/fp8_decode.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/decode_launch.hpp"
#include "kernels/decode_schedule.cuh"
#include "kernels/fp8_decode_device.cuh"
#include "kernels/fp8_encode.cuh"
#include "kernels/mla_decode.hpp"
#include "quant/fp4_cache_format.hpp"

namespace mla::kernels {
namespace {

using fp8::kT;

// The BF16 decode's parameter block for what the FP8 decode shares with it: the output, the
// workspace carving, the store and the combine.
quant::Bf16DecodeParams output_shim(const quant::Fp8DecodeParams& p, int parts) {
  quant::Bf16DecodeParams s;
  s.out = p.out;
  s.lse = p.lse;
  s.seqlens = p.seqlens;
  quant::set_decode_shape(s, p.batch, p.s_q, p.heads, p.d_c, p.d_r, p.num_pages, p.page_size, p.max_pages, p.scale);
  s.num_parts = parts;
  s.workspace = p.workspace;
  s.workspace_bytes = p.workspace_bytes;
  s.error_flag = p.error_flag;
  return s;
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The launch before the split kernel: block 0 runs the split-KV scheduler and zeroes the merge
// counters (with `schedule`; fp8_decode_plan, or each unplanned call), the others quantise the
// query when the split kernel does not (`rows` > 0), a warp per row (fp8_quantize_query's
// encoders, byte for byte). One launch instead of two: 2-4 us less a call on an H100 at H = 16
// (docs/gpu-notes.md, "The FP8 prologue in one launch").
constexpr int kPrologueRowsPerBlock = detail::kSchedThreads / 32;
__global__ void __launch_bounds__(detail::kSchedThreads)
    fp8_prologue_kernel(bool schedule, const int32_t* __restrict__ seqlens, int batch, int parts, int32_t* info,
                        int32_t* offsets, int32_t* merge_cnt, const uint16_t* __restrict__ q, int rows, int d_c,
                        int d_r, uint8_t* q8, uint16_t* q_rope, float* q_scale, bool vec) {
  __shared__ typename detail::ScheduleScan::TempStorage tmp;
  if (blockIdx.x == 0) {
    if (!schedule) return;
    for (int b = threadIdx.x; b < batch; b += blockDim.x) merge_cnt[b] = 0;
    detail::decode_schedule_block(seqlens, batch, kT, parts, info, offsets, tmp);
    return;
  }
  const int r = (blockIdx.x - 1) * kPrologueRowsPerBlock + static_cast<int>(threadIdx.x / 32);
  if (r >= rows) return;
  fp8enc::quantize_query_row_any(vec, q, r, d_c, d_r, q8, q_rope, q_scale, threadIdx.x & 31);
}

}  // namespace

bool fp8_decode_shape_supported(const quant::Fp8DecodeParams& p) {
  return quant::fp8_decode_gpu_d_c(p.d_c) && quant::fp8_decode_gpu_d_r(p.d_r);
}

int fp8_decode_parts_for_device(const quant::Fp8DecodeParams& p) { return quant::fp8_decode_default_parts(cuda::sm_count(), p); }

namespace {
// The workspace: the BF16 decode's (schedule, merge counters: the narrow kernel uses the first
// `batch` of them, split partials), then (with the query) the quantised query.
size_t base_bytes(const quant::Fp8DecodeParams& p, int parts) {
  return align256(quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts));
}
int parts_of(const quant::Fp8DecodeParams& p) { return p.num_parts > 0 ? p.num_parts : fp8_decode_parts_for_device(p); }
}  // namespace

Fp8QueryOffsets fp8_decode_query_offsets(const quant::Fp8DecodeParams& p) {
  const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
  Fp8QueryOffsets o;
  o.q8 = base_bytes(p, parts_of(p));
  o.q_rope = o.q8 + align256(rows * p.d_c);
  o.q_scale = o.q_rope + align256(rows * p.d_r * 2);
  return o;
}

size_t fp8_decode_workspace_bytes(const quant::Fp8DecodeParams& p, bool with_query) {
  if (!with_query) return base_bytes(p, parts_of(p));
  const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
  return fp8_decode_query_offsets(p).q_scale + align256(rows * 4);
}

namespace {
// A BF16 query and where its quantisation goes (p.q8, q_rope, q_scale, writable).
struct QueryToQuantise {
  const uint16_t* q;
  uint8_t* q8;
  uint16_t* q_rope;
  float* q_scale;
};

// The GPU kernels' (d_c, d_r), past the twin's validation.
void check_gpu_shape(const quant::Fp8DecodeParams& p) {
  if (!fp8_decode_shape_supported(p))
    throw InputError("fp8 decode params: (d_c, d_r) = (" + std::to_string(p.d_c) + ", " + std::to_string(p.d_r) +
                     ") has no GPU kernel (supported: d_c 128, 256, 512 with d_r 32 or 64; the CPU twin takes more)");
}

void check_workspace(const quant::Fp8DecodeParams& p, const char* what) {
  const size_t need = fp8_decode_workspace_bytes(p, false);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError(std::string(what) + ": workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " for this shape; see fp8_decode_workspace_bytes)");
}

// The prologue launch: the schedule (schedule) and/or the query's quantisation (qq, rows > 0).
void launch_prologue(const quant::Fp8DecodeParams& p, const detail::Workspace& w, bool schedule,
                     const QueryToQuantise* qq, int rows, bool vec, cudaStream_t stream) {
  const QueryToQuantise q = qq ? *qq : QueryToQuantise{};
  fp8_prologue_kernel<<<1 + (rows + kPrologueRowsPerBlock - 1) / kPrologueRowsPerBlock, detail::kSchedThreads, 0,
                        stream>>>(schedule, p.seqlens, p.batch, p.num_parts, w.info, w.offsets, w.merge_cnt, q.q, rows,
                                  p.d_c, p.d_r, q.q8, q.q_rope, q.q_scale, vec);
  cuda::check(cudaGetLastError(), "fp8 decode prologue launch (scheduler / query quantisation)", "mla decode");
}

// fp8_decode's body; fp4_cache: p.cache holds FP4 pages for the FP4 route; qq: a BF16 query to
// quantise (nullptr: p's query is already FP8). Launches: the prologue unless p.planned and the
// split kernel quantises the query itself (<= 32 rows, a 16-byte aligned query), the split
// kernel, and the combine unless the split kernel merges (<= 32 rows).
void decode_impl(const quant::Fp8DecodeParams& p_in, cudaStream_t stream, bool fp4_cache,
                 const QueryToQuantise* qq = nullptr) {
  quant::validate_fp8_decode_params(p_in);
  check_gpu_shape(p_in);
  quant::Fp8DecodeParams p = p_in;
  const int parts = parts_of(p);
  p.num_parts = parts;
  check_workspace(p, "fp8 decode params");
  const quant::Bf16DecodeParams po = output_shim(p, parts);
  const detail::Workspace w = detail::carve(po);
  const int rows = p.batch * p.s_q * p.heads;
  const bool narrow = p.s_q * p.heads <= fp8::kNarrowRows;
  const bool vec = qq != nullptr && fp8enc::query_vec_ok(qq->q, qq->q8, qq->q_rope, p.d_c, p.d_r);
  const bool quantise_in_split = narrow && vec;
  const int prologue_rows = (qq != nullptr && !quantise_in_split) ? rows : 0;
  if (!p.planned || prologue_rows > 0) launch_prologue(p, w, !p.planned, qq, prologue_rows, vec, stream);
  if (narrow) {
    fp8::NarrowExtras x;
    if (quantise_in_split) x.query = fp8::QuerySrc{qq->q, qq->q8, qq->q_rope, qq->q_scale};
    x.merge_cnt = w.merge_cnt;
    fp8::launch_narrow(p, x, w, parts, stream, fp4_cache);
    return;
  }
  if (quant::fp8_decode_uses_pair(p)) fp8::launch_pair(p, w, parts, stream);
  else fp8::launch_rows64(p, w, parts, stream, fp4_cache);
  detail::launch_combine(po, w, stream);
}

void decode_bf16q_impl(const quant::Fp8DecodeParams& p_in, const uint16_t* q, cudaStream_t stream, bool fp4_cache) {
  if (q == nullptr) throw InputError("fp8 decode params: q (the bf16 query) is null");
  quant::Fp8DecodeParams p = p_in;
  if (p.num_parts == 0 && p.batch > 0 && p.heads > 0) p.num_parts = fp8_decode_parts_for_device(p);
  const size_t need = fp8_decode_workspace_bytes(p, true);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("fp8 decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " with the query; see fp8_decode_workspace_bytes(p, true))");
  char* ws = static_cast<char*>(p.workspace);
  const Fp8QueryOffsets o = fp8_decode_query_offsets(p);
  uint8_t* q8 = reinterpret_cast<uint8_t*>(ws + o.q8);
  uint16_t* q_rope = reinterpret_cast<uint16_t*>(ws + o.q_rope);
  float* q_scale = reinterpret_cast<float*>(ws + o.q_scale);
  p.q8 = q8;
  p.q_rope = q_rope;
  p.q_scale = q_scale;
  const QueryToQuantise qq{q, q8, q_rope, q_scale};
  decode_impl(p, stream, fp4_cache, &qq);
}
}  // namespace

void fp8_decode_plan(const quant::Fp8DecodeParams& p_in, cudaStream_t stream) {
  quant::validate_fp8_decode_schedule(p_in);
  check_gpu_shape(p_in);
  quant::Fp8DecodeParams p = p_in;
  p.num_parts = parts_of(p);
  check_workspace(p, "fp8 decode params");
  const detail::Workspace w = detail::carve(output_shim(p, p.num_parts));
  launch_prologue(p, w, true, nullptr, 0, false, stream);
}

void fp8_decode(const quant::Fp8DecodeParams& p, cudaStream_t stream) { decode_impl(p, stream, false); }

void fp8_decode_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  decode_bf16q_impl(p, q, stream, false);
}

void fp8_decode_fp4_cache_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("fp8 decode of an FP4 cache: " + what); };
  if (quant::fp8_decode_uses_pair(p))
    bad("s_q * heads = " + std::to_string(p.s_q * p.heads) + " query rows at d_c = " + std::to_string(p.d_c) +
        " (the FP8 route takes any row count at d_c = 512 and <= " + std::to_string(quant::kFp8DecodeRowsPerBlock) +
        " rows at d_c <= 256; the BF16 route, kernels/kv4_decode.hpp, takes any)");
  quant::validate_fp4_layout(quant::Fp4CacheLayout{p.page_size, p.d_c, p.d_r});
  if (p.page_size % quant::kFp8DecodeTile != 0)
    bad("page_size = " + std::to_string(p.page_size) + " (a multiple of " + std::to_string(quant::kFp8DecodeTile) + ")");
  decode_bf16q_impl(p, q, stream, true);
}

}  // namespace mla::kernels
