#pragma once
// Captured activations in HDF5, schema "mla-capture/1" (docs/formats/capture.md):
//   root attrs: schema = "mla-capture/1", model_type, num_layers, hidden_size, source,
//               corpus_sha256, checkpoint_fingerprint (optional; io::fingerprint)
//   /calib, /eval (optional each):
//       tokens                 int32   [S, T]
//       layer_{i:02d}/hidden   float32 [S, T, D]  attention input after input_layernorm,
//                                                 token t at position t; one sequence a chunk
//   /reference (optional): tokens int32 [R, T]; layer_{i:02d}/hidden, layer_{i:02d}/attn_out
//       float32 [R, T, D] (attn_out: after o_proj); logits float32 [R, T, V]
// Writers produce it from datasets/capture_activations.py (transformers) or from the C++
// dense forward (write_dense_capture, used by `mla-forward capture`). One reader,
// CaptureReader, streams one sequence at a time, so captures larger than memory are fine. It
// opens a capture in one of two ways:
//   - whole file (verify-decode, mla-forward, tests): every group's hidden / attn_out / logits
//     shapes checked; tokens(), hidden(), attn_out(), logits() of one sequence as float32.
//   - one split against a model (mla-calibrate): `layer_{i:02d}/hidden` [S, T, D] or
//     `layer_{i:02d}/latent` [S, T, d_c] + `layer_{i:02d}/k_pe` [S, T, d_r] (k_pe with RoPE
//     applied at position t, as the cache holds it), float32 or bfloat16 (any other float type
//     is converted by HDF5, slowly), checked against the model's layers and widths; read_raw()
//     as stored, read_hidden() / read_latent() widened to float64, or SequencePrefetch: a
//     background thread reads the next sequences (`depth` ahead) while the caller computes.
//     Unfiltered datasets chunked one sequence per chunk (what every writer of the project
//     produces) are read as raw chunk bytes by pread on the file, with O_DIRECT when the capture
//     is larger than half the machine's memory (the page cache cannot hold it anyway; direct
//     reads cost no CPU copies), else through the page cache; other layouts go through H5Dread.
// Its reads hold one process-wide lock around their HDF5 calls, so a reader may be shared by
// threads (mla-calibrate's layer workers and their prefetch threads).
#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "io/hdf5.hpp"
#include "model/config.hpp"
#include "model/dense_forward.hpp"

namespace mla::io {

inline constexpr const char* kCaptureSchema = "mla-capture/1";

struct CaptureMeta {
  std::string model_type;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  std::string source;
  std::string corpus_sha256;
  std::string checkpoint_fingerprint;  // empty when absent
};

// Dimensions of one group as found in the file.
struct CaptureGroupInfo {
  std::string name;
  int64_t sequences = 0;  // S (or R)
  int64_t seq_len = 0;    // T
  int64_t vocab = 0;      // V of /reference logits, 0 elsewhere
  bool has_attn_out = false;
};

// How a capture dataset stores its values (little-endian in the file).
enum class StoredType : uint8_t {
  F32,   // IEEE float32 little-endian: read raw
  BF16,  // bfloat16 (the top 16 bits of a float32): read raw, widened in C++
  OTHER  // another float type (float64, big-endian float32, ...): HDF5 converts it to float32
};
const char* stored_type_name(StoredType t);
inline std::size_t stored_bytes(StoredType t) { return t == StoredType::BF16 ? 2 : 4; }
// A new HDF5 datatype describing bfloat16 (little-endian): an IEEE-style float of 16 bits (sign
// 15, exponent 7..14 with bias 127, mantissa 0..6); the caller closes it (H5Tclose).
hid_t make_bf16_h5_type();
// Classifies a dataset's file type; `description` (when given) gets a readable name of the
// type for error messages. Non-float classes (integers, strings, ...) return false.
bool classify_h5_float_type(hid_t file_type, StoredType& out, std::string* description = nullptr);

// What a reader opened on one split against a model knows: the root attributes (absent
// optional ones read as empty) and the split's dimensions.
struct CaptureInfo : CaptureMeta {
  std::string path;
  int64_t sequences = 0;               // S of the split
  int64_t seq_len = 0;                 // T
  bool has_hidden = false;             // else latent + k_pe
  uint64_t file_bytes = 0;
  StoredType latent_type = StoredType::F32;  // of layer 0's hidden or latent dataset
};

// One sequence of one dataset: rows x width values of `type` (F32 or BF16), row-major.
// `data` may be unaligned: a chunk read by pread lies at whatever file offset HDF5 gave it
// (O_DIRECT reads start at the 4096-aligned offset below), so values are loaded by memcpy
// (found by fuzz_capture_h5_recipe: a misaligned float load under UBSan).
struct RawRows {
  const void* data = nullptr;
  StoredType type = StoredType::F32;
  int64_t rows = 0, width = 0;
  std::size_t bytes() const { return static_cast<std::size_t>(rows * width) * stored_bytes(type); }
  float at(int64_t i) const {
    const auto* p = static_cast<const unsigned char*>(data);
    if (type == StoredType::BF16) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, sizeof b);
      return bf16_to_float(b);
    }
    float f;
    std::memcpy(&f, p + 4 * i, sizeof f);
    return f;
  }
};

