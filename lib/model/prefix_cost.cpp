#include "model/prefix_cost.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace mla::model {

PrefixShape kimi_k2_shape() { return PrefixShape{}; }

PrefixShape deepseek_v3_shape() {
  PrefixShape s;
  s.heads = 128;
  return s;
}

namespace {
void check_shape(const PrefixShape& s) {
  auto bad = [](const std::string& w) { throw InputError("prefix cost: " + w); };
  if (s.heads < 1) bad("heads = " + std::to_string(s.heads) + " (must be >= 1)");
  if (s.d_c < 1 || s.d_r < 0 || s.d_n < 1 || s.d_v < 1)
    bad("d_c, d_r, d_n, d_v = " + std::to_string(s.d_c) + ", " + std::to_string(s.d_r) + ", " +
        std::to_string(s.d_n) + ", " + std::to_string(s.d_v) + " (must be positive)");
  if (s.s_q < 1) bad("s_q = " + std::to_string(s.s_q) + " (must be >= 1)");
  if (s.elem_bytes < 1) bad("elem_bytes = " + std::to_string(s.elem_bytes) + " (must be >= 1)");
}
}  // namespace

PrefixCost prefix_cost(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n) {
  check_shape(s);
  if (batch < 1) throw InputError("prefix cost: batch = " + std::to_string(batch) + " (must be >= 1)");
  if (L_s < 0 || L_n < 0)
    throw InputError("prefix cost: L_s = " + std::to_string(L_s) + ", L_n = " + std::to_string(L_n) + " (must be >= 0)");
  const double B = double(batch), Sq = double(s.s_q), H = double(s.heads), E = double(s.elem_bytes);
  const double naive_w = double(s.d_qk() + s.d_v);   // per head and token: K and V widths
  const double absorb_w = double(2 * s.d_c + s.d_r);  // per head and token: Q.[x|k_pe] and P.x
  const double latent_w = double(s.d_c + s.d_r);
  PrefixCost c;
  c.naive_shared = {B * Sq * L_s * H * naive_w, L_s * H * naive_w * E};
  c.naive_own = {B * Sq * L_n * H * naive_w, B * L_n * H * naive_w * E};
  c.absorb_shared = {B * Sq * L_s * H * absorb_w, L_s * latent_w * E};
  c.absorb_own = {B * Sq * L_n * H * absorb_w, B * L_n * latent_w * E};
  return c;
}

double roofline_seconds(const FormCost& c, double macs_per_s, double bytes_per_s) {
  return std::max(c.macs / macs_per_s, c.bytes / bytes_per_s);
}

double batch_threshold(const PrefixShape& s, double gemm_flops, double bytes_per_s) {
  check_shape(s);
  if (!(gemm_flops > 0) || !(bytes_per_s > 0))
    throw InputError("prefix cost: GEMM rate and bandwidth must be > 0 (got " + std::to_string(gemm_flops) +
                     " FLOP/s, " + std::to_string(bytes_per_s) + " B/s)");
  const double macs_per_s = gemm_flops / 2.0;
  const double elems_per_s = bytes_per_s / double(s.elem_bytes);
  return double(s.d_qk() + s.d_v) / (double(s.s_q) * double(2 * s.d_c + s.d_r)) * macs_per_s / elems_per_s;
}

PrefixMemory prefix_memory(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n) {
  check_shape(s);
  PrefixMemory m;
  const double E = double(s.elem_bytes);
  m.decompressed_bytes = double(L_s) * s.heads * (s.d_qk() + s.d_v) * E;
  m.latent_prefix_bytes = double(L_s) * (s.d_c + s.d_r) * E;
  m.latent_cache_bytes = (double(L_s) + double(batch) * L_n) * (s.d_c + s.d_r) * E;
  m.overhead_fraction = m.latent_cache_bytes > 0 ? m.decompressed_bytes / m.latent_cache_bytes : 0.0;
  return m;
}

