#include "verify/multi_device_runner.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/attention_reference.hpp"
#include "verify/decode_backend.hpp"
#include "verify/multi_device_comm.hpp"

#if MLA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace mla::verify {
namespace {

// Page-table entries past a sequence's pages (as in the sequential path).
constexpr int32_t kPageSentinel = 1 << 30;

void select_device(const std::string& device, int index) {
  if (device != "cuda") return;
#if MLA_HAVE_CUDA
  const cudaError_t e = cudaSetDevice(index);
  if (e != cudaSuccess) throw Error("rank on CUDA device " + std::to_string(index) + ": " + cudaGetErrorString(e));
#else
  (void)index;
  throw Error("--device cuda: this build has no CUDA");
#endif
}

int visible_cuda_devices() {
#if MLA_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

// What one rank thread needs to run one layer.
struct RankJob {
  int64_t layer;
  const model::MlaConfig& cfg;  // original: global d_c, eps
  const io::RankAttention& rank_attn;
  const std::vector<MatrixR>& h;
  int64_t P, T;
  int page_size;
  uint64_t seed;
  int rank, tp;
  int gpu;  // CUDA device of this rank
  const std::string& device;
  Communicator& comm;
  std::vector<ReductionRecord>& log;
  std::vector<MatrixR>* out;  // rank 0 only
  const BackendFactory* make_backend = nullptr;  // the cache format's backend (null or empty: BF16)
};

// The rank's backend for this layer, on the rank's device (selected before).
std::unique_ptr<DecodeBackend> rank_backend(const RankJob& j) {
  std::unique_ptr<DecodeBackend> b = j.make_backend != nullptr && *j.make_backend
                                         ? (*j.make_backend)()
                                         : (j.device == "cuda" ? make_cuda_backend() : make_cpu_backend());
  b->begin_layer(j.layer);
  return b;
}

void reduce(RankJob& j, const char* tag, std::vector<double>& v) {
  j.log.push_back({j.layer, tag, v.size()});
  j.comm.all_reduce_sum(v.data(), v.size());
}

// This rank's share of one request's attention output: its latent output expanded and projected
// by its o_proj slice, accumulated into a zero row (as the sequential path does before summing
// ranks), written to dst[0, D).
void rank_output_row(const model::MlaConfig& cfg_r, const model::AttentionWeights& w_r, const MatrixR& o_lat,
                     int64_t D, double* dst) {
  const MatrixR o = model::expand_latent_output(cfg_r, w_r, o_lat);
  Eigen::RowVectorXd y = Eigen::RowVectorXd::Zero(D);
  y += o * w_r.o_proj.transpose();
  std::copy(y.data(), y.data() + D, dst);
}

// Sums the ranks' rows of decode step t (B requests of D values) and, on rank 0, stores them as
// row t - P of each request's output.
void reduce_step_output(RankJob& j, std::vector<double>& partial, int64_t B, int64_t D, int64_t t) {
  reduce(j, "o_proj", partial);
  if (j.out)
    for (int64_t b = 0; b < B; ++b)
      (*j.out)[b].row(t - j.P) = Eigen::Map<const Eigen::RowVectorXd>(partial.data() + b * D, D);
}

void run_rank(RankJob& j) {
  select_device(j.device, j.gpu);
  std::unique_ptr<DecodeBackend> backend = rank_backend(j);
  const auto& cfg_r = j.rank_attn.config;
  const auto& w_r = j.rank_attn.weights;
  const int g = j.rank_attn.tpla.at("g").get<int>();
  const bool exact_norm = j.rank_attn.tpla.at("norm").get<std::string>() == "exact";
  const double ranks_per_group = static_cast<double>(j.tp / g);
  const int64_t B = static_cast<int64_t>(j.h.size());
  const int64_t P = j.P, T = j.T, n_tok = P + T;
  const int64_t D = j.cfg.hidden_size;
  const int64_t H_r = cfg_r.num_heads, d_c = cfg_r.kv_lora_rank, d_r = cfg_r.qk_rope_head_dim, dim = d_c + d_r;
  const double d_c_global = static_cast<double>(j.cfg.kv_lora_rank);
  const double eps = j.cfg.rms_norm_eps;
  const double scale = cfg_r.softmax_scale();

  // The rank's latent slice, RoPE key, absorbed queries (mu folded), and its slice's sums of squares.
  std::vector<MatrixR> c(B), x_local(B), k_pe(B), q_lat(B), q_pe(B);
  std::vector<VectorD> sumsq(B);
  for (int64_t b = 0; b < B; ++b) {
    model::LatentCache lc = model::compute_latent(cfg_r, w_r, j.h[b], 0, &c[b]);
    x_local[b] = std::move(lc.x);
    k_pe[b] = std::move(lc.k_pe);
    model::QueryParts q = model::project_queries(cfg_r, w_r, j.h[b], 0);
    q_lat[b] = model::absorb_queries(cfg_r, w_r, q.q_nope);
    q_pe[b] = std::move(q.q_pe);
    sumsq[b] = c[b].rowwise().squaredNorm();
  }
  // Global rms of tokens [t0, t0 + n) from the all-reduced sums of squares.
  auto global_rms = [&](int64_t t0, int64_t n) {
    std::vector<double> v(size_t(B) * n);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i) v[b * n + i] = sumsq[b](t0 + i) / ranks_per_group;
    reduce(j, "norm_sumsq", v);
    for (double& s : v) s = std::sqrt(s / d_c_global + eps);
    return v;
  };

  // Cache: paged bf16, random page placement as the sequential path, sentinel past the end.
  const int64_t pages_per_seq = (n_tok + j.page_size - 1) / j.page_size;
  CacheShape shape;
  shape.batch = static_cast<int>(B);
  shape.page_size = j.page_size;
  shape.max_pages = static_cast<int>(pages_per_seq + 1);
  shape.num_pages = static_cast<int>(B * pages_per_seq + 3);
  shape.dim = static_cast<int>(dim);
  std::vector<int32_t> perm(shape.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(j.seed + 7919 * static_cast<uint64_t>(j.rank));
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(size_t(B) * shape.max_pages, kPageSentinel);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < pages_per_seq; ++p) table[b * shape.max_pages + p] = perm[b * pages_per_seq + p];
  const int cache = backend->create_cache(shape, table);

  // Packs cache rows [t0, t0 + n) of every sequence; row(b, t) gives the latent row.
  auto pack = [&](int64_t t0, int64_t n, auto&& row) {
    std::vector<uint16_t> kv(size_t(B) * n * dim);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t* dst = kv.data() + (b * n + i) * dim;
        const Eigen::RowVectorXd x = row(b, i);
        for (int64_t jj = 0; jj < d_c; ++jj) dst[jj] = double_to_bf16(x(jj));
        for (int64_t jj = 0; jj < d_r; ++jj) dst[d_c + jj] = double_to_bf16(k_pe[b](t0 + i, jj));
      }
    return kv;
  };

