// The mixed decode step (TyphoonMLA): naive prefix attention + absorbed decode of each request's
// own pages + W_UV expansion and LSE merge; absorb-only below B_theta.
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/mla_decode.hpp"
#include "kernels/prefix_attention.hpp"

namespace mla::kernels {
int mixed_prefix_splits(const MixedDecodeParams& p) {
  if (p.prefix_splits > 0) return p.prefix_splits;
  return quant::prefix_default_splits(p.suffix.batch * p.suffix.s_q, p.suffix.heads, p.prefix_len, cuda::sm_count());
}

size_t mixed_prefix_workspace_bytes(const MixedDecodeParams& p) {
  if (!quant::mixed_uses_prefix(p)) return 0;
  return quant::prefix_workspace_bytes(p.suffix.batch * p.suffix.s_q, p.suffix.heads, p.d_v, mixed_prefix_splits(p));
}

void mixed_decode_bf16(const MixedDecodeParams& p, cudaStream_t stream) {
  quant::validate_mixed_decode(p);
  const quant::Bf16DecodeParams& s = p.suffix;
  const int rows = s.batch * s.s_q;
  PrefixMergeParams mp;
  mp.kv_b = p.kv_b;
  mp.out = p.out;
  mp.lse = p.lse;
  mp.rows = rows;
  mp.heads = s.heads;
  mp.d_c = s.d_c;
  mp.d_n = p.d_n;
  mp.d_v = p.d_v;
  if (!quant::mixed_uses_prefix(p)) {
    mla_decode_bf16(p.full, stream);
    mp.o_lat = p.full.out;
    mp.lse_lat = p.full.lse;
    prefix_merge_bf16(mp, stream);
    return;
  }
  const int splits = mixed_prefix_splits(p);
  const size_t need = quant::prefix_workspace_bytes(rows, s.heads, p.d_v, splits);
  if (!p.prefix_workspace || p.prefix_workspace_bytes < need)
    throw InputError("mixed decode params: prefix_workspace_bytes = " + std::to_string(p.prefix_workspace_bytes) +
                     " (need " + std::to_string(need) + " for " + std::to_string(splits) + " prefix splits)");
  // Workspace layout as quant::prefix_workspace_bytes counts it: LSEs (padded to 256 B), outputs.
  const size_t n = static_cast<size_t>(splits) * rows * s.heads;
  char* ws = static_cast<char*>(p.prefix_workspace);
  PrefixAttnParams ap;
  ap.q = p.q_naive;
  ap.k = p.prefix_k;
  ap.v = p.prefix_v;
  ap.part_lse = reinterpret_cast<float*>(ws);
  ap.part_o = reinterpret_cast<float*>(ws + (n * sizeof(float) + 255) / 256 * 256);
  ap.rows = rows;
  ap.heads = s.heads;
  ap.d_n = p.d_n;
  ap.d_r = s.d_r;
  ap.d_v = p.d_v;
  ap.prefix_len = p.prefix_len;
  ap.splits = splits;
  ap.scale = s.scale;
  prefix_attn_bf16(ap, stream);
  mla_decode_bf16(s, stream);
  mp.o_lat = s.out;
  mp.lse_lat = s.lse;
  mp.part_o = ap.part_o;
  mp.part_lse = ap.part_lse;
  mp.splits = splits;
  prefix_merge_bf16(mp, stream);
}

}  // namespace mla::kernels
