// FP8 paged decode (fp8_decode.hpp): the host entry points. Checks the parameters, carves the
// workspace (the BF16 decode's layout), quantises the query when given in BF16, and launches the
// scheduler (the BF16 decode's, 64-token tiles), a split kernel and the LSE combine (the BF16
// decode's). Requests of <= 32 query rows (s_q H) take the narrow split kernel
// (kernels/fp8_decode_narrow.cu: transposed products, no 64-row padding); more rows take the
// 64-row kernel (kernels/fp8_decode_rows64.cu), or at d_c <= 256 (TPLA slices) the 128-row
// kernel (kernels/fp8_decode_pair.cu). All compute P.V as O^T = V8^T P8^T with V^T built in
// registers (FP8 wgmma cannot transpose an 8-bit operand; docs/formats/kv-fp8.md).
#include "kernels/fp8_decode.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/decode_launch.hpp"
#include "kernels/fp8_append.hpp"
#include "kernels/fp8_decode_device.cuh"
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

}  // namespace

bool fp8_decode_shape_supported(const quant::Fp8DecodeParams& p) {
  return (p.d_c == 128 || p.d_c == 256 || p.d_c == 512) && (p.d_r == 32 || p.d_r == 64);
}

int fp8_decode_parts_for_device(const quant::Fp8DecodeParams& p) { return quant::fp8_decode_default_parts(cuda::sm_count(), p); }

size_t fp8_decode_workspace_bytes(const quant::Fp8DecodeParams& p, bool with_query) {
  const int parts = p.num_parts > 0 ? p.num_parts : fp8_decode_parts_for_device(p);
  size_t n = align256(quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts));
  if (with_query) {
    const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
    n += align256(rows * p.d_c) + align256(rows * p.d_r * 2) + align256(rows * 4);
  }
  return n;
}

namespace {
// fp8_decode's body; fp4_cache: p.cache holds FP4 pages for the narrow kernel's FP4 route.
void decode_impl(const quant::Fp8DecodeParams& p_in, cudaStream_t stream, bool fp4_cache) {
  quant::validate_fp8_decode_params(p_in);
  if (!fp8_decode_shape_supported(p_in))
    throw InputError("fp8 decode params: (d_c, d_r) = (" + std::to_string(p_in.d_c) + ", " + std::to_string(p_in.d_r) +
                     ") has no GPU kernel (supported: d_c 128, 256, 512 with d_r 32 or 64; the CPU twin takes more)");
  quant::Fp8DecodeParams p = p_in;
  const int parts = p.num_parts > 0 ? p.num_parts : fp8_decode_parts_for_device(p);
  p.num_parts = parts;
  const size_t need = quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("fp8 decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " for this shape; see fp8_decode_workspace_bytes)");
  const quant::Bf16DecodeParams po = output_shim(p, parts);
  const detail::Workspace w = detail::carve(po);
  decode_schedule_on_device(p.seqlens, p.batch, kT, parts, w.info, w.offsets, stream);
  if (p.s_q * p.heads <= fp8::kNarrowRows) fp8::launch_narrow(p, w, parts, stream, fp4_cache);
  else if (quant::fp8_decode_uses_pair(p)) fp8::launch_pair(p, w, parts, stream);
  else fp8::launch_rows64(p, w, parts, stream);
  detail::launch_combine(po, w, stream);
}

void decode_bf16q_impl(const quant::Fp8DecodeParams& p_in, const uint16_t* q, cudaStream_t stream, bool fp4_cache) {
  quant::Fp8DecodeParams p = p_in;
  if (p.num_parts == 0 && p.batch > 0 && p.heads > 0) p.num_parts = fp8_decode_parts_for_device(p);
  const size_t need = fp8_decode_workspace_bytes(p, true);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("fp8 decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " with the query; see fp8_decode_workspace_bytes(p, true))");
  const size_t rows = static_cast<size_t>(p.batch) * p.s_q * p.heads;
  char* ws = static_cast<char*>(p.workspace);
  size_t off = align256(quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, p.num_parts));
  uint8_t* q8 = reinterpret_cast<uint8_t*>(ws + off);
  off += align256(rows * p.d_c);
  uint16_t* q_rope = reinterpret_cast<uint16_t*>(ws + off);
  off += align256(rows * p.d_r * 2);
  float* q_scale = reinterpret_cast<float*>(ws + off);
  p.q8 = q8;
  p.q_rope = q_rope;
  p.q_scale = q_scale;
  quant::validate_fp8_decode_params(p);
  fp8_quantize_query(q, static_cast<int>(rows), p.d_c, p.d_r, q8, q_rope, q_scale, stream);
  decode_impl(p, stream, fp4_cache);
}
}  // namespace

void fp8_decode(const quant::Fp8DecodeParams& p, cudaStream_t stream) { decode_impl(p, stream, false); }

void fp8_decode_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  decode_bf16q_impl(p, q, stream, false);
}

void fp8_decode_fp4_cache_bf16q(const quant::Fp8DecodeParams& p, const uint16_t* q, cudaStream_t stream) {
  auto bad = [](const std::string& what) { throw InputError("fp8 decode of an FP4 cache: " + what); };
  if (p.s_q * p.heads > fp8::kNarrowRows)
    bad("s_q * heads = " + std::to_string(p.s_q * p.heads) + " query rows (the FP8 route takes <= " +
        std::to_string(fp8::kNarrowRows) + "; the BF16 route, kernels/kv4_decode.hpp, takes any)");
  quant::validate_fp4_layout(quant::Fp4CacheLayout{p.page_size, p.d_c, p.d_r});
  if (p.page_size % quant::kFp8DecodeTile != 0)
    bad("page_size = " + std::to_string(p.page_size) + " (a multiple of " + std::to_string(quant::kFp8DecodeTile) + ")");
  decode_bf16q_impl(p, q, stream, true);
}

}  // namespace mla::kernels