  // ---- prefill (PD separation): the exact global x, this rank's slice ----
  if (P > 0) {
    const std::vector<double> rms = global_rms(0, P);
    backend->append(cache, pack(0, P, [&](int64_t b, int64_t i) -> Eigen::RowVectorXd { return c[b].row(i) / rms[b * P + i]; }),
                    static_cast<int>(P), std::vector<int32_t>(B, 0));
  }

  // ---- decode, one token at a time ----
  if (j.out) j.out->assign(B, MatrixR::Zero(T, D));
  std::vector<uint16_t> q(size_t(B) * H_r * dim), o_bits;
  std::vector<float> lse;
  std::vector<double> partial(size_t(B) * D);
  for (int64_t t = P; t < n_tok; ++t) {
    std::vector<double> rms;
    if (exact_norm) rms = global_rms(t, 1);
    backend->append(cache,
                    pack(t, 1,
                         [&](int64_t b, int64_t) -> Eigen::RowVectorXd {
                           if (exact_norm) return (c[b].row(t) / rms[b]).cwiseProduct(w_r.kv_a_layernorm.transpose());
                           return x_local[b].row(t);
                         }),
                    1, std::vector<int32_t>(B, static_cast<int32_t>(t)));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hh = 0; hh < H_r; ++hh) {
        uint16_t* row = q.data() + (b * H_r + hh) * dim;
        for (int64_t jj = 0; jj < d_c; ++jj) row[jj] = double_to_bf16(q_lat[b](t, hh * d_c + jj));
        for (int64_t jj = 0; jj < d_r; ++jj) row[d_c + jj] = double_to_bf16(q_pe[b](t, hh * d_r + jj));
      }
    backend->decode(cache, q, static_cast<int>(H_r), static_cast<int>(d_c), static_cast<int>(d_r),
                    std::vector<int32_t>(B, static_cast<int32_t>(t + 1)), static_cast<float>(scale), o_bits, lse);
    for (int64_t b = 0; b < B; ++b) {
      MatrixR o_lat(1, H_r * d_c);
      for (int64_t jj = 0; jj < H_r * d_c; ++jj) o_lat(0, jj) = bf16_to_float(o_bits[b * H_r * d_c + jj]);
      rank_output_row(cfg_r, w_r, o_lat, D, partial.data() + b * D);
    }
    reduce_step_output(j, partial, B, D, t);
  }
}

