#include "calibration/capture.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace mla::calib {

namespace {
std::string dims_str(const io::h5::Dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

std::string Capture::layer_path(int64_t layer, const char* what) const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "layer_%02lld/%s", static_cast<long long>(layer), what);
  return split_ + "/" + buf;
}

Capture::Capture(const std::filesystem::path& path, const model::MlaConfig& cfg,
                 const std::string& split)
    : file_(io::h5::File::open_read(path)), split_(split), cfg_(cfg) {
  const auto& root = file_.root();
  info_.path = path.string();
  const std::string where = "capture " + info_.path;
  if (!root.has_attr("schema") || root.attr_string("schema") != "mla-capture/1") {
    throw InputError(where + ": root attribute 'schema' must be \"mla-capture/1\", got " +
                     (root.has_attr("schema") ? "\"" + root.attr_string("schema") + "\"" : "none"));
  }
  info_.model_type = root.has_attr("model_type") ? root.attr_string("model_type") : "";
  info_.num_layers = root.attr_int("num_layers");
  info_.hidden_size = root.attr_int("hidden_size");
  info_.source = root.has_attr("source") ? root.attr_string("source") : "";
  info_.corpus_sha256 = root.has_attr("corpus_sha256") ? root.attr_string("corpus_sha256") : "";
  if (root.has_attr("checkpoint_fingerprint"))
    info_.checkpoint_fingerprint = root.attr_string("checkpoint_fingerprint");
  if (info_.num_layers != cfg.attention_layers() && info_.num_layers != cfg.num_hidden_layers) {
    throw InputError(where + ": attribute num_layers = " + std::to_string(info_.num_layers) +
                     " does not match the model's " + std::to_string(cfg.num_hidden_layers) +
                     " layers");
  }
  if (info_.hidden_size != cfg.hidden_size) {
    throw InputError(where + ": attribute hidden_size = " + std::to_string(info_.hidden_size) +
                     " does not match the model's hidden_size " + std::to_string(cfg.hidden_size));
  }
  if (!root.exists(split_)) throw InputError(where + ": group /" + split_ + " is missing");
  const auto tokens = root.open(split_ + "/tokens").dims();
  if (tokens.size() != 2) {
    throw InputError(where + ": /" + split_ + "/tokens must be 2-D [S, T], got " + dims_str(tokens));
  }
  info_.sequences = static_cast<int64_t>(tokens[0]);
  info_.seq_len = static_cast<int64_t>(tokens[1]);
  if (info_.sequences == 0 || info_.seq_len == 0) {
    throw InputError(where + ": /" + split_ + " is empty (tokens " + dims_str(tokens) + ")");
  }
  info_.has_hidden = root.exists(layer_path(0, "hidden"));
  // Validate every layer's shapes up front so a mismatch fails before hours of work.
  for (int64_t l = 0; l < info_.num_layers; ++l) {
    auto check = [&](const char* what, int64_t width) {
      const std::string p = layer_path(l, what);
      if (!root.exists(p)) throw InputError(where + ": dataset /" + p + " is missing");
      const auto d = root.open(p).dims();
      const io::h5::Dims want{tokens[0], tokens[1], static_cast<uint64_t>(width)};
      if (d != want) {
        throw InputError(where + ": dataset /" + p + " has shape " + dims_str(d) + ", expected " +
                         dims_str(want));
      }
    };
    if (info_.has_hidden) {
      check("hidden", cfg.hidden_size);
    } else {
      check("latent", cfg.kv_lora_rank);
      check("k_pe", cfg.qk_rope_head_dim);
    }
  }
}

namespace {
MatrixR read_rows_checked(const io::h5::Group& root, const std::string& path, int64_t s,
                          int64_t T, int64_t width, const std::string& file) {
  const auto v = root.open(path).read_rows<float>(static_cast<uint64_t>(s), 1);
  MatrixR m(T, width);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      const float x = v[static_cast<std::size_t>(t * width + i)];
      if (!std::isfinite(x)) {
        throw InputError("capture " + file + ": dataset /" + path + " sequence " +
                         std::to_string(s) + " token " + std::to_string(t) + " column " +
                         std::to_string(i) + " is " + (std::isnan(x) ? "NaN" : "Inf") +
                         " (row " + std::to_string(s * T + t) + ")");
      }
      m(t, i) = x;
    }
  }
  return m;
}
}  // namespace

MatrixR Capture::read_hidden(int64_t layer, int64_t s) const {
  return read_rows_checked(file_.root(), layer_path(layer, "hidden"), s, info_.seq_len,
                           cfg_.hidden_size, info_.path);
}

void Capture::read_latent(int64_t layer, int64_t s, MatrixR& c, MatrixR& k_pe) const {
  c = read_rows_checked(file_.root(), layer_path(layer, "latent"), s, info_.seq_len,
                        cfg_.kv_lora_rank, info_.path);
  k_pe = read_rows_checked(file_.root(), layer_path(layer, "k_pe"), s, info_.seq_len,
                           cfg_.qk_rope_head_dim, info_.path);
}

}  // namespace mla::calib