// How SequencePrefetch reads (Auto: Direct when the file is larger than half the RAM).
enum class IoMode { Auto, Direct, Buffered, Hdf5 };

class SequencePrefetch;

class CaptureReader {
 public:
  // Whole file: schema string, root attributes, and for every group present the shapes of
  // tokens and of every layer's datasets (InputError names the file, the dataset path and the
  // bad shape/value).
  explicit CaptureReader(const std::filesystem::path& path);
  // One split ("calib" or "eval") against a model: layer count, hidden size, the split's
  // datasets' shapes and element types; the datasets are opened for streaming. InputError
  // "capture <file>: ..." names the object and the bad value.
  CaptureReader(const std::filesystem::path& path, const model::MlaConfig& cfg, const std::string& split = "calib");
  ~CaptureReader();
  CaptureReader(const CaptureReader&) = delete;
  CaptureReader& operator=(const CaptureReader&) = delete;

  const CaptureMeta& meta() const { return info_; }
  bool has_group(const std::string& group) const;
  CaptureGroupInfo group_info(const std::string& group) const;
  std::vector<int32_t> tokens(const std::string& group, int64_t seq) const;           // [T]
  std::vector<float> hidden(const std::string& group, int64_t layer, int64_t seq) const;   // [T*D]
  std::vector<float> attn_out(const std::string& group, int64_t layer, int64_t seq) const; // [T*D]
  std::vector<float> logits(const std::string& group, int64_t seq) const;             // [T*V]

  // ---- opened on one split against a model ----
  const CaptureInfo& info() const { return info_; }
  void set_io_mode(IoMode m) { io_mode_ = m; }
  IoMode effective_io_mode() const;
  // Sequence s of layer `layer`: either h [T, D] (has_hidden) or c [T, d_c] and k_pe [T, d_r],
  // widened to float64. Every row is checked finite; a bad row throws InputError naming
  // layer, sequence, token.
  MatrixR read_hidden(int64_t layer, int64_t s) const;
  void read_latent(int64_t layer, int64_t s, MatrixR& c, MatrixR& k_pe) const;
  // Sequence s of `layer_{layer}/{what}` as stored (F32 or BF16; other float types converted
  // to F32 by HDF5) into `buf` (resized, reused), checked finite. Thread-safe.
  RawRows read_raw(int64_t layer, int64_t s, const char* what, std::vector<unsigned char>& buf) const;
  int64_t width(const char* what) const;

 private:
  friend class SequencePrefetch;
  struct Impl;
  std::string layer_path(int64_t layer, const char* what) const;
  // Throws the InputError naming the first non-finite value of `r` (scan only on failure).
  void check_finite(const RawRows& r, int64_t layer, int64_t s, const char* what) const;
  h5::File file_;
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
  SequencePrefetch(const CaptureReader& cap, int64_t layer, std::vector<std::string> what,
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

// Layer dataset name inside a group: "layer_03/hidden".
std::string capture_layer_path(int64_t layer, const std::string& what);

// The schema's root attributes from `meta` (schema tag first; checkpoint_fingerprint only when
// set): every C++ writer of captures calls this, so the root is spelled in one place.
void write_capture_attributes(h5::Group& root, const CaptureMeta& meta);
// The root attributes as CaptureReader checks them (both ways of opening): the
// schema tag, num_layers and hidden_size > 0; the string attributes may be absent (empty).
// InputError "<where>: attribute ..." naming the attribute and its value.
CaptureMeta read_capture_attributes(const h5::Group& root, const std::string& where);

// One group to write: S sequences of T tokens each.
struct CaptureGroupSpec {
  std::string name;                     // "calib", "eval" or "reference"
  std::vector<std::vector<int32_t>> sequences;
  bool reference = false;               // also attn_out and logits
};

// Runs the float64 dense forward over every sequence and writes the capture (float32) to
// `out`, through a temporary file in the same folder renamed only when complete. `progress`
// (may be empty) is called after each sequence with (group, done, total).
void write_dense_capture(const model::DenseModel& m, const CaptureMeta& meta,
                         const std::vector<CaptureGroupSpec>& groups, const std::filesystem::path& out,
                         const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

}  // namespace mla::io