// DCP: rank r holds tokens t with t mod N == r (full latent), decodes every head over them,
// and the ranks merge by log-sum-exp (see decode_layer_dcp).
void run_rank_dcp(RankJob& j) {
  select_device(j.device, j.gpu);
  std::unique_ptr<DecodeBackend> backend = rank_backend(j);  // BF16: decode_layer_dcp passes no factory
  const auto& cfg_r = j.rank_attn.config;
  const auto& w_r = j.rank_attn.weights;
  const int N = j.tp, r = j.rank;
  const int64_t B = static_cast<int64_t>(j.h.size());
  const int64_t P = j.P, T = j.T, n_tok = P + T;
  const int64_t D = j.cfg.hidden_size;
  const int64_t H = cfg_r.num_heads, d_c = cfg_r.kv_lora_rank, d_r = cfg_r.qk_rope_head_dim, dim = d_c + d_r;
  const double scale = cfg_r.softmax_scale();
  // Tokens of [0, t] this rank holds.
  auto local_count = [&](int64_t t) { return t < r ? int64_t(0) : (t - r) / N + 1; };

  std::vector<MatrixR> x(B), k_pe(B), q_lat(B), q_pe(B);
  for (int64_t b = 0; b < B; ++b) {
    model::LatentCache lc = model::compute_latent(cfg_r, w_r, j.h[b], 0);
    x[b] = std::move(lc.x);  // the full-width normalised latent (exact: no slicing)
    k_pe[b] = std::move(lc.k_pe);
    model::QueryParts q = model::project_queries(cfg_r, w_r, j.h[b], 0);
    q_lat[b] = model::absorb_queries(cfg_r, w_r, q.q_nope);
    q_pe[b] = std::move(q.q_pe);
  }

  const int64_t local_max = local_count(n_tok - 1);
  const int64_t pages_per_seq = std::max<int64_t>(1, (local_max + j.page_size - 1) / j.page_size);
  CacheShape shape;
  shape.batch = static_cast<int>(B);
  shape.page_size = j.page_size;
  shape.max_pages = static_cast<int>(pages_per_seq + 1);
  shape.num_pages = static_cast<int>(B * pages_per_seq + 3);
  shape.dim = static_cast<int>(dim);
  std::vector<int32_t> perm(shape.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(j.seed + 7919 * static_cast<uint64_t>(r));
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(size_t(B) * shape.max_pages, kPageSentinel);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < pages_per_seq; ++p) table[b * shape.max_pages + p] = perm[b * pages_per_seq + p];
  const int cache = backend->create_cache(shape, table);
  // Cache rows of global tokens `tokens` (the same for every sequence).
  auto pack = [&](const std::vector<int64_t>& tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<uint16_t> kv(size_t(B) * n * dim);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t* dst = kv.data() + (b * n + i) * dim;
        for (int64_t jj = 0; jj < d_c; ++jj) dst[jj] = double_to_bf16(x[b](tokens[i], jj));
        for (int64_t jj = 0; jj < d_r; ++jj) dst[d_c + jj] = double_to_bf16(k_pe[b](tokens[i], jj));
      }
    return kv;
  };
  std::vector<int64_t> prompt;
  for (int64_t t = r; t < P; t += N) prompt.push_back(t);
  if (!prompt.empty())
    backend->append(cache, pack(prompt), static_cast<int>(prompt.size()), std::vector<int32_t>(B, 0));

  if (j.out) j.out->assign(B, MatrixR::Zero(T, D));
  std::vector<uint16_t> q(size_t(B) * H * dim), o_bits;
  std::vector<float> lse;
  std::vector<double> lse_all(size_t(N) * B * H), partial(size_t(B) * D);
  for (int64_t t = P; t < n_tok; ++t) {
    if (t % N == r)
      backend->append(cache, pack({t}), 1, std::vector<int32_t>(B, static_cast<int32_t>(t / N)));
    const int64_t n_local = local_count(t);
    if (n_local > 0) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t hh = 0; hh < H; ++hh) {
          uint16_t* row = q.data() + (b * H + hh) * dim;
          for (int64_t jj = 0; jj < d_c; ++jj) row[jj] = double_to_bf16(q_lat[b](t, hh * d_c + jj));
          for (int64_t jj = 0; jj < d_r; ++jj) row[d_c + jj] = double_to_bf16(q_pe[b](t, hh * d_r + jj));
        }
      backend->decode(cache, q, static_cast<int>(H), static_cast<int>(d_c), static_cast<int>(d_r),
                      std::vector<int32_t>(B, static_cast<int32_t>(n_local)), static_cast<float>(scale), o_bits, lse);
    } else {  // no token of [0, t] here yet: an empty partial
      o_bits.assign(size_t(B) * H * d_c, 0);
      lse.assign(size_t(B) * H, -std::numeric_limits<float>::infinity());
    }
    // Gather every rank's LSE (rows of zeros elsewhere, so the sum is the gather).
    std::fill(lse_all.begin(), lse_all.end(), 0.0);
    for (int64_t i = 0; i < B * H; ++i) lse_all[size_t(r) * B * H + i] = lse[i];
    reduce(j, "dcp_lse", lse_all);
    for (int64_t b = 0; b < B; ++b) {
      MatrixR o_lat(1, H * d_c);
      for (int64_t hh = 0; hh < H; ++hh) {
        const size_t i = size_t(b) * H + hh;
        double m = -std::numeric_limits<double>::infinity();
        for (int k = 0; k < N; ++k) m = std::max(m, lse_all[size_t(k) * B * H + i]);
        double sum = 0.0;
        for (int k = 0; k < N; ++k) sum += std::exp(lse_all[size_t(k) * B * H + i] - m);
        const double w = std::isinf(lse[i]) ? 0.0 : std::exp(double(lse[i]) - m) / sum;
        for (int64_t jj = 0; jj < d_c; ++jj) o_lat(0, hh * d_c + jj) = w * bf16_to_float(o_bits[i * d_c + jj]);
      }
      rank_output_row(cfg_r, w_r, o_lat, D, partial.data() + b * D);
    }
    reduce_step_output(j, partial, B, D, t);
  }
}

}  // namespace

