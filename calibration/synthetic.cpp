#include "calibration/synthetic.hpp"

#include <hdf5.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include "core/error.hpp"
#include "io/capture.hpp"
#include "io/hdf5.hpp"

namespace mla::calib {

namespace {

constexpr int kTableBits = 16;

// Phi^-1((j + 0.5) / 2^16) by bisection on erfc, rescaled so the table's mean square is 1.
const std::array<float, 1u << kTableBits>& normal_table() {
  static const auto table = [] {
    std::array<float, 1u << kTableBits> t{};
    const int n = 1 << kTableBits;
    std::vector<double> z(static_cast<std::size_t>(n));
    double ms = 0;
    for (int j = 0; j < n; ++j) {
      const double p = (j + 0.5) / n;  // Phi(z) = 0.5 erfc(-z / sqrt 2)
      double lo = -10, hi = 10;
      for (int it = 0; it < 80; ++it) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
      }
      z[static_cast<std::size_t>(j)] = 0.5 * (lo + hi);
      ms += z[static_cast<std::size_t>(j)] * z[static_cast<std::size_t>(j)];
    }
    const double k = 1.0 / std::sqrt(ms / n);
    for (int j = 0; j < n; ++j) t[static_cast<std::size_t>(j)] = static_cast<float>(z[static_cast<std::size_t>(j)] * k);
    return t;
  }();
  return table;
}

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Sequence s of one dataset: T * width values, stored as `dtype` into `out` (bytes).
void generate(uint64_t key, int64_t T, int64_t width, const std::vector<double>* scale, io::StoredType dtype,
              std::vector<unsigned char>& out) {
  const auto& tab = normal_table();
  const std::size_t n = static_cast<std::size_t>(T * width);
  out.resize(n * io::stored_bytes(dtype));
  float* f = reinterpret_cast<float*>(out.data());
  uint16_t* h = reinterpret_cast<uint16_t*>(out.data());
  const bool scaled = scale && !scale->empty();
  for (std::size_t i0 = 0; i0 < n; i0 += 4) {
    const uint64_t r = mix64(key + (i0 / 4 + 1) * 0x9e3779b97f4a7c15ull);
    for (std::size_t j = 0; j < 4 && i0 + j < n; ++j) {
      const std::size_t i = i0 + j;
      float v = tab[(r >> (16 * j)) & 0xffffu];
      if (scaled) v = static_cast<float>(v * (*scale)[i % static_cast<std::size_t>(width)]);
      if (dtype == io::StoredType::BF16) h[i] = float_to_bf16(v);
      else f[i] = v;
    }
  }
}

}  // namespace

void write_synthetic_capture(const std::string& path, const model::MlaConfig& cfg,
                             const SyntheticCaptureSpec& spec) {
  if (spec.dtype != io::StoredType::F32 && spec.dtype != io::StoredType::BF16)
    throw InputError("synthetic capture: dtype must be float32 or bfloat16");
  io::h5::write_atomically(path, [&](io::h5::File& f) {
    auto& root = f.root();
    io::CaptureMeta meta;
    meta.model_type = cfg.model_type;
    meta.num_layers = spec.num_layers;
    meta.hidden_size = cfg.hidden_size;
    meta.source = "synthetic seed " + std::to_string(spec.seed) + " (" + io::stored_type_name(spec.dtype) + ")";
    meta.corpus_sha256 = "synthetic";
    meta.checkpoint_fingerprint = spec.fingerprint;
    io::write_capture_attributes(root, meta);
    const auto S = static_cast<uint64_t>(spec.sequences), T = static_cast<uint64_t>(spec.seq_len);
    std::vector<int32_t> tokens(S * T, 1);
    root.write<int32_t>("calib/tokens", {S, T}, tokens.data());
    const hid_t ftype = spec.dtype == io::StoredType::BF16 ? io::make_bf16_h5_type() : H5Tcopy(H5T_IEEE_F32LE);
    for (int64_t l = 0; l < spec.num_layers; ++l) {
      auto group = root.require_group("calib/" + io::h5::layer_group_name(l));
      auto emit = [&](const char* ds, uint64_t width, const std::vector<double>* scale, uint64_t ds_id) {
        const std::string where = f.path().string() + ": " + group.path() + "/" + ds;
        hsize_t dims[3] = {S, T, width}, chunk[3] = {1, T, width};
        const hid_t space = H5Screate_simple(3, dims, nullptr);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_obj_track_times(dcpl, 0);
        if (S > 0 && T > 0 && width > 0) H5Pset_chunk(dcpl, 3, chunk);
        const hid_t d = H5Dcreate2(group.id(), ds, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Pclose(dcpl);
        H5Sclose(space);
        if (d < 0) throw InputError(where + ": cannot create dataset");
        const uint64_t key = mix64(spec.seed ^ mix64((static_cast<uint64_t>(l) << 8) | ds_id));
        auto gen = [&](uint64_t s, std::vector<unsigned char>& buf) {
          generate(mix64(key + s), static_cast<int64_t>(T), static_cast<int64_t>(width), scale, spec.dtype, buf);
        };
        // Two sequences generated in parallel (one on a helper thread) while the previous two
        // are written.
        auto gen_pair = [&](uint64_t s0, std::array<std::vector<unsigned char>, 2>& b) {
          std::thread helper;
          if (s0 + 1 < S) helper = std::thread([&] { gen(s0 + 1, b[1]); });
          gen(s0, b[0]);
          if (helper.joinable()) helper.join();
        };
        std::array<std::array<std::vector<unsigned char>, 2>, 2> bufs;
        std::future<void> pending;
        if (S > 0) pending = std::async(std::launch::async, gen_pair, 0, std::ref(bufs[0]));
        for (uint64_t s0 = 0, k = 0; s0 < S; s0 += 2, k ^= 1) {
          pending.get();
          if (s0 + 2 < S) pending = std::async(std::launch::async, gen_pair, s0 + 2, std::ref(bufs[k ^ 1]));
          for (uint64_t s = s0; s < std::min(S, s0 + 2); ++s) {
            const hid_t fs = H5Dget_space(d);
            hsize_t start[3] = {s, 0, 0}, count[3] = {1, T, width};
            herr_t st = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
            const hid_t ms = H5Screate_simple(3, count, nullptr);
            if (st >= 0) st = H5Dwrite(d, ftype, ms, fs, H5P_DEFAULT, bufs[k][s - s0].data());
            H5Sclose(ms);
            H5Sclose(fs);
            if (st < 0) {
              if (pending.valid()) pending.wait();
              H5Dclose(d);
              throw InputError(where + ": write of sequence " + std::to_string(s) + " failed");
            }
          }
        }
        H5Dclose(d);
      };
      if (spec.latent) {
        emit("latent", static_cast<uint64_t>(cfg.kv_lora_rank), &spec.channel_scale, 1);
        emit("k_pe", static_cast<uint64_t>(cfg.qk_rope_head_dim), nullptr, 2);
      } else {
        emit("hidden", static_cast<uint64_t>(cfg.hidden_size), nullptr, 3);
      }
    }
    H5Tclose(ftype);
  });
}

}  // namespace mla::calib
