// mla-bench --tp: one attention layer's decode step on several GPUs (see tp_bench.hpp).
// One host thread per GPU, one NCCL communicator per GPU (ncclCommInitAll); NVLink multicast is
// left as the environment sets it (NCCL_NVLS_ENABLE=0 on the lent machines; never overridden).
// Timing: CUDA events on each rank's stream around each part of the step, after a memset over
// 2x L2 (the previous step's weights and cache rows are not left in L2); median of runs.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "tp_bench.hpp"

#if MLA_HAVE_NCCL
#include <nccl.h>

#include "bench_device.hpp"
#include "kernels/mla_decode.hpp"
#endif

namespace mla::bench {

#if MLA_HAVE_NCCL
namespace {

// DeepSeek-V3 attention shapes.
constexpr int kD = 7168, kH = 128, kQLora = 1536, kDn = 128, kDr = 64, kDv = 128, kDc = 512, kLayers = 61;

void ckn(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(r));
}

// DCP merge of one rank's partial output: out[row] *= exp(lse_own - lse_total), lse_total the
// log-sum-exp over ranks of lse_all[r][row] (natural log). Summing the rescaled outputs over ranks
// (after W_UV and o_proj, which are linear) gives the exact attention over all tokens.
__global__ void dcp_rescale(__nv_bfloat16* out, const float* lse_all, int tp, int rows, int d_c, int rank) {
  const int row = blockIdx.x;
  if (row >= rows) return;
  float m = -INFINITY;
  for (int r = 0; r < tp; ++r) m = fmaxf(m, lse_all[r * rows + row]);
  float s = 0.f;
  for (int r = 0; r < tp; ++r) s += __expf(lse_all[r * rows + row] - m);
  const float w = __expf(lse_all[rank * rows + row] - m) / s;
  // 8 bf16 per 16-byte access (d_c is a multiple of 8).
  uint4* v = reinterpret_cast<uint4*>(out + size_t(row) * d_c);
  for (int i = threadIdx.x; i < d_c / 8; i += blockDim.x) {
    uint4 x = v[i];
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&x);
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      h[k] = __floats2bfloat162_rn(w * f.x, w * f.y);
    }
    v[i] = x;
  }
}

// y[M, N] = x[M, K] W[N, K]^T (row-major, bf16 in and out, fp32 accumulation).
void linear(cublasHandle_t h, const void* x, const void* W, void* y, int M, int N, int K) {
  const float one = 1.f, zero = 0.f;
  check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, CUDA_R_16BF, K, x, CUDA_R_16BF, K, &zero, y,
                            CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "linear");
}

struct Shape {
  std::string mode;
  int heads = 0, d_c = 0, tokens = 0;  // per rank
  int dim() const { return d_c + kDr; }
};
// "tpla" is g = tp latent groups (every rank all heads, d_c / tp); "tpla-g<g>" has g groups of
// tp / g ranks (g divides tp, 2 <= g < tp): a rank holds H g / tp heads on its group's d_c / g
// slice, so q_b_proj and o_proj are replicated g times instead of tp times.
Shape shape_of(const std::string& mode, int tp, int L) {
  if (mode == "head-parallel") return {mode, kH / tp, kDc, L};
  if (mode == "tpla") return {mode, kH, kDc / tp, L};
  if (mode == "dcp") return {mode, kH, kDc, (L + tp - 1) / tp};
  if (mode.rfind("tpla-g", 0) == 0) {
    int g = 0;
    const char *first = mode.data() + 6, *last = mode.data() + mode.size();
    const auto [end, err] = std::from_chars(first, last, g);
    if (err != std::errc() || end != last || g < 2 || g >= tp || tp % g)
      throw InputError("--mode " + mode + ": the latent group count g must divide --tp " + std::to_string(tp) +
                       " with 2 <= g < tp (g = tp is plain 'tpla')");
    return {mode, kH * g / tp, kDc / g, L};
  }
  throw InputError("--mode: '" + mode + "' is not tpla, tpla-g<g>, dcp or head-parallel");
}
bool is_tpla(const Shape& sh) { return sh.mode.rfind("tpla", 0) == 0; }

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    const long gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  long gen_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One rank's ceilings, timed on its own stream while the other ranks measure theirs (8 runs, the
// first 2 dropped, no L2 flush; bench_device.hpp's measure_ceilings times one device alone).
struct RankCeilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

