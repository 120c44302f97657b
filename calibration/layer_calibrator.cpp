#include "calibration/layer_calibrator.hpp"

#include <cblas.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "calibration/qk_basis.hpp"
#include "core/error.hpp"
#include "io/capture.hpp"
#include "quant/fp8_kv.hpp"
#include "model/rmsnorm.hpp"
#include "model/rope.hpp"
#include "quant/hadamard.hpp"

namespace mla::calib {

// Evenly spread picks of k out of n indices (all when k >= n).
std::vector<int64_t> spread(int64_t n, int64_t k) {
  std::vector<int64_t> r;
  if (n <= 0) return r;
  k = std::min(k, n);
  for (int64_t i = 0; i < k; ++i) r.push_back(i * n / k);
  return r;
}

namespace {


// u = c / rms(c), rms with the model's epsilon as RMSNorm_kv computes it.
MatrixR normalise_rows(const MatrixR& c, double eps) {
  MatrixR u = c;
  for (Eigen::Index t = 0; t < c.rows(); ++t) {
    u.row(t) /= std::sqrt(c.row(t).squaredNorm() / static_cast<double>(c.cols()) + eps);
  }
  return u;
}

// u = c / rms(c) as float32 rows for the second moment: rms accumulated in float64 with 8
// independent partial sums (vectorisable), one multiply per element.
template <typename T, typename U>
void normalise_rows_f(const T* c, int64_t rows, int64_t d, double eps, std::vector<U>& u) {
  u.resize(static_cast<std::size_t>(rows * d));
  for (int64_t t = 0; t < rows; ++t) {
    const T* x = c + t * d;
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
      for (int j = 0; j < 8; ++j) a[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    double ss = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < d; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    U* o = u.data() + t * d;
    for (int64_t k = 0; k < d; ++k) o[k] = static_cast<U>(static_cast<double>(x[k]) * inv);
  }
}

// out = u * B (B column-major [d, d], an orthogonal basis) through BLAS dgemm.
void rotate_rows(const MatrixR& u, const Eigen::MatrixXd& B, MatrixR& out) {
  out.resize(u.rows(), B.cols());
  if (u.rows() == 0) return;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(u.rows()),
              static_cast<int>(B.cols()), static_cast<int>(u.cols()), 1.0, u.data(),
              static_cast<int>(u.cols()), B.data(), static_cast<int>(B.rows()), 0.0, out.data(),
              static_cast<int>(B.cols()));
}

// CPU seconds of the calling thread (per-phase profile in the log; the layer's BLAS runs on
// this thread when layers run in parallel).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}


struct SequenceData {
  MatrixR h;      // [T, D] when the capture holds h
  MatrixR c, x, k_pe;
};

SequenceData load_sequence(const io::CaptureReader& cap, const model::MlaConfig& cfg,
                           const model::AttentionWeights& w, int64_t layer, int64_t s) {
  SequenceData d;
  if (cap.info().has_hidden) {
    d.h = cap.read_hidden(layer, s);
    // model::compute_latent's steps with the projection through BLAS dgemm (the Eigen product
    // of the reference is ~4x slower at D = 2048): ckv = h W^T, x = RMSNorm(c), RoPE on k_pe.
    const int64_t T = d.h.rows(), D = cfg.hidden_size, dc = cfg.kv_lora_rank, dr = cfg.qk_rope_head_dim;
    MatrixR ckv(T, dc + dr);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(dc + dr),
                static_cast<int>(D), 1.0, d.h.data(), static_cast<int>(D), w.kv_a_proj_with_mqa.data(),
                static_cast<int>(D), 0.0, ckv.data(), static_cast<int>(dc + dr));
    d.c = ckv.leftCols(dc);
    d.x = model::rmsnorm(d.c, w.kv_a_layernorm, cfg.rms_norm_eps);
    d.k_pe = ckv.rightCols(dr);
    const model::Rope rope(cfg);
    for (int64_t t = 0; t < T; ++t) rope.apply(&d.k_pe(t, 0), t);
  } else {
    cap.read_latent(layer, s, d.c, d.k_pe);
    d.x = normalise_rows(d.c, cfg.rms_norm_eps) * w.kv_a_layernorm.asDiagonal();
  }
  return d;
}

// Accumulators of pass 2 for one basis.
struct PairAccum {
  std::map<int, std::vector<FitSums>> fit, hold;          // g -> per slice
  std::map<int, std::vector<FitSums>> fit_head;           // g -> [H*g], head-major
  std::map<int, std::vector<double>> norm_err, norm_ref;  // g -> per slice (held-out)
};

// Widens stored rows to float64 into m (storage reused when the size is unchanged).
void widen_rows(const io::RawRows& r, MatrixR& m) {
  m.resize(r.rows, r.width);
  for (int64_t i = 0; i < r.rows * r.width; ++i) m.data()[i] = r.at(i);
}

// Per-worker-thread scratch reused from layer to layer: allocating these per layer or per
// sequence costs page faults (system time) and fragments the heap (peak RSS grew ~20 MB per
// layer before).
struct WorkerScratch {
  std::vector<float> cbuf, ubuf;         // pass 1: widened / normalised float32 rows
  std::vector<double> ubuf64;            // pass 1, --moment f64: float64 rows for dsyrk
  std::vector<double> hbuf64, cbuf64;    // pass 1, hidden captures: h and c = h W_a^T
  std::vector<std::vector<unsigned char>> kept;  // pass-2 sequences kept from pass 1
  MatrixR c, u;                          // pass 2 (latent): c and u = c / rms(c)
  std::map<std::string, MatrixR> ub;     // pass 2: u in each basis
};
WorkerScratch& worker_scratch() {
  thread_local WorkerScratch w;
  return w;
}

// One layer's calibration, pass by pass: independent of the other layers (seeds are per
// layer), so the layers run on worker threads and the result does not depend on their count.
class LayerCalibrator {
 public:
  LayerCalibrator(const CalibrationContext& cx, int64_t layer, model::AttentionWeights w,
                  std::vector<std::string>& warnings)
      : cfg(cx.cfg), opt(cx.opt), caps(cx.caps), n_hold(cx.n_hold), moment(cx.moment), run_bases(cx.run_bases), mix(cx.mix),
        signs(cx.signs), gmax(cx.gmax), scale(cx.scale), cx_(cx), dc(cx.cfg.kv_lora_rank), H(cx.cfg.num_heads),
        layer(layer), w(std::move(w)), warnings(warnings), scratch(worker_scratch()), m_fit(dc), m_hold(dc),
        r_fit(opt.reservoir_rows, dc, 1000 + layer), r_hold(opt.reservoir_rows, dc, 2000 + layer) {
    for (const auto& [name, m] : cx.fixed_bases) bases[name] = &m;  // fixed ones shared, not copied per layer
    L.layer = layer;
  }