MultiDeviceRunner::MultiDeviceRunner(const std::string& device, int devices, const std::string& comm)
    : device_(device), devices_(devices) {
  if (devices < 1) throw InputError("--devices must be >= 1, got " + std::to_string(devices));
  if (comm != "auto" && comm != "nccl" && comm != "threads")
    throw InputError("--comm must be auto, nccl or threads, got '" + comm + "'");
  if (device == "cpu") {
    if (comm == "nccl") throw InputError("--comm nccl needs --device cuda");
    comms_ = make_thread_communicators(devices);
  } else if (device == "cuda") {
    visible_gpus_ = visible_cuda_devices();
    if (visible_gpus_ < 1) throw InputError("--device cuda: no CUDA device is present");
    if (comm == "threads") {
      comms_ = make_thread_communicators(devices);
    } else {
      if (visible_gpus_ < devices)
        throw InputError("--devices " + std::to_string(devices) + ": " + std::to_string(visible_gpus_) +
                         " CUDA device(s) visible (each rank needs its own GPU; --comm threads shares them)");
      std::vector<int> ids(devices);
      std::iota(ids.begin(), ids.end(), 0);
      comms_ = make_nccl_communicators(ids);
      nccl_ = true;
    }
  } else {
    throw InputError("--device must be cpu or cuda, got '" + device + "'");
  }
  reductions_.resize(devices);
}