RankCeilings measure_rank_ceilings(cudaStream_t s, cublasHandle_t cb) {
  RankCeilings c;
  cudaEvent_t a, b;
  cuda::check(cudaEventCreate(&a), "event");
  cuda::check(cudaEventCreate(&b), "event");
  auto time_ms = [&](auto&& fn) {
    cuda::check(cudaEventRecord(a, s), "record");
    fn();
    cuda::check(cudaEventRecord(b, s), "record");
    cuda::check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    return static_cast<double>(ms);
  };
  {
    const size_t bytes = size_t(1) << 30;
    DeviceBytes x(bytes), y(bytes);
    std::vector<double> t;
    for (int i = 0; i < 8; ++i)
      t.push_back(time_ms([&] { cuda::check(cudaMemcpyAsync(y.ptr, x.ptr, bytes, cudaMemcpyDeviceToDevice, s), "copy"); }));
    t.erase(t.begin(), t.begin() + 2);
    c.copy_gbs = 2.0 * bytes / (median(t) * 1e-3) / 1e9;  // bytes read + written
  }
  {
    const int n = 8192;
    DeviceBytes A(size_t(n) * n * 2), B(size_t(n) * n * 2), C(size_t(n) * n * 2);
    fill_bf16(A.ptr, size_t(n) * n, 1, 1.f, s);
    fill_bf16(B.ptr, size_t(n) * n, 2, 1.f, s);
    std::vector<double> t;
    for (int i = 0; i < 8; ++i) t.push_back(time_ms([&] { linear(cb, A.ptr, B.ptr, C.ptr, n, n, n); }));
    t.erase(t.begin(), t.begin() + 2);
    c.gemm_tflops = 2.0 * n * n * double(n) / (median(t) * 1e-3) / 1e12;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return c;
}

// Parts of the step, in order (event k+1 - event k).
constexpr int kParts = 6;
const char* kPartNames[kParts] = {"norm_allreduce", "q_proj", "attention", "dcp_merge", "out_proj", "allreduce"};

struct RankResult {
  std::vector<double> part_us;  // medians
  double step_us = 0;
  size_t kv_bytes = 0, weight_bytes = 0;
  double comm_bytes = 0;  // bytes each rank sends+receives per step (NCCL payload)
};

// One rank's timed steps of one mode.
RankResult run_mode_rank(const Shape& sh, const TpOptions& o, int rank, ncclComm_t comm, cudaStream_t s,
                         cublasHandle_t cb, Barrier& bar, size_t l2_bytes) {
  const int B = o.batch, Hr = sh.heads, dc = sh.d_c, dim = sh.dim(), tp = o.tp;
  const bool exact_norm = is_tpla(sh) && o.norm_exact;
  const bool dcp = sh.mode == "dcp";
  const int pages_per_seq = (sh.tokens + o.page - 1) / o.page;
  const size_t num_pages = size_t(B) * pages_per_seq;
  RankResult res;
  res.kv_bytes = num_pages * o.page * size_t(dim) * 2;
  // Weights: q_b_proj rows of the rank's heads, W_UK and W_UV (its heads x its latent width),
  // o_proj columns of its heads.
  const size_t n_qb = size_t(Hr) * (kDn + kDr) * kQLora, n_uk = size_t(Hr) * kDn * dc, n_uv = size_t(Hr) * kDv * dc,
               n_o = size_t(kD) * Hr * kDv;
  res.weight_bytes = 2 * (n_qb + n_uk + n_uv + n_o);
  DeviceBytes w_qb(2 * n_qb), w_uk(2 * n_uk), w_uv(2 * n_uv), w_o(2 * n_o);
  DeviceBytes kv(res.kv_bytes), qa(size_t(B) * kQLora * 2), qfull(size_t(B) * Hr * (kDn + kDr) * 2), q(size_t(B) * Hr * dim * 2),
      out(size_t(B) * Hr * dc * 2), lse(size_t(B) * Hr * 4), lse_all(size_t(tp) * B * Hr * 4), o_heads(size_t(B) * Hr * kDv * 2),
      y(size_t(B) * kD * 2), nrm(size_t(B) * 4), flush(2 * l2_bytes);
  const float inv = 1.f / std::sqrt(float(kQLora));
  fill_bf16(w_qb.ptr, n_qb, 11 + rank, inv, s);
  fill_bf16(w_uk.ptr, n_uk, 12 + rank, 1.f / std::sqrt(float(kDn)), s);
  fill_bf16(w_uv.ptr, n_uv, 13 + rank, 1.f / std::sqrt(float(dc)), s);
  fill_bf16(w_o.ptr, n_o, 14 + rank, 1.f / std::sqrt(float(Hr * kDv)), s);
  fill_bf16(kv.ptr, res.kv_bytes / 2, 15 + rank, 1.f, s);
  fill_bf16(qa.ptr, size_t(B) * kQLora, 16, 1.f, s);
  cuda::check(cudaMemsetAsync(nrm.ptr, 0, size_t(B) * 4, s), "memset");
  cuda::check(cudaMemsetAsync(lse_all.ptr, 0, size_t(tp) * B * Hr * 4, s), "memset");  // rows of absent ranks (--tp-one-gpu)
  // Random page placement, all requests at full length.
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7 + rank));
  DeviceBytes table(num_pages * 4), seqlens(size_t(B) * 4);
  cuda::check(cudaMemcpyAsync(table.ptr, perm.data(), num_pages * 4, cudaMemcpyHostToDevice, s), "upload");
  std::vector<int32_t> lens(B, sh.tokens);
  cuda::check(cudaMemcpyAsync(seqlens.ptr, lens.data(), size_t(B) * 4, cudaMemcpyHostToDevice, s), "upload");

  quant::Bf16DecodeParams p;
  p.batch = B;
  p.s_q = 1;
  p.heads = Hr;
  p.d_c = dc;
  p.d_r = kDr;
  p.num_pages = static_cast<int>(num_pages);
  p.page_size = o.page;
  p.max_pages = pages_per_seq;
  p.scale = 1.f / std::sqrt(float(kDn + kDr));
  p.q = q.as<uint16_t>();
  p.kv_cache = kv.as<uint16_t>();
  p.page_table = table.as<int32_t>();
  p.seqlens = seqlens.as<int32_t>();
  p.out = out.as<uint16_t>();
  p.lse = lse.as<float>();
  p.num_parts = kernels::decode_parts_for_device(p);
  const size_t ws_bytes = kernels::decode_workspace_bytes_for(p);
  DeviceBytes ws(ws_bytes), err(4);
  cuda::check(cudaMemsetAsync(err.ptr, 0, 4, s), "memset");
  p.workspace = ws.ptr;
  p.workspace_bytes = ws_bytes;
  p.error_flag = err.as<int>();

  const float one = 1.f, zero = 0.f;
  auto step = [&](cudaEvent_t* ev) {
    auto mark = [&](int k) {
      if (ev) cuda::check(cudaEventRecord(ev[k], s), "record");
    };
    mark(0);
    if (exact_norm) ckn(ncclAllReduce(nrm.ptr, nrm.ptr, B, ncclFloat32, ncclSum, comm, s), "norm all-reduce");
    mark(1);
    linear(cb, qa.ptr, w_qb.ptr, qfull.ptr, B, Hr * (kDn + kDr), kQLora);
    check_cublas(cublasGemmStridedBatchedEx(cb, CUBLAS_OP_N, CUBLAS_OP_N, dc, B, kDn, &one, w_uk.ptr, CUDA_R_16BF, dc,
                                            size_t(kDn) * dc, qfull.ptr, CUDA_R_16BF, Hr * (kDn + kDr), kDn + kDr, &zero, q.ptr,
                                            CUDA_R_16BF, Hr * dim, dim, Hr, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "W_UK absorption");
    cuda::check(cudaMemcpy2DAsync(q.as<__nv_bfloat16>() + dc, size_t(dim) * 2, qfull.as<__nv_bfloat16>() + kDn,
                         size_t(kDn + kDr) * 2, size_t(kDr) * 2, size_t(B) * Hr, cudaMemcpyDeviceToDevice, s),
       "q_pe copy");
    mark(2);
    kernels::mla_decode_bf16(p, s);
    mark(3);
    if (dcp) {
      ckn(ncclAllGather(lse.ptr, lse_all.ptr, size_t(B) * Hr, ncclFloat32, comm, s), "LSE all-gather");
      dcp_rescale<<<B * Hr, 64, 0, s>>>(out.as<__nv_bfloat16>(), lse_all.as<float>(), tp, B * Hr, dc, rank);
      cuda::check(cudaGetLastError(), "dcp_rescale");
    }
    mark(4);
    check_cublas(cublasGemmStridedBatchedEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, kDv, B, dc, &one, w_uv.ptr, CUDA_R_16BF, dc,
                                            size_t(kDv) * dc, out.ptr, CUDA_R_16BF, Hr * dc, dc, &zero, o_heads.ptr, CUDA_R_16BF,
                                            Hr * kDv, kDv, Hr, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "W_UV expansion");
    linear(cb, o_heads.ptr, w_o.ptr, y.ptr, B, kD, Hr * kDv);
    mark(5);
    ckn(ncclAllReduce(y.ptr, y.ptr, size_t(B) * kD, ncclBfloat16, ncclSum, comm, s), "o_proj all-reduce");
    mark(6);
  };
  // NCCL payload per rank and step: ring all-reduce moves 2 (n-1)/n of the buffer each way.
  const double ring = 2.0 * (tp - 1) / tp;
  res.comm_bytes = ring * B * kD * 2 + (exact_norm ? ring * B * 4 : 0) + (dcp ? double(tp - 1) / tp * tp * B * Hr * 4 : 0);

  cudaEvent_t ev[kParts + 1];
  for (auto& e : ev) cuda::check(cudaEventCreate(&e), "event");
  cuda::check(cudaStreamSynchronize(s), "setup");
  bar.wait();
  for (int i = 0; i < o.warmup; ++i) step(nullptr);
  cuda::check(cudaStreamSynchronize(s), "warm-up");
  std::vector<std::vector<double>> parts(kParts);
  std::vector<double> steps;
  for (int i = 0; i < o.runs; ++i) {
    cuda::check(cudaMemsetAsync(flush.ptr, i & 0xFF, 2 * l2_bytes, s), "L2 flush");
    step(ev);
    cuda::check(cudaEventSynchronize(ev[kParts]), "step");
    for (int k = 0; k < kParts; ++k) {
      float ms = 0;
      cuda::check(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]), "elapsed");
      parts[k].push_back(ms * 1e3);
    }
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, ev[0], ev[kParts]), "elapsed");
    steps.push_back(ms * 1e3);
  }
  int flag = 0;
  cuda::check(cudaMemcpy(&flag, err.ptr, 4, cudaMemcpyDeviceToHost), "error flag");
  if (flag) throw Error("decode kernel reported a bad page id (flag " + std::to_string(flag) + ")");
  for (auto& e : ev) cudaEventDestroy(e);
  for (int k = 0; k < kParts; ++k) res.part_us.push_back(median(parts[k]));
  res.step_us = median(steps);
  return res;
}

