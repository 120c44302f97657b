#include "calibration/synthetic.hpp"

#include <cstdio>
#include <filesystem>
#include <random>

#include "io/hdf5.hpp"

namespace mla::calib {

void write_synthetic_capture(const std::string& path, const model::MlaConfig& cfg,
                             const SyntheticCaptureSpec& spec) {
  const std::string tmp = path + ".tmp";
  {
    auto f = io::h5::File::create(tmp);
    auto& root = f.root();
    root.set_attr("schema", "mla-capture/1");
    root.set_attr("model_type", cfg.model_type);
    root.set_attr("num_layers", spec.num_layers);
    root.set_attr("hidden_size", cfg.hidden_size);
    root.set_attr("source", "synthetic seed " + std::to_string(spec.seed));
    root.set_attr("corpus_sha256", "synthetic");
    if (!spec.fingerprint.empty()) root.set_attr("checkpoint_fingerprint", spec.fingerprint);
    const auto S = static_cast<uint64_t>(spec.sequences), T = static_cast<uint64_t>(spec.seq_len);
    std::vector<int32_t> tokens(S * T, 1);
    root.write<int32_t>("calib/tokens", {S, T}, tokens.data());
    std::mt19937_64 rng(spec.seed);
    std::normal_distribution<float> nd;
    for (int64_t l = 0; l < spec.num_layers; ++l) {
      const std::string name = "calib/" + io::h5::layer_group_name(l) + "/";
      auto emit = [&](const std::string& ds, uint64_t width, const std::vector<double>* scale) {
        auto d = root.create<float>(name + ds, {S, T, width}, 1);
        std::vector<float> buf(T * width);
        for (uint64_t s = 0; s < S; ++s) {
          for (uint64_t i = 0; i < buf.size(); ++i) {
            const double sc = (scale && !scale->empty()) ? (*scale)[i % width] : 1.0;
            buf[i] = static_cast<float>(nd(rng) * sc);
          }
          d.write_rows<float>(s, 1, buf.data());
        }
      };
      if (spec.latent) {
        emit("latent", static_cast<uint64_t>(cfg.kv_lora_rank), &spec.channel_scale);
        emit("k_pe", static_cast<uint64_t>(cfg.qk_rope_head_dim), nullptr);
      } else {
        emit("hidden", static_cast<uint64_t>(cfg.hidden_size), nullptr);
      }
    }
    f.flush();
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace mla::calib
