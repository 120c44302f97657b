#include "calibration/capture.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.hpp"

namespace mla::calib {

namespace {
// Raw handles for the streaming reads: one H5Fopen of the capture and the datasets opened
// once each (opening a dataset per sequence costs more than reading 4096 cached rows).
struct RawFile {
  hid_t file = H5I_INVALID_HID;
  std::map<std::string, hid_t> datasets;
  ~RawFile() {
    for (auto& kv : datasets) H5Dclose(kv.second);
    if (file >= 0) H5Fclose(file);
  }
};

std::string dims_str(const io::h5::Dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

std::string Capture::layer_path(int64_t layer, const char* what) const {
  return split_ + "/" + io::h5::layer_group_name(layer) + "/" + what;
}

Capture::Capture(const std::filesystem::path& path, const model::MlaConfig& cfg,
                 const std::string& split)
    : file_(io::h5::File::open_read(path)), raw_(std::make_shared<RawFile>()), split_(split), cfg_(cfg) {
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
// One lock for every HDF5 call of the calibration readers: pass 1/2 run layers on worker
// threads, and the io::h5 wrappers keep no locks of their own.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// True when no element is NaN or Inf: exponent bits all ones. Branch-free OR over the bits,
// which the compiler vectorises (the element-wise std::isfinite loop does not).
bool all_finite(const float* x, std::size_t n) {
  uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// Throws the InputError naming the first non-finite element (called only after all_finite
// failed, so the slow scan never runs on good data).
void check_finite(const float* v, int64_t s, int64_t T, int64_t width, const std::string& path,
                  const std::string& file) {
  if (all_finite(v, static_cast<std::size_t>(T * width))) return;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      const float x = v[static_cast<std::size_t>(t * width + i)];
      if (!std::isfinite(x)) {
        throw InputError("capture " + file + ": dataset /" + path + " sequence " +
                         std::to_string(s) + " token " + std::to_string(t) + " column " +
                         std::to_string(i) + " is " + (std::isnan(x) ? "NaN" : "Inf") +
                         " (row " + std::to_string(s * T + t) + ")");
      }
    }
  }
}

MatrixR read_rows_checked(const io::h5::Group& root, const std::string& path, int64_t s,
                          int64_t T, int64_t width, const std::string& file) {
  std::vector<float> v;
  {
    std::lock_guard<std::mutex> lock(h5_mutex());
    v = root.open(path).read_rows<float>(static_cast<uint64_t>(s), 1);
  }
  check_finite(v.data(), s, T, width, path, file);
  MatrixR m(T, width);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < width; ++i) m(t, i) = v[static_cast<std::size_t>(t * width + i)];
  return m;
}
}  // namespace

void Capture::read_rows_f(int64_t layer, int64_t s, const char* what, std::vector<float>& out) const {
  const std::string path = layer_path(layer, what);
  const int64_t T = info_.seq_len;
  const int64_t width = std::string(what) == "hidden" ? cfg_.hidden_size
                        : std::string(what) == "latent" ? cfg_.kv_lora_rank
                                                         : cfg_.qk_rope_head_dim;
  out.resize(static_cast<std::size_t>(T * width));
  {
    std::lock_guard<std::mutex> lock(h5_mutex());
    auto* raw = static_cast<RawFile*>(raw_.get());
    const std::string where = "capture " + info_.path + ": dataset /" + path;
    if (raw->file < 0) {
      raw->file = H5Fopen(info_.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      if (raw->file < 0) throw InputError("capture " + info_.path + ": cannot reopen for reading");
    }
    auto it = raw->datasets.find(path);
    if (it == raw->datasets.end()) {
      const hid_t d = H5Dopen2(raw->file, path.c_str(), H5P_DEFAULT);
      if (d < 0) throw InputError(where + ": cannot open");
      it = raw->datasets.emplace(path, d).first;
    }
    const hid_t fs = H5Dget_space(it->second);
    hsize_t start[3] = {static_cast<hsize_t>(s), 0, 0};
    hsize_t count[3] = {1, static_cast<hsize_t>(T), static_cast<hsize_t>(width)};
    herr_t st = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hid_t ms = H5Screate_simple(3, count, nullptr);
    if (st >= 0) st = H5Dread(it->second, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out.data());
    H5Sclose(ms);
    H5Sclose(fs);
    if (st < 0) throw InputError(where + ": read of sequence " + std::to_string(s) + " failed");
  }
  check_finite(out.data(), s, T, width, path, info_.path);
}

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