// NCCL figures measured alone (ranks in step through the collectives themselves).
struct CommFigures {
  double small_us = 0;     // all-reduce of B floats (the exact-norm one)
  double oproj_us = 0;     // all-reduce of B x D bf16 (the o_proj one)
  double busbw_gbs = 0;    // 256 MiB bf16 all-reduce: bus bandwidth (nccl-tests' definition)
};
CommFigures measure_comm(const TpOptions& o, ncclComm_t comm, cudaStream_t s) {
  CommFigures f;
  cudaEvent_t a, b;
  cuda::check(cudaEventCreate(&a), "event");
  cuda::check(cudaEventCreate(&b), "event");
  auto time_us = [&](void* p, size_t n, ncclDataType_t t, int reps) {
    std::vector<double> v;
    for (int i = 0; i < reps + 3; ++i) {
      cuda::check(cudaEventRecord(a, s), "record");
      ckn(ncclAllReduce(p, p, n, t, ncclSum, comm, s), "all-reduce");
      cuda::check(cudaEventRecord(b, s), "record");
      cuda::check(cudaEventSynchronize(b), "sync");
      float ms = 0;
      cuda::check(cudaEventElapsedTime(&ms, a, b), "elapsed");
      if (i >= 3) v.push_back(ms * 1e3);
    }
    return median(v);
  };
  DeviceBytes small(size_t(o.batch) * 4), mid(size_t(o.batch) * kD * 2);
  const size_t big_n = size_t(128) << 20;
  DeviceBytes big(big_n * 2);
  cuda::check(cudaMemsetAsync(small.ptr, 0, size_t(o.batch) * 4, s), "memset");
  cuda::check(cudaMemsetAsync(mid.ptr, 0, size_t(o.batch) * kD * 2, s), "memset");
  cuda::check(cudaMemsetAsync(big.ptr, 0, big_n * 2, s), "memset");
  f.small_us = time_us(small.ptr, o.batch, ncclFloat32, 50);
  f.oproj_us = time_us(mid.ptr, size_t(o.batch) * kD, ncclBfloat16, 50);
  const double big_us = time_us(big.ptr, big_n, ncclBfloat16, 10);
  f.busbw_gbs = (big_n * 2.0 / (big_us * 1e-6)) * (2.0 * (o.tp - 1) / o.tp) / 1e9;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return f;
}

