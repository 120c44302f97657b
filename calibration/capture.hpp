#pragma once
// Reader of activation captures (schema "mla-capture/1", docs/formats/capture.md), streamed
// one sequence at a time so memory does not grow with the number of sequences.
//
//   root attrs: schema, model_type, num_layers, hidden_size, source, corpus_sha256,
//               optional checkpoint_fingerprint
//   /calib, /eval: tokens int32 [S, T]; per layer i `layer_{i:02d}/hidden` f32 [S, T, D]
//                  or `layer_{i:02d}/latent` f32 [S, T, d_c] + `layer_{i:02d}/k_pe` f32 [S, T, d_r]
//                  (k_pe with RoPE applied at position t, as the cache holds it).
// Token t of a sequence sits at position t.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/hdf5.hpp"
#include "model/config.hpp"

namespace mla::calib {

struct CaptureInfo {
  std::string path;
  std::string model_type;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  std::string source;
  std::string corpus_sha256;
  std::string checkpoint_fingerprint;  // empty when absent
  int64_t sequences = 0;               // S of /calib
  int64_t seq_len = 0;                 // T
  bool has_hidden = false;             // else latent + k_pe
};

class Capture {
 public:
  // Opens and validates the capture against the model (layer count, widths). `split` is
  // "calib" or "eval". Throws InputError naming the file, object and bad value.
  Capture(const std::filesystem::path& path, const model::MlaConfig& cfg,
          const std::string& split = "calib");
  const CaptureInfo& info() const { return info_; }

  // Sequence s of layer `layer`: either h [T, D] (has_hidden) or c [T, d_c] and k_pe [T, d_r].
  // Every row is checked finite; a bad row throws InputError naming layer, sequence, token.
  MatrixR read_hidden(int64_t layer, int64_t s) const;
  void read_latent(int64_t layer, int64_t s, MatrixR& c, MatrixR& k_pe) const;
  // Fast path of pass 1: the float rows of sequence s of `layer_{layer}/{what}` into `out`
  // (resized to T * width, storage reused between calls), finiteness checked with a
  // vectorised scan (the slow scan runs only to name the bad element). Thread-safe: HDF5
  // calls are serialised by a process-wide mutex.
  void read_rows_f(int64_t layer, int64_t s, const char* what, std::vector<float>& out) const;

 private:
  std::string layer_path(int64_t layer, const char* what) const;
  io::h5::File file_;
  std::shared_ptr<void> raw_;  // raw HDF5 file handle for read_rows_f (capture.cpp)
  std::string split_;
  model::MlaConfig cfg_;
  CaptureInfo info_;
};

}  // namespace mla::calib
