#pragma once
// Cost model of shared-prefix decode (TyphoonMLA, SPEC sections 4 and 6): multiply-accumulates
// and HBM bytes of the naive, absorbed and mixed forms for one decode step of B requests that
// share a prefix of L_s tokens and each own L_n further tokens (the paper's Table 1), the batch
// threshold B_theta above which the mixed form wins, and the HBM the decompressed prefix costs.
//
// Conventions: counts are per layer; bytes use the element size given (2 for BF16); "words" in
// the paper are elements. Table 1 counts attention only: no projections, no W_UK/W_UV
// absorption GEMMs, no partial-output traffic. B_theta (paper eq. 1) equates the time to read
// the decompressed prefix once with the time the absorbed kernel spends on its MACs:
//   B_theta = (D_qk + D_v) / (S_q (2 d_c + d_r)) * T / M
// with T in MAC/s (= FLOP/s / 2) and M in elements/s (= bytes/s / element bytes), i.e. the
// formula with consistent units; T and M are measured (mla-bench) or given.
#include <cstdint>
#include <string>

namespace mla::model {

struct PrefixShape {
  int64_t heads = 64;      // H
  int64_t d_c = 512;       // kv_lora_rank (D_l in the paper)
  int64_t d_r = 64;        // rope head dim
  int64_t d_n = 128;       // nope head dim
  int64_t d_v = 128;       // value head dim
  int64_t s_q = 1;         // query tokens per request per step (2 with MTP)
  int64_t elem_bytes = 2;  // BF16
  int64_t d_qk() const { return d_n + d_r; }
};

// The two shapes of the benchmarks.
PrefixShape kimi_k2_shape();      // H = 64
PrefixShape deepseek_v3_shape();  // H = 128

struct FormCost {
  double macs = 0;   // multiply-accumulates
  double bytes = 0;  // HBM bytes read (KV caches only, as Table 1)
};

struct PrefixCost {
  // Shared part (L_s tokens) and non-shared part (B * L_n tokens) of each form.
  FormCost naive_shared, naive_own, absorb_shared, absorb_own;
  FormCost naive() const { return {naive_shared.macs + naive_own.macs, naive_shared.bytes + naive_own.bytes}; }
  FormCost absorb() const { return {absorb_shared.macs + absorb_own.macs, absorb_shared.bytes + absorb_own.bytes}; }
  // TyphoonMLA: naive on the shared prefix, absorbed on each request's own tokens.
  FormCost mixed() const { return {naive_shared.macs + absorb_own.macs, naive_shared.bytes + absorb_own.bytes}; }
};

// Table 1 for B requests, prefix L_s, own tokens L_n per request.
PrefixCost prefix_cost(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n);

// Roofline time (seconds) of a form: max(macs / T, bytes / M), T in MAC/s, M in bytes/s.
double roofline_seconds(const FormCost& c, double macs_per_s, double bytes_per_s);

// B_theta of eq. 1 (a real number; the fallback uses absorb-only while B < B_theta).
// gemm_flops: dense BF16 FLOP/s (2 per MAC); bytes_per_s: HBM bandwidth.
double batch_threshold(const PrefixShape& s, double gemm_flops, double bytes_per_s);

// HBM of the decompressed prefix (K [L_s, H, d_qk] + V [L_s, H, d_v]) and of its latent rows
// ([L_s, d_c + d_r]), and the overhead relative to the whole latent cache of B requests with
// L_s + L_n tokens each when the prefix is stored once (paged, shared) in latent form too.
struct PrefixMemory {
  double decompressed_bytes = 0;
  double latent_prefix_bytes = 0;
  double latent_cache_bytes = 0;  // shared prefix once + B * L_n own rows
  double overhead_fraction = 0;   // decompressed / latent_cache
};
PrefixMemory prefix_memory(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n);

// A human table and a JSON text of everything above for mla-inspect --prefix.
std::string prefix_cost_report(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n, double gemm_flops,
                               double bytes_per_s, bool json);

}  // namespace mla::model
