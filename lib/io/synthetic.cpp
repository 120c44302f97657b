#include "io/synthetic.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "io/atomic_output.hpp"
#include "io/checkpoint.hpp"

namespace mla::io {
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------- presets

model::MlaConfig make_config(std::string type, int64_t D, int64_t H, int64_t q_lora, int64_t d_c, int64_t d_n,
                             int64_t d_r, int64_t d_v, int64_t layers, int64_t dense, int64_t inter,
                             int64_t moe_inter, int64_t routed, int64_t shared, int64_t vocab, int64_t max_pos,
                             double theta) {
  model::MlaConfig c;
  c.model_type = std::move(type);
  c.hidden_size = D;
  c.num_heads = H;
  c.q_lora_rank = q_lora;
  c.kv_lora_rank = d_c;
  c.qk_nope_head_dim = d_n;
  c.qk_rope_head_dim = d_r;
  c.v_head_dim = d_v;
  c.num_hidden_layers = layers;
  c.first_k_dense_replace = dense;
  c.intermediate_size = inter;
  c.moe_intermediate_size = moe_inter;
  c.n_routed_experts = routed;
  c.n_shared_experts = shared;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = theta;
  return c;
}

model::YarnScaling yarn(double factor, double mscale, double mscale_all_dim, double beta_fast = 32.0,
                        double beta_slow = 1.0) {
  model::YarnScaling y;
  y.factor = factor;
  y.mscale = mscale;
  y.mscale_all_dim = mscale_all_dim;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = beta_fast;
  y.beta_slow = beta_slow;
  return y;
}

nlohmann::json router_extra(const char* arch, int top_k, int n_group, int topk_group, const char* method,
                            const char* scoring, bool norm_topk, double routed_scale) {
  return {{"architectures", {arch}},        {"num_experts_per_tok", top_k}, {"n_group", n_group},
          {"topk_group", topk_group},        {"topk_method", method},        {"scoring_func", scoring},
          {"norm_topk_prob", norm_topk},     {"routed_scaling_factor", routed_scale},
          {"moe_layer_freq", 1},             {"hidden_act", "silu"},         {"attention_bias", false},
          {"tie_word_embeddings", false},    {"torch_dtype", "bfloat16"}};
}

// ---------------------------------------------------------------- random streams

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h;
}

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Approximately N(0,1): sum of four 16-bit uniforms (Irwin-Hall), centred and scaled.
  // Integer sums and one double multiply: the same bits on every platform.
  double gaussian() {
    const uint64_t r = next();
    const double sum = static_cast<double>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    constexpr double kMean = 4.0 * 65535.0 / 2.0;
    constexpr double kInvStd = 1.0 / 37837.22668;  // sqrt(4 * (65536^2 - 1) / 12)
    return (sum - kMean) * kInvStd;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

double sample(SyntheticKind kind, Xoshiro256& rng, double linear_std) {
  const double g = rng.gaussian();
  switch (kind) {
    case SyntheticKind::Linear: return g * linear_std;
    case SyntheticKind::Norm: return std::max(0.05, 1.0 + 0.2 * g);
    case SyntheticKind::Embedding: return 0.02 * g;
    case SyntheticKind::Bias: return 0.01 * g;
  }
  return g;
}

// Runs f(strip) for strip in [0, n) on up to `threads` threads.
template <typename F>
void parallel_for(int64_t n, int threads, F f) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int64_t i = t; i < n; i += threads) f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

// ---------------------------------------------------------------- presets (public)

std::vector<std::string> synthetic_preset_names() {
  return {"deepseek-v2-lite", "deepseek-v3", "kimi-k2", "tiny-v2", "tiny-v3"};
}