// Roofline prediction (us) of each part for a rank of shape sh: max(bytes / copy bandwidth,
// flops / GEMM rate) for compute parts; latency + payload / bus bandwidth for collectives.
std::vector<double> predict(const Shape& sh, const TpOptions& o, const RankCeilings& c, const CommFigures& f) {
  const double B = o.batch, Hr = sh.heads, dc = sh.d_c, dim = sh.dim(), L = sh.tokens;
  const double bw = c.copy_gbs * 1e9, fl = c.gemm_tflops * 1e12;
  auto roof = [&](double bytes, double flops) { return 1e6 * std::max(bytes / bw, flops / fl); };
  std::vector<double> pr(kParts, 0.0);
  const double ring = 2.0 * (o.tp - 1) / o.tp;
  if (is_tpla(sh) && o.norm_exact) pr[0] = f.small_us;
  pr[1] = roof(2.0 * (Hr * (kDn + kDr) * kQLora + Hr * kDn * dc) + 2.0 * B * (kQLora + Hr * (kDn + kDr) + Hr * dim),
               2.0 * B * (double(kQLora) * Hr * (kDn + kDr) + Hr * kDn * dc));
  pr[2] = roof(2.0 * B * L * dim, 2.0 * B * Hr * L * (dim + dc));
  if (sh.mode == "dcp") pr[3] = f.small_us;  // an all-gather of B x H floats: latency-bound
  pr[4] = roof(2.0 * (Hr * kDv * dc + double(kD) * Hr * kDv), 2.0 * B * Hr * (double(kDv) * dc + double(kDv) * kD));
  pr[5] = f.small_us + 1e6 * ring * B * kD * 2 / (f.busbw_gbs * 1e9);
  return pr;
}

}  // namespace