std::string prefix_cost_report(const PrefixShape& s, int64_t batch, int64_t L_s, int64_t L_n, double gemm_flops,
                               double bytes_per_s, bool json) {
  const PrefixCost c = prefix_cost(s, batch, L_s, L_n);
  const PrefixMemory mem = prefix_memory(s, batch, L_s, L_n);
  const double b_theta = batch_threshold(s, gemm_flops, bytes_per_s);
  const double T = gemm_flops / 2.0, M = bytes_per_s;
  const FormCost forms[3] = {c.naive(), c.absorb(), c.mixed()};
  const char* names[3] = {"naive", "absorb", "mixed"};
  double t[3];
  for (int i = 0; i < 3; ++i) t[i] = roofline_seconds(forms[i], T, M);
  // What the mixed path runs at this batch: below B_theta it falls back to absorb only.
  const bool use_mixed = double(batch) >= b_theta;
  if (json) {
    nlohmann::json j;
    j["shape"] = {{"heads", s.heads}, {"d_c", s.d_c}, {"d_r", s.d_r}, {"d_n", s.d_n}, {"d_v", s.d_v},
                  {"s_q", s.s_q}, {"elem_bytes", s.elem_bytes}};
    j["batch"] = batch;
    j["prefix"] = L_s;
    j["own_tokens"] = L_n;
    j["gemm_tflops"] = gemm_flops / 1e12;
    j["bandwidth_gbs"] = bytes_per_s / 1e9;
    auto part = [](const FormCost& f) { return nlohmann::json{{"macs", f.macs}, {"bytes", f.bytes}}; };
    j["naive"] = {{"shared", part(c.naive_shared)}, {"own", part(c.naive_own)}, {"total", part(forms[0])},
                  {"roofline_us", t[0] * 1e6}};
    j["absorb"] = {{"shared", part(c.absorb_shared)}, {"own", part(c.absorb_own)}, {"total", part(forms[1])},
                   {"roofline_us", t[1] * 1e6}};
    j["mixed"] = {{"shared", part(c.naive_shared)}, {"own", part(c.absorb_own)}, {"total", part(forms[2])},
                  {"roofline_us", t[2] * 1e6}};
    j["b_theta"] = b_theta;
    j["mixed_path_used"] = use_mixed;
    j["model_speedup_mixed_vs_absorb"] = t[1] / (use_mixed ? t[2] : t[1]);
    j["memory"] = {{"decompressed_prefix_bytes", mem.decompressed_bytes},
                   {"latent_prefix_bytes", mem.latent_prefix_bytes},
                   {"latent_cache_bytes", mem.latent_cache_bytes},
                   {"overhead_fraction", mem.overhead_fraction}};
    return j.dump(2);
  }
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "shared-prefix cost model (TyphoonMLA Table 1), per layer and decode step\n"
                "  shape: H=%lld d_c=%lld d_r=%lld d_n=%lld d_v=%lld s_q=%lld, %lld-byte elements\n"
                "  batch B=%lld, shared prefix L_s=%lld, own tokens L_n=%lld per request\n"
                "  device: %.1f TFLOP/s (dense BF16), %.0f GB/s\n\n",
                (long long)s.heads, (long long)s.d_c, (long long)s.d_r, (long long)s.d_n, (long long)s.d_v,
                (long long)s.s_q, (long long)s.elem_bytes, (long long)batch, (long long)L_s, (long long)L_n,
                gemm_flops / 1e12, bytes_per_s / 1e9);
  o << buf;
  o << "  form     shared GMAC   own GMAC  shared GB   own GB    roofline us\n";
  const FormCost sh[3] = {c.naive_shared, c.absorb_shared, c.naive_shared};
  const FormCost ow[3] = {c.naive_own, c.absorb_own, c.absorb_own};
  for (int i = 0; i < 3; ++i) {
    std::snprintf(buf, sizeof buf, "  %-7s %11.2f %10.2f %10.3f %8.3f %14.1f\n", names[i], sh[i].macs / 1e9,
                  ow[i].macs / 1e9, sh[i].bytes / 1e9, ow[i].bytes / 1e9, t[i] * 1e6);
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\n  B_theta = (D_qk + D_v) / (S_q (2 d_c + d_r)) * T / M = %.1f  -> at B=%lld: %s (model speedup "
                "%.2fx over absorb only)\n"
                "  decompressed prefix: %.1f MB (latent prefix %.1f MB); latent cache of the batch %.1f MB: "
                "+%.1f%% HBM\n",
                b_theta, (long long)batch, use_mixed ? "mixed (naive prefix + absorbed suffixes)" : "absorb only",
                t[1] / (use_mixed ? t[2] : t[1]), mem.decompressed_bytes / 1e6, mem.latent_prefix_bytes / 1e6,
                mem.latent_cache_bytes / 1e6, 100.0 * mem.overhead_fraction);
  o << buf;
  return o.str();
}

}  // namespace mla::model