  LayerCalibration run() {
    spdlog::info("layer {}: pass 1 (second moments, reservoirs)", layer);
    pass1();
    t_pass1 = clock::now();
    cpu_pass1 = thread_cpu_seconds();
    fit_bases();
    t_eig = clock::now();
    cpu_eig = thread_cpu_seconds();
    spdlog::info("layer {}: pass 2 (slicing errors, mu, FP8 study)", layer);
    pass2();
    fit_mu_from_pairs();
    fit_quantisers();
    log_profile();
    return std::move(L);
  }

 private:
  using clock = std::chrono::steady_clock;
  std::vector<std::pair<int64_t, bool>> pass2_picks(std::size_t ci) const { return cx_.pass2_picks(ci); }

  // Pass 1 over every sequence: the second moments of u = c / rms(c) (fitting and held-out
  // parts), reservoirs of rotated cache rows for the FP4 / Lloyd-Max fits, and the pass-2
  // sequences of latent captures kept in memory when they fit.
  void pass1() {
    std::vector<double> row(dc);
    auto& cbuf = scratch.cbuf;
    auto& ubuf = scratch.ubuf;
    auto& ubuf64 = scratch.ubuf64;
    auto& hbuf64 = scratch.hbuf64;
    auto& cbuf64 = scratch.cbuf64;
    // Second-moment update from the latent rows c [T, d_c] of one sequence (float32, bfloat16
    // or, for hidden captures, float64 rows).
    auto accumulate = [&](const void* c, char kind /* 'f' float, 'h' bf16, 'd' double */, int64_t T, SecondMoment& m) {
      if (moment == MomentMode::BF16 && kind != 'd') {
        m.collect_bf16(c, kind == 'h' ? io::StoredType::BF16 : io::StoredType::F32, T, cfg.rms_norm_eps);
        return;
      }
      const float* cf = static_cast<const float*>(c);
      if (kind == 'h') {  // widen bfloat16 rows
        cbuf.resize(static_cast<std::size_t>(T * dc));
        const auto* h = static_cast<const uint16_t*>(c);
        for (std::size_t i = 0; i < cbuf.size(); ++i) cbuf[i] = bf16_to_float(h[i]);
        cf = cbuf.data();
      } else if (kind == 'd' && moment == MomentMode::BF16) {
        cbuf.assign(static_cast<const double*>(c), static_cast<const double*>(c) + T * dc);
        m.collect_bf16(cbuf.data(), io::StoredType::F32, T, cfg.rms_norm_eps);
        return;
      }
      if (moment == MomentMode::F64) {
        if (kind == 'd') normalise_rows_f(static_cast<const double*>(c), T, dc, cfg.rms_norm_eps, ubuf64);
        else normalise_rows_f(cf, T, dc, cfg.rms_norm_eps, ubuf64);
        m.collect(Eigen::Map<const MatrixR>(ubuf64.data(), T, dc));
      } else {
        if (kind == 'd') normalise_rows_f(static_cast<const double*>(c), T, dc, cfg.rms_norm_eps, ubuf);
        else normalise_rows_f(cf, T, dc, cfg.rms_norm_eps, ubuf);
        m.collect_f(ubuf.data(), T);
      }
    };
    // Pass-2 sequences of latent captures are kept from pass 1 (as stored) when they fit in
    // 256 MiB, so pass 2 does not read them again.
    kept.assign(caps.size(), {});  // data in scratch.kept
    std::size_t kept_bytes = 0, kept_n = 0;
    Eigen::RowVectorXd xr(dc);
    for (std::size_t ci = 0; ci < caps.size(); ++ci) {
      const auto& info = caps[ci]->info();
      std::vector<int64_t> seqs(static_cast<std::size_t>(info.sequences));
      for (int64_t s = 0; s < info.sequences; ++s) seqs[static_cast<std::size_t>(s)] = s;
      std::vector<std::string> what = info.has_hidden ? std::vector<std::string>{"hidden"}
                                                      : std::vector<std::string>{"latent", "k_pe"};
      std::set<int64_t> keep;
      if (!info.has_hidden)
        for (const auto& [s, hold] : pass2_picks(ci)) keep.insert(s);
      io::SequencePrefetch reader(*caps[ci], layer, what, seqs, opt.prefetch_depth);
      for (int64_t s = 0; s < info.sequences; ++s) {
        const double c0 = thread_cpu_seconds();
        const std::vector<io::RawRows>& rows = reader.next();  // checked finite (latent and k_pe)
        const double c1 = thread_cpu_seconds();
        cpu_read += c1 - c0;
        const bool hold = s >= info.sequences - n_hold[ci];
        RowReservoir& r = hold ? r_hold : r_fit;
        const int64_t T = info.seq_len;
        if (info.has_hidden) {
          // c = h W_a^T (the latent rows of kv_a_proj_with_mqa) by BLAS dgemm; k_pe and RoPE
          // are not needed for pass 1. x rows (reservoir) by the reference's rmsnorm_row.
          const int64_t D = cfg.hidden_size;
          const io::RawRows& h = rows[0];
          hbuf64.resize(static_cast<std::size_t>(T * D));
          for (std::size_t i = 0; i < hbuf64.size(); ++i) hbuf64[i] = h.at(static_cast<int64_t>(i));
          cbuf64.resize(static_cast<std::size_t>(T * dc));
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(dc),
                      static_cast<int>(D), 1.0, hbuf64.data(), static_cast<int>(D),
                      w.kv_a_proj_with_mqa.data(), static_cast<int>(D), 0.0, cbuf64.data(), static_cast<int>(dc));
          accumulate(cbuf64.data(), 'd', T, hold ? m_hold : m_fit);
          for (int64_t t = 0; t < T; ++t) {
            const int64_t slot = r.offer_slot();
            if (slot < 0) continue;
            model::rmsnorm_row(cbuf64.data() + t * dc, w.kv_a_layernorm.data(), dc, cfg.rms_norm_eps, row.data());
            quant::block_hadamard_rotate_inplace(row.data(), dc, signs.data());
            r.store(slot, row.data());
          }
          cpu_moment += thread_cpu_seconds() - c1;
          continue;
        }
        // Latent capture: rows as stored (float32 or bfloat16); k_pe was read only to be
        // checked finite (pass 1 needs the latent alone).
        const io::RawRows& c = rows[0];
        if (keep.count(s) && kept_bytes + c.bytes() <= (std::size_t{256} << 20)) {
          if (scratch.kept.size() <= kept_n) scratch.kept.resize(kept_n + 1);
          auto& store = scratch.kept[kept_n++];
          store.assign(static_cast<const unsigned char*>(c.data), static_cast<const unsigned char*>(c.data) + c.bytes());
          io::RawRows e = c;
          e.data = store.data();
          kept[ci][s] = e;
          kept_bytes += c.bytes();
        }
        accumulate(c.data, c.type == io::StoredType::BF16 ? 'h' : 'f', T, hold ? m_hold : m_fit);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t slot = r.offer_slot();
          if (slot < 0) continue;
          // x = c / rms(c) * gamma in float64, the same operations as load_sequence's.
          for (int64_t i = 0; i < dc; ++i) xr(i) = c.at(t * dc + i);
          xr /= std::sqrt(xr.squaredNorm() / static_cast<double>(dc) + cfg.rms_norm_eps);
          for (int64_t i = 0; i < dc; ++i) row[i] = xr(i) * w.kv_a_layernorm(i);
          quant::block_hadamard_rotate_inplace(row.data(), dc, signs.data());
          r.store(slot, row.data());
        }
        cpu_moment += thread_cpu_seconds() - c1;
      }
      read_wait += reader.wait_seconds();
    }
  }

  // The bases from the fitting moment (PCA; qk from the queries of the pass-2 fit sequences)
  // and the energy fractions f_k of every basis and group count, fitting and held-out.
  void fit_bases() {
    L.tokens_fit = m_fit.count;
    L.tokens_holdout = m_hold.count;
    L.second_moment = m_fit.finalize();
    m_h = m_hold.count ? m_hold.finalize() : L.second_moment;
    const Eigen_ eig = symmetric_eigen(L.second_moment);
    L.eigenvalues = eig.values;
    L.pca_basis = eig.vectors;
    bases["pca"] = &L.pca_basis;
    // qk basis: the query moment M_q from every position and head of the pass-2 fit sequences
    // of captures holding h; without queries M_q = I and the basis is PCA's.
    {
      QueryMoment mq(dc);
      for (std::size_t ci = 0; ci < caps.size(); ++ci) {
        if (!caps[ci]->info().has_hidden) continue;
        for (const auto& [s, hold] : pass2_picks(ci)) {
          if (hold) continue;
          const MatrixR h = caps[ci]->read_hidden(layer, s);
          const model::QueryParts qp = model::project_queries(cfg, w, h, 0);
          const MatrixR ql = model::absorb_queries(cfg, w, qp.q_nope);  // [T, H*d_c]
          // One row per (position, head), gamma folded in: logit = q . u.
          mq.collect(Eigen::Map<const MatrixR>(ql.data(), ql.rows() * H, dc) * w.kv_a_layernorm.asDiagonal());
        }
      }
      L.qk_queries = mq.count;
      const MatrixR m_q = mq.count ? mq.finalize() : MatrixR(MatrixR::Identity(dc, dc));
      // Isotropic queries: PCA is J's maximum (docs/math.md), so no sweep is run.
      QkFit qk;
      if (mq.count) {
        qk = fit_qk_basis(L.second_moment, m_q, L.pca_basis, opt.groups);
      } else {
        qk.basis = L.pca_basis;
        qk.objective_start = qk.objective = qk_objective(L.second_moment, m_q, L.pca_basis, opt.groups);
      }
      L.qk_basis = qk.basis;
      L.qk_objective_pca = qk.objective_start;
      L.qk_objective = qk.objective;
      L.qk_rotations = qk.rotations;
      spdlog::info("layer {}: qk basis: J {:.6f} (PCA) -> {:.6f} in {} sweeps, {} rotations", layer,
                   qk.objective_start, qk.objective, qk.sweeps, qk.rotations);
      if (!mq.count)
        warnings.push_back("layer " + std::to_string(layer) + ": no capture holds the attention input h, so no "
                           "queries: the qk basis is the PCA basis (isotropic queries)");
    }
    bases["qk"] = &L.qk_basis;
    std::map<std::string, std::pair<VectorD, VectorD>> energies;  // diag(U^T M U): fit, held-out
    for (const auto& b : run_bases)
      energies[b] = {basis_energies(L.second_moment, *bases[b]), basis_energies(m_h, *bases[b])};
    const double tr_fit = L.second_moment.trace(), tr_hold = m_h.trace();
    for (int g : opt.groups) {
      for (const auto& b : run_bases) {
        SliceStats& st = L.slices[g][b];
        st.f = energy_fractions_from(energies[b].first, tr_fit, g);
        st.f_holdout = energy_fractions_from(energies[b].second, tr_hold, g);
        st.mu.assign(g, 1.0);
        st.r2.assign(g, 0.0);
        st.mu_guarded.assign(g, 0);
        st.norm_rel_error.assign(g, 0.0);
        st.logit_captured.assign(g, 0.0);
      }
    }
  }

  // Pass 2 over the picked sequences: held-out norm errors of the sliced RMSNorm, (full,
  // slice) logit pairs of sampled queries for mu, and the FP8 cache study.
  void pass2() {
    for (const auto& b : run_bases) {
      for (int g : opt.groups) {
        acc[b].fit[g].resize(g); acc[b].hold[g].resize(g); acc[b].fit_head[g].resize(H * g);
        acc[b].norm_err[g].assign(g, 0.0); acc[b].norm_ref[g].assign(g, 0.0);
      }
    }
    std::vector<MatrixR> w_uv(H);
    if (std::any_of(caps.begin(), caps.end(), [](const auto& c) { return c->info().has_hidden; }))
      for (int64_t h = 0; h < H; ++h) w_uv[h] = w.w_uv(cfg, h);
    auto& ub = scratch.ub;
    MatrixR fp8_scores, fp8_olat;  // FP8 study scratch: [H, keys] probabilities, [H, d_c]
    for (std::size_t ci = 0; ci < caps.size(); ++ci) {
      const auto& info = caps[ci]->info();
      for (const auto& [s, hold] : pass2_picks(ci)) {
        double p0 = thread_cpu_seconds();
        SequenceData d;
        if (info.has_hidden) {
          d = load_sequence(*caps[ci], cfg, w, layer, s);
          scratch.u = normalise_rows(d.c, cfg.rms_norm_eps);
        } else {  // latent: only c is used (norm errors); kept from pass 1 when it fitted
          const auto it = kept[ci].find(s);
          std::vector<unsigned char> buf;
          widen_rows(it != kept[ci].end() ? it->second : caps[ci]->read_raw(layer, s, "latent", buf), scratch.c);
          scratch.u = scratch.c;
          for (Eigen::Index t = 0; t < scratch.u.rows(); ++t)  // normalise_rows, in place
            scratch.u.row(t) /= std::sqrt(scratch.c.row(t).squaredNorm() / static_cast<double>(dc) + cfg.rms_norm_eps);
        }
        const MatrixR& u = scratch.u;
        double p1 = thread_cpu_seconds();
        cpu2_load += p1 - p0;
        const int64_t T = u.rows();
        ub["identity"] = u;
        // Hadamard basis: u U = (U^T u^T)^T, the O(d log d) fast transform per row.
        ub[mix] = u;
        for (int64_t t = 0; t < T; ++t)
          quant::block_hadamard_rotate_inplace(ub[mix].row(t).data(), static_cast<std::size_t>(dc), signs.data());
        rotate_rows(u, *bases["pca"], ub["pca"]);
        rotate_rows(u, *bases["qk"], ub["qk"]);
        if (hold) {
          const int64_t wm = dc / gmax;
          std::vector<double> sq_min(static_cast<std::size_t>(T * gmax));  // |slice|^2 of the gmax slices
          for (const auto& b : run_bases) {
            for (int64_t t = 0; t < T; ++t) {
              const double* x = ub[b].row(t).data();
              for (int j = 0; j < gmax; ++j) {
                double a = 0;
                for (int64_t i = j * wm; i < (j + 1) * wm; ++i) a += x[i] * x[i];
                sq_min[static_cast<std::size_t>(t * gmax + j)] = a;
              }
            }
            for (int g : opt.groups) {
              const int64_t wd = dc / g;
              const int per = gmax / g;
              const auto& f = L.slices[g][b].f;
              for (int k = 0; k < g; ++k) {
                const double gain = std::sqrt(std::max(0.0, g * f[k]));  // f_k ~ -1e-17 on empty slices
                double err = 0, ref = 0;
                for (int64_t t = 0; t < T; ++t) {
                  double sq = 0;
                  for (int j = k * per; j < (k + 1) * per; ++j) sq += sq_min[static_cast<std::size_t>(t * gmax + j)];
                  const double r = std::sqrt(sq / static_cast<double>(wd) + cfg.rms_norm_eps);
                  const double a = gain / r - 1.0;
                  err += a * a * sq;
                  ref += sq;
                }
                acc[b].norm_err[g][k] += err;
                acc[b].norm_ref[g][k] += ref;
              }
            }
          }
        }
        p0 = thread_cpu_seconds();
        cpu2_norm += p0 - p1;
        if (!info.has_hidden) continue;
        L.have_pairs = true;
        // Quantised caches of the whole sequence under each FP8 configuration.
        std::map<std::string, std::pair<MatrixR, MatrixR>> qcache;
        for (quant::Fp8Config c : quant::kAllFp8Configs) {
          auto& qc = qcache[std::string(quant::fp8_config_name(c))];
          quant::fake_quant_fp8_cache(c, d.x, d.k_pe, qc.first, qc.second);
        }
        p1 = thread_cpu_seconds();
        cpu2_quant += p1 - p0;
        for (int64_t t : spread(T, opt.queries_per_sequence)) {
          t = T - 1 - t;  // spread from the end: late queries see the most keys
          const model::QueryParts qp = model::project_queries(cfg, w, d.h.row(t), t);
          const MatrixR ql = model::absorb_queries(cfg, w, qp.q_nope);
          const MatrixR Q = Eigen::Map<const MatrixR>(ql.data(), H, dc);
          const MatrixR Qpe = Eigen::Map<const MatrixR>(qp.q_pe.data(), H, cfg.qk_rope_head_dim);
          const MatrixR Qg = Q * w.kv_a_layernorm.asDiagonal();  // logit = Qg . u
          for (const auto& b : run_bases) {
            const MatrixR Qb = Qg * *bases[b];
            const auto K = ub[b].topRows(t + 1);
            const int64_t wm = dc / gmax;
            std::vector<MatrixR> P(gmax);
            MatrixR z = MatrixR::Zero(H, t + 1);
            for (int sidx = 0; sidx < gmax; ++sidx) {
              P[sidx] = Qb.middleCols(sidx * wm, wm) * K.middleCols(sidx * wm, wm).transpose();
              z += P[sidx];
            }
            for (int g : opt.groups) {
              const int per = gmax / g;
              for (int k = 0; k < g; ++k) {
                MatrixR p = P[k * per];
                for (int j = 1; j < per; ++j) p += P[k * per + j];
                auto& sums = (hold ? acc[b].hold[g] : acc[b].fit[g])[k];
                for (int64_t h = 0; h < H; ++h) {
                  for (int64_t j = 0; j <= t; ++j) {
                    sums.add(z(h, j), p(h, j));
                    if (!hold) acc[b].fit_head[g][h * g + k].add(z(h, j), p(h, j));
                  }
                }
              }
            }
          }
          (hold ? L.pairs_holdout : L.pairs_fit) += H * (t + 1);
          p0 = thread_cpu_seconds();
          cpu2_pairs += p0 - p1;
          // FP8 study: attention output o = W_UV o_lat per head, reference vs quantised cache.
          // model::absorbed_decode_core's attend_latent for all heads at once through dgemm
          // (scores, max-shifted softmax, o_lat = P x) on the first t + 1 cache rows, in place.
          auto output = [&](const MatrixR& x, const MatrixR& kpe) {
            const int n = static_cast<int>(t + 1), hh = static_cast<int>(H), c = static_cast<int>(dc),
                      r = static_cast<int>(cfg.qk_rope_head_dim);
            fp8_scores.resize(H, n);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hh, n, c, scale, Q.data(), c, x.data(), c,
                        0.0, fp8_scores.data(), n);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hh, n, r, scale, Qpe.data(), r, kpe.data(), r,
                        1.0, fp8_scores.data(), n);
            for (int64_t h = 0; h < H; ++h) {
              auto row = fp8_scores.row(h);
              const double m = row.maxCoeff();
              double denom = 0;
              for (int j = 0; j < n; ++j) denom += (row(j) = std::exp(row(j) - m));
              row /= denom;
            }
            fp8_olat.resize(H, dc);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hh, c, n, 1.0, fp8_scores.data(), n,
                        x.data(), c, 0.0, fp8_olat.data(), c);
            std::vector<double> o;
            for (int64_t h = 0; h < H; ++h) {
              const VectorD oh = w_uv[h] * fp8_olat.row(h).transpose();
              o.insert(o.end(), oh.data(), oh.data() + oh.size());
            }
            return o;
          };
          const auto ref = output(d.x, d.k_pe);
          for (const auto& [name, qc] : qcache) {
            const auto y = output(qc.first, qc.second);
            fp8[name].add(y.data(), ref.data(), static_cast<int64_t>(y.size()));
          }
          ++L.fp8_queries;
          p1 = thread_cpu_seconds();
          cpu2_fp8 += p1 - p0;
        }
      }
    }
  }

  // mu_k (and R^2, the held-out logit fraction, per-head mu) from pass 2's sums; FP8 errors.
  void fit_mu_from_pairs() {
    for (const auto& b : run_bases) {
      for (int g : opt.groups) {
        SliceStats& st = L.slices[g][b];
        for (int k = 0; k < g; ++k) {
          const double ref = acc[b].norm_ref[g][k];
          st.norm_rel_error[k] = ref > 0 ? std::sqrt(acc[b].norm_err[g][k] / ref) : 0.0;
          if (!L.have_pairs) continue;
          const MuFit mf = fit_mu(acc[b].fit[g][k], opt.mu_min_rel_energy);
          st.mu[k] = mf.mu;
          st.mu_guarded[k] = mf.guarded;
          st.r2[k] = acc[b].hold[g][k].r2(mf.mu);
          st.logit_captured[k] = acc[b].hold[g][k].zz > 0 ? acc[b].hold[g][k].zp / acc[b].hold[g][k].zz : 0.0;
        }
        if (L.have_pairs && opt.mu_per_head) {
          st.mu_per_head = MatrixR::Ones(H, g);
          for (int64_t h = 0; h < H; ++h)
            for (int k = 0; k < g; ++k)
              st.mu_per_head(h, k) = fit_mu(acc[b].fit_head[g][h * g + k], opt.mu_min_rel_energy).mu;
        }
      }
    }
    for (const auto& [name, e] : fp8) L.fp8[name] = {e.rmse(), e.cos_diff(), e.rel_l2()};
  }

  // FP4 scale constant and Lloyd-Max codebook on the reservoir rows.
  void fit_quantisers() {
    if (dc % static_cast<int64_t>(quant::kFp4Group) == 0 && r_fit.size() > 0) {
      L.fp4 = fit_fp4_constant(r_fit.rows);
      const auto& hs = r_hold.size() ? r_hold.rows : r_fit.rows;
      double ms = 0;
      for (float v : hs) ms += static_cast<double>(v) * v;
      ms /= static_cast<double>(hs.size());
      L.fp4_holdout_rel_mse = ms > 0 ? fp4_round_mse(hs, L.fp4.c_rounded) / ms : 0.0;
      L.codebook = quant::lloyd_max_samples(std::vector<double>(r_fit.rows.begin(), r_fit.rows.end()));
      L.codebook_holdout_mse =
          quant::codebook_mse(L.codebook.levels, std::vector<double>(hs.begin(), hs.end()));
    } else {
      warnings.push_back("layer " + std::to_string(layer) + ": no FP4/Lloyd-Max fit (d_c not a multiple of 32)");
    }
    L.sample = r_fit.rows;
  }

  void log_profile() const {
    const auto t_end = clock::now();
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    const double cpu_end = thread_cpu_seconds();
    spdlog::info("layer {}: wall s (thread CPU s): pass 1 {:.2f} ({:.2f}: moment + reservoir {:.2f}, taking "
                 "reads {:.2f}; waited {:.2f} s for the reader), eigen {:.2f} ({:.2f}), pass 2 + FP4/Lloyd-Max "
                 "{:.2f} ({:.2f})",
                 layer, secs(t_start, t_pass1), cpu_pass1 - cpu_start, cpu_moment, cpu_read, read_wait,
                 secs(t_pass1, t_eig), cpu_eig - cpu_pass1, secs(t_eig, t_end), cpu_end - cpu_eig);
    spdlog::info("layer {}: pass 2 thread CPU s: load {:.2f}, rotate+norm errors {:.2f}, FP8 caches {:.2f}, "
                 "pairs {:.2f}, FP8 outputs {:.2f}", layer, cpu2_load, cpu2_norm, cpu2_quant, cpu2_pairs, cpu2_fp8);
  }

  const model::MlaConfig& cfg;
  const CalibrationOptions& opt;
  const std::vector<std::unique_ptr<io::CaptureReader>>& caps;
  const std::vector<int64_t>& n_hold;
  const MomentMode moment;
  const std::vector<std::string>& run_bases;
  const std::string& mix;
  const std::vector<double>& signs;
  const int gmax;
  const double scale;
  const CalibrationContext& cx_;
  const int64_t dc, H, layer;
  const model::AttentionWeights w;
  std::vector<std::string>& warnings;
  WorkerScratch& scratch;
  LayerCalibration L;
  std::map<std::string, const Eigen::MatrixXd*> bases;
  SecondMoment m_fit, m_hold;
  RowReservoir r_fit, r_hold;
  std::vector<std::map<int64_t, io::RawRows>> kept;  // pass 1 -> pass 2 (data in scratch.kept)
  MatrixR m_h;                                   // held-out second moment (fit's when none)
  std::map<std::string, PairAccum> acc;          // pass 2 -> fit_mu
  std::map<std::string, ErrorSums> fp8;
  // Profile (logged, not written).
  clock::time_point t_start = clock::now(), t_pass1, t_eig;
  double cpu_start = thread_cpu_seconds(), cpu_pass1 = 0, cpu_eig = 0;
  double cpu_read = 0, cpu_moment = 0, read_wait = 0;  // pass 1
  double cpu2_load = 0, cpu2_norm = 0, cpu2_quant = 0, cpu2_pairs = 0, cpu2_fp8 = 0;  // pass 2
};

}  // namespace

LayerCalibration calibrate_layer(const CalibrationContext& cx, int64_t layer, model::AttentionWeights w,
                                 std::vector<std::string>& warnings) {
  return LayerCalibrator(cx, layer, std::move(w), warnings).run();
}

}  // namespace mla::calib
