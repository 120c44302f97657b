// BF16 paged absorbed-MLA decode: the host entry points (kernels/mla_decode.hpp). Checks the
// parameters, carves the workspace, picks the split kernel's path for the shape and launches
// scheduler (unless the call is planned), split kernel and combine on the caller's stream
// (decode_launch.hpp lists the files of each role).
#include "kernels/mla_decode.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/decode_launch.hpp"
#include "kernels/tensor_map.hpp"

namespace mla::kernels {
namespace detail {

Workspace carve(const quant::Bf16DecodeParams& p) {
  const quant::DecodeWorkspaceLayout l = quant::decode_workspace_layout(p.batch, p.s_q, p.heads, p.d_c, p.num_parts);
  char* base = static_cast<char*>(p.workspace);
  Workspace w;
  w.info = reinterpret_cast<int32_t*>(base + l.info);
  w.offsets = reinterpret_cast<int32_t*>(base + l.offsets);
  w.merge_cnt = reinterpret_cast<int32_t*>(base + l.cnt);
  w.lse_acc = reinterpret_cast<float*>(base + l.lse);
  w.o_acc = reinterpret_cast<float*>(base + l.o);
  return w;
}

// decode_launch.hpp: the wgmma paths' TMA descriptor of the cache. Columns past d_c + d_r read as
// zeros.
CUtensorMap make_kv_map(const quant::Bf16DecodeParams& p, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dim = static_cast<cuuint64_t>(p.d_c + p.d_r);
  const cuuint64_t gdim[2] = {dim, static_cast<cuuint64_t>(p.num_pages) * p.page_size};
  const cuuint64_t gstride[1] = {dim * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = cuda::encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(p.kv_cache),
                                          gdim, gstride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error("mla decode: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return m;
}

}  // namespace detail

int decode_parts_for_device(const Bf16DecodeParams& p) { return quant::decode_default_parts(cuda::sm_count(), p); }

size_t decode_workspace_bytes_for(const Bf16DecodeParams& p) {
  const int parts = p.num_parts > 0 ? p.num_parts : decode_parts_for_device(p);
  return quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, parts);
}

namespace {
// The checks shared by a plan and a call; p with its effective number of parts.
Bf16DecodeParams checked(const Bf16DecodeParams& p_in) {
  quant::validate_decode_params(p_in);
  if (!quant::decode_variant_supported(p_in.variant))
    throw InputError("mla decode params: variant = " + std::to_string(p_in.variant) + " (supported: " +
                     quant::kDecodeVariantsHelp + ")");
  Bf16DecodeParams p = p_in;
  if (p.num_parts == 0) p.num_parts = decode_parts_for_device(p);
  const size_t need = quant::decode_workspace_bytes(p.batch, p.s_q, p.heads, p.d_c, p.num_parts);
  if (p.workspace == nullptr || p.workspace_bytes < need)
    throw InputError("mla decode params: workspace_bytes = " + std::to_string(p.workspace_bytes) + " (need " +
                     std::to_string(need) + " for this shape; see decode_workspace_bytes_for)");
  return p;
}
}  // namespace

void mla_decode_bf16_plan(const Bf16DecodeParams& p_in, cudaStream_t stream) {
  const Bf16DecodeParams p = checked(p_in);
  detail::launch_schedule(p, detail::carve(p), quant::decode_tile_config_for(p).tile_tokens, stream);
}

void mla_decode_bf16(const Bf16DecodeParams& p_in, cudaStream_t stream) {
  const Bf16DecodeParams p = checked(p_in);
  const detail::Workspace w = detail::carve(p);
  const quant::DecodeTileConfig cfg = quant::decode_tile_config_for(p);
  if (!p.planned) detail::launch_schedule(p, w, cfg.tile_tokens, stream);
  if (cfg.rows_per_block == 16)
    detail::launch_membound(p, w, stream);
  else if (quant::decode_uses_v7(p))
    detail::launch_manyhead_v7(p, w, cfg.row_blocks, stream);
  else if (quant::decode_uses_v6(p)) {
    detail::launch_manyhead_v6(p, w, cfg.row_blocks, stream);
    if (detail::v6_fuses_merge(p)) return;  // v6 merged each request's splits itself
  } else
    detail::launch_mma64(p, w, cfg.row_blocks, stream);
  detail::launch_combine(p, w, stream);
}

}  // namespace mla::kernels
