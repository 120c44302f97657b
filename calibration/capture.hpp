#pragma once
// Reader of activation captures (schema "mla-capture/1", docs/formats/capture.md), streamed
// one sequence at a time so memory does not grow with the number of sequences.
//
//   root attrs: schema, model_type, num_layers, hidden_size, source, corpus_sha256,
//               optional checkpoint_fingerprint
//   /calib, /eval: tokens int32 [S, T]; per layer i `layer_{i:02d}/hidden` [S, T, D]
//                  or `layer_{i:02d}/latent` [S, T, d_c] + `layer_{i:02d}/k_pe` [S, T, d_r]
//                  (k_pe with RoPE applied at position t, as the cache holds it), each float32
//                  or bfloat16 (any other float type is converted by HDF5, slowly).
// Token t of a sequence sits at position t.
//
// Pass 1 streams through SequencePrefetch: a background thread reads the next sequences
// (`depth` ahead) while the caller computes. Unfiltered datasets chunked one sequence per chunk
// (what every writer of the project produces) are read as raw chunk bytes by pread on the file,
// with O_DIRECT when the capture is larger than half the machine's memory (the page cache
// cannot hold it anyway; direct reads cost no CPU copies), else through the page cache; other
// layouts go through H5Dread.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "calibration/bf16.hpp"
#include "core/tensor.hpp"
#include "io/capture.hpp"
#include "io/hdf5.hpp"
#include "model/config.hpp"

namespace mla::calib {

// The root attributes (io::CaptureMeta; absent optional ones read as empty) and what the
// calibration reader adds.
struct CaptureInfo : io::CaptureMeta {
  std::string path;
  int64_t sequences = 0;               // S of /calib
  int64_t seq_len = 0;                 // T
  bool has_hidden = false;             // else latent + k_pe
  uint64_t file_bytes = 0;
  StoredType latent_type = StoredType::F32;  // of layer 0's hidden or latent dataset
};

// One sequence of one dataset: rows x width values of `type` (F32 or BF16), row-major.
struct RawRows {
  const void* data = nullptr;
  StoredType type = StoredType::F32;
  int64_t rows = 0, width = 0;
  std::size_t bytes() const { return static_cast<std::size_t>(rows * width) * stored_bytes(type); }
  float at(int64_t i) const {
    return type == StoredType::BF16 ? bf16_to_float(static_cast<const uint16_t*>(data)[i])
                                    : static_cast<const float*>(data)[i];
  }
};

enum class IoMode { Auto, Direct, Buffered, Hdf5 };

class SequencePrefetch;

class Capture {
 public:
  // Opens and validates the capture against the model (layer count, widths, element types).
  // `split` is "calib" or "eval". Throws InputError naming the file, object and bad value.
  Capture(const std::filesystem::path& path, const model::MlaConfig& cfg,
          const std::string& split = "calib");
  ~Capture();
  const CaptureInfo& info() const { return info_; }
  // How SequencePrefetch reads (Auto: Direct when the file is larger than half the RAM).
  void set_io_mode(IoMode m) { io_mode_ = m; }
  IoMode effective_io_mode() const;

  // Sequence s of layer `layer`: either h [T, D] (has_hidden) or c [T, d_c] and k_pe [T, d_r],
  // widened to float64. Every row is checked finite; a bad row throws InputError naming
  // layer, sequence, token.
  MatrixR read_hidden(int64_t layer, int64_t s) const;
  void read_latent(int64_t layer, int64_t s, MatrixR& c, MatrixR& k_pe) const;
  // Sequence s of `layer_{layer}/{what}` as stored (F32 or BF16; other float types converted
  // to F32 by HDF5) into `buf` (resized, reused), checked finite. Thread-safe: HDF5 calls are
  // serialised by a process-wide mutex.
  RawRows read_raw(int64_t layer, int64_t s, const char* what, std::vector<unsigned char>& buf) const;
  int64_t width(const char* what) const;

 private:
  friend class SequencePrefetch;
  struct Impl;
  std::string layer_path(int64_t layer, const char* what) const;
  // Throws the InputError naming the first non-finite value of `r` (scan only on failure).
  void check_finite(const RawRows& r, int64_t layer, int64_t s, const char* what) const;
  io::h5::File file_;
  std::unique_ptr<Impl> impl_;
  std::string split_;
  model::MlaConfig cfg_;
  CaptureInfo info_;
  IoMode io_mode_ = IoMode::Auto;
};

// Reads sequences `seqs` (in that order) of the datasets `what` of one layer on a background
// thread, up to `depth` sequences ahead of the consumer; each checked finite.
class SequencePrefetch {
 public:
  SequencePrefetch(const Capture& cap, int64_t layer, std::vector<std::string> what,
                   std::vector<int64_t> seqs, int depth = 4);
  ~SequencePrefetch();
  SequencePrefetch(const SequencePrefetch&) = delete;
  SequencePrefetch& operator=(const SequencePrefetch&) = delete;
  // The next sequence: one RawRows per entry of `what`, valid until the next call. Rethrows
  // the reader's error (e.g. a non-finite value) for the sequence it happened on.
  const std::vector<RawRows>& next();
  double wait_seconds() const { return wait_s_; }  // consumer time spent waiting for data

 private:
  struct State;
  std::unique_ptr<State> st_;
  double wait_s_ = 0;
};

}  // namespace mla::calib