SyntheticPreset synthetic_preset(const std::string& name) {
  SyntheticPreset p;
  if (name == "deepseek-v2-lite") {
    p.config = make_config("deepseek_v2", 2048, 16, 0, 512, 128, 64, 128, 27, 1, 10944, 1408, 64, 2, 102400, 163840, 10000.0);
    p.config.yarn = yarn(40.0, 0.707, 0.707);
    p.extra = router_extra("DeepseekV2ForCausalLM", 6, 1, 1, "greedy", "softmax", false, 1.0);
  } else if (name == "deepseek-v3") {
    p.config = make_config("deepseek_v3", 7168, 128, 1536, 512, 128, 64, 128, 61, 3, 18432, 2048, 256, 1, 129280, 163840, 10000.0);
    p.config.yarn = yarn(40.0, 1.0, 1.0);
    p.extra = router_extra("DeepseekV3ForCausalLM", 8, 8, 4, "noaux_tc", "sigmoid", true, 2.5);
  } else if (name == "kimi-k2") {
    p.config = make_config("kimi_k2", 7168, 64, 1536, 512, 128, 64, 128, 61, 1, 18432, 2048, 384, 1, 163840, 131072, 50000.0);
    p.config.yarn = yarn(32.0, 1.0, 1.0, 1.0, 1.0);
    p.extra = router_extra("DeepseekV3ForCausalLM", 8, 1, 1, "noaux_tc", "sigmoid", true, 2.827);
  } else if (name == "tiny-v3") {
    // d_c + d_r = 160 rows: kv_a_proj_with_mqa has a partial 32-row edge block, as 576 has in V3.
    p.config = make_config("deepseek_v3", 256, 4, 128, 128, 32, 32, 32, 2, 1, 192, 32, 4, 1, 256, 163840, 10000.0);
    p.config.yarn = yarn(40.0, 1.0, 1.0);
    p.extra = router_extra("DeepseekV3ForCausalLM", 2, 1, 1, "noaux_tc", "sigmoid", true, 2.5);
  } else if (name == "tiny-v2") {
    p.config = make_config("deepseek_v2", 128, 4, 0, 64, 32, 16, 32, 2, 1, 256, 32, 4, 2, 256, 2048, 10000.0);
    p.extra = router_extra("DeepseekV2ForCausalLM", 2, 1, 1, "greedy", "softmax", false, 1.0);
  } else {
    std::string known;
    for (const auto& n : synthetic_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("synthetic preset '" + name + "' is unknown (known: " + known + ")");
  }
  return p;
}

nlohmann::json mla_config_to_json(const model::MlaConfig& c) {
  nlohmann::json j = {
      {"model_type", c.model_type},
      {"hidden_size", c.hidden_size},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_heads},
      {"q_lora_rank", c.has_q_lora() ? nlohmann::json(c.q_lora_rank) : nlohmann::json(nullptr)},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim},
      {"v_head_dim", c.v_head_dim},
      {"num_hidden_layers", c.num_hidden_layers},
      {"first_k_dense_replace", c.first_k_dense_replace},
      {"num_nextn_predict_layers", c.num_nextn_predict_layers},
      {"intermediate_size", c.intermediate_size},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"n_routed_experts", c.n_routed_experts},
      {"n_shared_experts", c.n_shared_experts},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_interleave", c.rope_interleave},
  };
  if (c.yarn) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", c.yarn->factor},
                         {"mscale", c.yarn->mscale},
                         {"mscale_all_dim", c.yarn->mscale_all_dim},
                         {"original_max_position_embeddings", c.yarn->original_max_position_embeddings},
                         {"beta_fast", c.yarn->beta_fast},
                         {"beta_slow", c.yarn->beta_slow}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