MultiDeviceRunner::~MultiDeviceRunner() = default;

std::string MultiDeviceRunner::name() const {
  const std::string n = std::to_string(devices_);
  if (device_ == "cpu") return n + " CPU threads (twin), in-process all-reduce";
  if (nccl_) return n + " CUDA devices, NCCL all-reduce";
  return std::to_string(std::min(devices_, visible_gpus_)) + " CUDA device(s) (" + n +
         " rank threads), in-process all-reduce";
}

template <class F>
void MultiDeviceRunner::on_every_rank(F&& fn) {
  const int n = devices_;
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
        for (auto& c : comms_) c->abort();  // the other ranks must not wait for this one
      }
    });
  }
  for (auto& t : threads) t.join();
  // Report the first rank that failed on its own (the others fail with "aborted").
  for (int r = 0; r < n; ++r)
    if (errors[r]) {
      try {
        std::rethrow_exception(errors[r]);
      } catch (const std::exception& e) {
        if (std::string(e.what()).find("aborted") != std::string::npos) continue;
        throw Error("rank " + std::to_string(r) + " (" + device_ + " device " + std::to_string(gpu_of(r)) + "): " + e.what());
      }
    }
  for (int r = 0; r < n; ++r)
    if (errors[r]) std::rethrow_exception(errors[r]);
}

std::vector<MatrixR> MultiDeviceRunner::decode_layer(int64_t layer, const model::MlaConfig& cfg,
                                                     const std::vector<io::RankAttention>& ranks,
                                                     const std::vector<MatrixR>& h, int64_t P, int64_t T, int page_size,
                                                     uint64_t seed) {
  const int tp = static_cast<int>(ranks.size());
  if (tp != devices_)
    throw InputError("--devices " + std::to_string(devices_) + ": the converted checkpoint has " + std::to_string(tp) +
                     " ranks (one rank per device: pass --devices " + std::to_string(tp) + ")");
  placement_.clear();
  for (int r = 0; r < tp; ++r) {
    RankPlacement p;
    p.rank = r;
    p.device = gpu_of(r);
    p.group = ranks[r].tpla.at("group").get<int>();
    p.heads = ranks[r].config.num_heads;
    p.latent_width = ranks[r].config.kv_lora_rank;
    placement_.push_back(p);
  }
  std::vector<MatrixR> out;
  on_every_rank([&](int r) {
    RankJob job{layer, cfg, ranks[r], h, P, T, page_size, seed, r, tp, gpu_of(r), device_, *comms_[r], reductions_[r],
                r == 0 ? &out : nullptr, &make_backend_};
    run_rank(job);
  });
  return out;
}

std::vector<MatrixR> MultiDeviceRunner::decode_layer_dcp(int64_t layer, const model::MlaConfig& cfg,
                                                         const io::RankAttention& full,
                                                         const std::vector<MatrixR>& h, int64_t P, int64_t T,
                                                         int page_size, uint64_t seed) {
  if (full.tpla.contains("tp") && full.tpla.at("tp").get<int>() != 1)
    throw InputError("--dcp: needs a tp = 1 conversion (every rank holds every head and the whole latent); this one has tp " +
                     std::to_string(full.tpla.at("tp").get<int>()));
  placement_.clear();
  for (int r = 0; r < devices_; ++r) {
    RankPlacement p;
    p.rank = r;
    p.device = gpu_of(r);
    p.group = 0;
    p.heads = full.config.num_heads;
    p.latent_width = full.config.kv_lora_rank;
    placement_.push_back(p);
  }
  std::vector<MatrixR> out;
  on_every_rank([&](int r) {
    RankJob job{layer, cfg, full, h, P, T, page_size, seed, r, devices_, gpu_of(r), device_, *comms_[r], reductions_[r],
                r == 0 ? &out : nullptr};
    run_rank_dcp(job);
  });
  return out;
}

}  // namespace mla::verify