std::string run_tp_bench(const TpOptions& o) {
  // The arguments first, so a bad one is named without a GPU.
  if (o.tp < 2) throw InputError("--tp must be >= 2, got " + std::to_string(o.tp));
  if (kH % o.tp || kDc % o.tp) throw InputError("--tp must divide 128 heads and d_c 512");
  for (const auto& m : o.modes) shape_of(m, o.tp, 1);  // validates the names
  int visible = 0;
  cuda::check(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  const int here = o.one_gpu ? 1 : o.tp;  // ranks run in this process
  if (visible < here)
    throw InputError("--tp " + std::to_string(o.tp) + ": " + std::to_string(visible) +
                     " CUDA device(s) visible (--tp-one-gpu times rank 0 alone)");
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  std::printf("mla-bench --tp %d: DeepSeek-V3 attention (D=%d H=%d q_lora=%d d_c=%d d_r=%d d_n=d_v=%d), B=%d, page %d; "
              "NCCL_NVLS_ENABLE=%s\n",
              o.tp, kD, kH, kQLora, kDc, kDr, kDn, o.batch, o.page, nvls ? nvls : "(unset)");
  if (o.one_gpu)
    std::printf("--tp-one-gpu: rank 0 of each mode alone on GPU 0; all-reduce and all-gather are 1-rank no-ops here, "
                "their time is PREDICTED (bus bandwidth %.0f GB/s, latency %.0f us assumed), not measured\n",
                o.assumed_busbw_gbs, o.assumed_latency_us);
  std::vector<int> devs(here);
  std::iota(devs.begin(), devs.end(), 0);
  std::vector<ncclComm_t> comms(here);
  ckn(ncclCommInitAll(comms.data(), here, devs.data()), "ncclCommInitAll");
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);

  nlohmann::json j;
  j["tp"] = o.tp;
  j["batch"] = o.batch;
  j["page"] = o.page;
  j["nccl_version"] = nccl_version;
  j["nccl_nvls_enable"] = nvls ? nvls : "";
  j["norm_exact"] = o.norm_exact;
  j["one_gpu"] = o.one_gpu;
  std::vector<RankCeilings> ceil(here);
  std::vector<CommFigures> comm(here);
  // results[mode][L][rank]
  std::vector<std::vector<std::vector<RankResult>>> results(o.modes.size(),
                                                            std::vector<std::vector<RankResult>>(o.seqlens.size()));
  for (auto& m : results)
    for (auto& l : m) l.resize(here);
  std::vector<std::string> names(here);
  Barrier bar(here);
  std::vector<std::thread> threads;
  for (int r = 0; r < here; ++r)
    threads.emplace_back([&, r] {
      try {
        cuda::check(cudaSetDevice(devs[r]), "cudaSetDevice");
        cudaDeviceProp prop{};
        cuda::check(cudaGetDeviceProperties(&prop, devs[r]), "properties");
        names[r] = prop.name;
        cudaStream_t s;
        cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
        cublasHandle_t cb;
        check_cublas(cublasCreate(&cb), "cublasCreate");
        check_cublas(cublasSetStream(cb, s), "cublasSetStream");
        ceil[r] = measure_rank_ceilings(s, cb);
        bar.wait();
        if (o.one_gpu) {
          comm[r].small_us = comm[r].oproj_us = 0;  // not measured: predicted below
          comm[r].busbw_gbs = o.assumed_busbw_gbs;
          comm[r].small_us = o.assumed_latency_us;
          comm[r].oproj_us = o.assumed_latency_us + 2.0 * (o.tp - 1) / o.tp * o.batch * kD * 2 / (o.assumed_busbw_gbs * 1e3);
        } else {
          comm[r] = measure_comm(o, comms[r], s);
        }
        for (size_t mi = 0; mi < o.modes.size(); ++mi)
          for (size_t li = 0; li < o.seqlens.size(); ++li) {
            bar.wait();
            results[mi][li][r] = run_mode_rank(shape_of(o.modes[mi], o.tp, o.seqlens[li]), o, r, comms[r], s, cb, bar,
                                               static_cast<size_t>(prop.l2CacheSize));
          }
        cublasDestroy(cb);
        cudaStreamDestroy(s);
      } catch (const std::exception& e) {
        // The other ranks may be blocked in a collective or a barrier: there is no orderly way
        // back, so name the failure and end the process.
        std::fprintf(stderr, "mla-bench --tp: rank %d (GPU %d): %s\n", r, devs[r], e.what());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  for (auto& t : threads) t.join();
  for (auto& c : comms) ncclCommDestroy(c);

  for (int r = 0; r < here; ++r) {
    std::printf("GPU %d: %s, copy %.0f GB/s (read + write), cuBLAS BF16 8192^3 %.1f TFLOP/s\n", r, names[r].c_str(),
                ceil[r].copy_gbs, ceil[r].gemm_tflops);
    j["devices"].push_back({{"name", names[r]}, {"copy_gbs", ceil[r].copy_gbs}, {"gemm_tflops", ceil[r].gemm_tflops}});
  }
  std::printf("NCCL %d%s: all-reduce of %d floats %.1f us; of %d x %d bf16 (%.2f MB) %.1f us; 256 MiB bus bandwidth %.0f GB/s\n",
              nccl_version, o.one_gpu ? " (ASSUMED, not measured)" : "", o.batch, comm[0].small_us, o.batch, kD, o.batch * kD * 2 / 1e6, comm[0].oproj_us,
              comm[0].busbw_gbs);
  j["allreduce"] = {{"small_floats", o.batch}, {"small_us", comm[0].small_us}, {"oproj_us", comm[0].oproj_us},
                    {"oproj_bytes", o.batch * kD * 2}, {"busbw_gbs", comm[0].busbw_gbs}, {"measured", !o.one_gpu}};
  RankCeilings cmin{1e30, 1e30};
  for (const auto& c : ceil) {
    cmin.copy_gbs = std::min(cmin.copy_gbs, c.copy_gbs);
    cmin.gemm_tflops = std::min(cmin.gemm_tflops, c.gemm_tflops);
  }

  std::printf("\nper rank, median of %d steps (us; measured / roofline prediction); step = sum of parts on the slower rank\n",
              o.runs);
  std::printf("%-14s %6s %5s %4s %7s | %-15s %-15s %-15s %-15s %-15s %-15s | %-15s | %9s %8s\n", "mode", "L", "heads",
              "d_c", "tokens", "norm_allreduce", "q_proj", "attention", "dcp_merge", "out_proj", "allreduce", "step",
              "KV GB/GPU", "comm KB");
  for (size_t li = 0; li < o.seqlens.size(); ++li)
    for (size_t mi = 0; mi < o.modes.size(); ++mi) {
      const Shape sh = shape_of(o.modes[mi], o.tp, o.seqlens[li]);
      const auto pr = predict(sh, o, cmin, comm[0]);
      const auto& rr = results[mi][li];
      int slow = 0;
      for (int r = 1; r < here; ++r)
        if (rr[r].step_us > rr[slow].step_us) slow = r;
      std::printf("%-14s %6d %5d %4d %7d |", sh.mode.c_str(), o.seqlens[li], sh.heads, sh.d_c, sh.tokens);
      double pred_step = 0;
      nlohmann::json jr;
      jr["mode"] = sh.mode;
      jr["seqlen"] = o.seqlens[li];
      jr["heads_per_rank"] = sh.heads;
      jr["d_c_per_rank"] = sh.d_c;
      jr["tokens_per_rank"] = sh.tokens;
      for (int k = 0; k < kParts; ++k) {
        char cell[32];
        std::snprintf(cell, sizeof cell, "%.1f/%.1f", rr[slow].part_us[k], pr[k]);
        std::printf(" %-15s", cell);
        pred_step += pr[k];
        nlohmann::json per_rank = nlohmann::json::array();
        for (int r = 0; r < here; ++r) per_rank.push_back(rr[r].part_us[k]);
        jr["parts"][kPartNames[k]] = {{"us_per_rank", per_rank}, {"predicted_us", pr[k]}};
      }
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.1f/%.1f", rr[slow].step_us, pred_step);
      std::printf(" | %-15s | %9.2f %8.1f", cell, rr[slow].kv_bytes / 1e9, rr[slow].comm_bytes / 1e3);
      if (o.one_gpu) {
        // The 1-rank collectives measured here are no-ops: replace them by their prediction
        // (dcp: the LSE all-gather's latency on top of the rescale measured in dcp_merge).
        const double est = rr[slow].step_us - rr[slow].part_us[0] - rr[slow].part_us[5] + pr[0] + pr[5] +
                           (sh.mode == "dcp" ? o.assumed_latency_us : 0.0);
        std::printf("  step with predicted collectives %.1f", est);
        jr["step_with_predicted_collectives_us"] = est;
      }
      std::printf("\n");
      nlohmann::json steps = nlohmann::json::array();
      for (int r = 0; r < here; ++r) steps.push_back(rr[r].step_us);
      jr["step_us_per_rank"] = steps;
      jr["step_predicted_us"] = pred_step;
      jr["kv_bytes_per_gpu"] = rr[slow].kv_bytes;
      jr["weight_bytes_per_gpu"] = rr[slow].weight_bytes;
      jr["comm_bytes_per_rank"] = rr[slow].comm_bytes;
      j["results"].push_back(jr);
    }

  // Capacity view: all 61 layers' cache in a fixed per-GPU budget.
  const double budget = o.kv_budget_gib * double(1 << 30);
  std::printf("\ncapacity: %.0f GiB of KV cache per GPU, %d layers, BF16 cache; largest batch per context length\n",
              o.kv_budget_gib, kLayers);
  std::printf("%-14s %12s %12s %10s %10s %10s\n", "mode", "B/token/GPU", "tokens/GPU", "B@8K", "B@32K", "B@128K");
  for (const auto& m : o.modes) {
    const Shape sh = shape_of(m, o.tp, 1 << 20);
    // Bytes per token of context on one GPU: dcp holds 1/tp of the tokens at full width.
    const double per_token = 2.0 * sh.dim() * kLayers / (m == "dcp" ? o.tp : 1);
    const double tokens = std::floor(budget / per_token);
    std::printf("%-14s %12.0f %12.0f %10.0f %10.0f %10.0f\n", m.c_str(), per_token, tokens, std::floor(tokens / 8192),
                std::floor(tokens / 32768), std::floor(tokens / 131072));
    j["capacity"].push_back({{"mode", m}, {"bytes_per_token_per_gpu", per_token}, {"tokens_per_gpu", tokens},
                             {"budget_gib", o.kv_budget_gib}});
  }
  return j.dump(2);
}

#else

std::string run_tp_bench(const TpOptions&) {
  throw Error("mla-bench --tp needs NCCL: this build has none (configure with CUDA and NCCL found, e.g. "
              "-DNCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so>)");
}

#endif

}  // namespace mla::bench