nlohmann::json synthetic_config_json(const SyntheticOptions& opts) {
  model::MlaConfig c = opts.model.config;
  c.num_nextn_predict_layers = 0;  // MTP layers are not generated
  c.first_k_dense_replace = std::min(c.first_k_dense_replace, c.num_hidden_layers);
  nlohmann::json j = opts.model.extra;
  j.update(mla_config_to_json(c));
  j.erase("quantization_config");  // a copied config may describe another format
  if (opts.format == SyntheticFormat::FP8) {
    j["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
  }
  return j;
}

std::vector<SyntheticTensor> plan_synthetic(const SyntheticOptions& opts) {
  const model::MlaConfig& c = opts.model.config;
  if (c.num_hidden_layers < 1) throw InputError("synthetic: num_hidden_layers must be >= 1, got " + std::to_string(c.num_hidden_layers));
  const DType lin = opts.format == SyntheticFormat::FP8 ? DType::F8_E4M3 : DType::BF16;
  std::vector<SyntheticTensor> out;
  auto add = [&](std::string name, Shape shape, SyntheticKind kind, DType dtype) {
    for (int64_t d : shape)
      if (d <= 0) throw InputError("synthetic: tensor '" + name + "' would have shape " + shape_to_string(shape));
    out.push_back({std::move(name), std::move(shape), kind, dtype});
  };
  const int64_t D = c.hidden_size, H = c.num_heads;
  add("model.embed_tokens.weight", {c.vocab_size, D}, SyntheticKind::Embedding, DType::BF16);
  add("model.norm.weight", {D}, SyntheticKind::Norm, DType::BF16);
  add("lm_head.weight", {c.vocab_size, D}, SyntheticKind::Linear, DType::BF16);
  const int64_t dense = std::min(c.first_k_dense_replace, c.num_hidden_layers);
  const int64_t experts = opts.experts < 0 ? c.n_routed_experts : std::min(opts.experts, c.n_routed_experts);
  const bool sigmoid_router = opts.model.extra.value("scoring_func", std::string()) == "sigmoid";
  auto mlp = [&](const std::string& p, int64_t inter) {
    add(p + "gate_proj.weight", {inter, D}, SyntheticKind::Linear, lin);
    add(p + "up_proj.weight", {inter, D}, SyntheticKind::Linear, lin);
    add(p + "down_proj.weight", {D, inter}, SyntheticKind::Linear, lin);
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string L = "model.layers." + std::to_string(i) + ".";
    add(L + "input_layernorm.weight", {D}, SyntheticKind::Norm, DType::BF16);
    add(L + "post_attention_layernorm.weight", {D}, SyntheticKind::Norm, DType::BF16);
    const std::string A = L + "self_attn.";
    if (c.has_q_lora()) {
      add(A + "q_a_proj.weight", {c.q_lora_rank, D}, SyntheticKind::Linear, lin);
      add(A + "q_a_layernorm.weight", {c.q_lora_rank}, SyntheticKind::Norm, DType::BF16);
      add(A + "q_b_proj.weight", {H * c.qk_head_dim(), c.q_lora_rank}, SyntheticKind::Linear, lin);
    } else {
      add(A + "q_proj.weight", {H * c.qk_head_dim(), D}, SyntheticKind::Linear, lin);
    }
    add(A + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, D}, SyntheticKind::Linear, lin);
    add(A + "kv_a_layernorm.weight", {c.kv_lora_rank}, SyntheticKind::Norm, DType::BF16);
    add(A + "kv_b_proj.weight", {H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, SyntheticKind::Linear, lin);
    add(A + "o_proj.weight", {D, H * c.v_head_dim}, SyntheticKind::Linear, lin);
    if (i < dense || c.n_routed_experts == 0) {
      mlp(L + "mlp.", c.intermediate_size);
    } else {
      add(L + "mlp.gate.weight", {c.n_routed_experts, D}, SyntheticKind::Linear, DType::BF16);
      if (sigmoid_router) add(L + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}, SyntheticKind::Bias, DType::F32);
      if (c.n_shared_experts > 0) mlp(L + "mlp.shared_experts.", c.n_shared_experts * c.moe_intermediate_size);
      for (int64_t e = 0; e < experts; ++e) mlp(L + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

GeneratedTensor generate_synthetic_tensor(const SyntheticTensor& t, uint64_t seed, int threads) {
  uint64_t s = seed ^ fnv1a64(t.name);
  const uint64_t tensor_seed = splitmix64(s);
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : t.shape[0];
  const double linear_std = 1.0 / std::sqrt(static_cast<double>(cols));
  const int64_t strips = (rows + kFp8BlockSize - 1) / kFp8BlockSize;
  const size_t numel = static_cast<size_t>(rows * cols);
  GeneratedTensor g;
  g.weight = OwnedTensor{t.name, t.dtype, t.shape, std::vector<std::byte>(numel * static_cast<size_t>(dtype_bits(t.dtype) / 8))};
  const bool fp8 = t.dtype == DType::F8_E4M3;
  const int64_t bc = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  if (fp8) {
    g.scale_inv = OwnedTensor{t.name + "_scale_inv", DType::F32, {strips, bc},
                              std::vector<std::byte>(static_cast<size_t>(strips * bc * 4))};
  }
  parallel_for(strips, resolve_threads(threads), [&](int64_t k) {
    uint64_t ss = tensor_seed + static_cast<uint64_t>(k) * 0xD1B54A32D192ED03ull;
    Xoshiro256 rng(splitmix64(ss));
    const int64_t r0 = k * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
    if (fp8) {
      MatrixR strip(r1 - r0, cols);
      for (int64_t i = 0; i < strip.rows(); ++i)
        for (int64_t j = 0; j < cols; ++j) strip(i, j) = sample(t.kind, rng, linear_std);
      const Fp8Block q = quantize_fp8_block(t.name, strip);
      std::memcpy(g.weight.bytes.data() + r0 * cols, q.weight.bytes.data(), q.weight.bytes.size());
      std::memcpy(g.scale_inv.bytes.data() + k * bc * 4, q.scale_inv.bytes.data(), q.scale_inv.bytes.size());
      return;
    }
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t idx = static_cast<size_t>(i * cols + j);
        const double v = sample(t.kind, rng, linear_std);
        if (t.dtype == DType::F32) {
          const float f = static_cast<float>(v);
          std::memcpy(g.weight.bytes.data() + idx * 4, &f, 4);
        } else {  // BF16
          const uint16_t b = float_to_bf16(static_cast<float>(v));
          std::memcpy(g.weight.bytes.data() + idx * 2, &b, 2);
        }
      }
  });
  return g;
}

SyntheticResult write_synthetic_checkpoint(const SyntheticOptions& opts, const fs::path& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<SyntheticTensor> plan = plan_synthetic(opts);
  std::vector<TensorSpec> specs;
  SyntheticResult result;
  for (const auto& t : plan) {
    specs.push_back({t.name, t.dtype, t.shape});
    result.parameters += shape_numel(t.shape);
    if (t.dtype == DType::F8_E4M3)
      specs.push_back({t.name + "_scale_inv", DType::F32, fp8_scale_shape(t.shape[0], t.shape[1])});
  }
  result.shards = plan_shards(specs, opts.max_shard_bytes);
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"generator", "mla-synth (synthetic random weights)"},
      {"seed", std::to_string(opts.seed)},
  };

  AtomicDirectory dir(out, opts.overwrite);
  // Every shard's writer is open at once: a weight and its scale may land in different shards.
  std::vector<std::unique_ptr<StreamingFileWriter>> writers;
  std::map<std::string, size_t> shard_of_file;
  for (size_t i = 0; i < result.shards.file_names.size(); ++i) {
    writers.push_back(std::make_unique<StreamingFileWriter>(dir.tmp_path() / result.shards.file_names[i],
                                                            result.shards.shards[i], metadata));
    shard_of_file[result.shards.file_names[i]] = i;
  }
  auto writer_for = [&](const std::string& tensor) -> StreamingFileWriter& {
    return *writers[shard_of_file.at(result.shards.weight_map.at(tensor))];
  };
  // One tensor in memory at a time (the largest bounds the footprint: a V3 embedding, 1.8 GB).
  for (const auto& t : plan) {
    const GeneratedTensor g = generate_synthetic_tensor(t, opts.seed, opts.threads);
    writer_for(t.name).write(t.name, g.weight.bytes);
    if (!g.scale_inv.name.empty()) writer_for(g.scale_inv.name).write(g.scale_inv.name, g.scale_inv.bytes);
  }
  for (auto& w : writers) w->finish();
  if (result.shards.file_names.size() > 1) {
    std::ofstream idx(dir.tmp_path() / std::string(kIndexFileName), std::ios::binary);
    idx << index_json(result.shards);
    if (!idx.flush()) throw Error((dir.tmp_path() / std::string(kIndexFileName)).string() + ": write failed");
  }
  {
    std::ofstream cfg(dir.tmp_path() / "config.json", std::ios::binary);
    cfg << synthetic_config_json(opts).dump(2) << "\n";
    if (!cfg.flush()) throw Error((dir.tmp_path() / "config.json").string() + ": write failed");
  }
  for (const auto& e : fs::directory_iterator(dir.tmp_path()))
    if (e.is_regular_file()) result.file_bytes += e.file_size();
  dir.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace mla::io
