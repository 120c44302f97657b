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
// dense forward (write_dense_capture, used by `mla-forward capture`). Readers stream one
// sequence at a time (read_* of one sequence), so captures larger than memory are fine.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/hdf5.hpp"
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

class CaptureReader {
 public:
  // Opens and validates: schema string, root attributes, and for every group present the
  // shapes of tokens and of every layer's datasets (InputError names the file, the dataset
  // path and the bad shape/value).
  explicit CaptureReader(const std::filesystem::path& path);
  const CaptureMeta& meta() const { return meta_; }
  bool has_group(const std::string& group) const;
  CaptureGroupInfo group_info(const std::string& group) const;
  std::vector<int32_t> tokens(const std::string& group, int64_t seq) const;           // [T]
  std::vector<float> hidden(const std::string& group, int64_t layer, int64_t seq) const;   // [T*D]
  std::vector<float> attn_out(const std::string& group, int64_t layer, int64_t seq) const; // [T*D]
  std::vector<float> logits(const std::string& group, int64_t seq) const;             // [T*V]

 private:
  h5::File file_;
  CaptureMeta meta_;
};

// Layer dataset name inside a group: "layer_03/hidden".
std::string capture_layer_path(int64_t layer, const std::string& what);

// The schema's root attributes from `meta` (schema tag first; checkpoint_fingerprint only when
// set): every C++ writer of captures calls this, so the root is spelled in one place.
void write_capture_attributes(h5::Group& root, const CaptureMeta& meta);
// The root attributes as both readers (CaptureReader here, calib::Capture) check them: the
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
