// libFuzzer target: arbitrary bytes as a capture (mla-capture/1) through both ways of opening
// io::CaptureReader: the whole file (verify-decode, mla-forward) and one split against a model
// (mla-calibrate's way, which reads chunks by pread at offsets the file declares). Opens, then reads the first and last
// sequence of every layer. Any outcome other than data or an mla::Error is a bug; so is
// returned data of the wrong size.
#include <cstdlib>

#include "core/error.hpp"
#include "fuzz_hdf5_common.hpp"
#include "io/capture.hpp"

namespace {

mla::model::MlaConfig fuzz_config() {
  mla::model::MlaConfig c;
  c.model_type = "deepseek_v3";
  c.hidden_size = 8;
  c.num_heads = 2;
  c.q_lora_rank = 4;
  c.kv_lora_rank = 8;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 4;
  c.num_hidden_layers = 2;
  c.vocab_size = 256;
  c.intermediate_size = 16;
  c.max_position_embeddings = 64;
  return c;
}

// A file may declare a huge extent with no data behind it (HDF5 returns fill values): the
// reader would honestly allocate it. Such inputs are opened and validated, not read.
bool too_big(int64_t rows, int64_t width) { return rows > 4096 || rows * width > (int64_t{1} << 16); }

void read_with_io_reader(const std::filesystem::path& path) {
  mla::io::CaptureReader r(path);
  for (const char* g : {"calib", "eval", "reference"}) {
    if (!r.has_group(g)) continue;
    const auto info = r.group_info(g);
    if (info.sequences < 1 || too_big(info.seq_len, r.meta().hidden_size)) continue;
    for (int64_t s : {int64_t{0}, info.sequences - 1}) {
      if (r.tokens(g, s).size() != static_cast<size_t>(info.seq_len)) std::abort();
      for (int64_t l = 0; l < r.meta().num_layers && l < 4; ++l)
        if (r.hidden(g, l, s).size() != static_cast<size_t>(info.seq_len * r.meta().hidden_size)) std::abort();
    }
  }
}

void read_with_calib_reader(const std::filesystem::path& path, const mla::model::MlaConfig& cfg) {
  mla::io::CaptureReader cap(path, cfg);
  const auto& info = cap.info();
  if (info.sequences < 1 || too_big(info.seq_len, cfg.hidden_size)) return;
  for (int64_t s : {int64_t{0}, info.sequences - 1}) {
    for (int64_t l = 0; l < info.num_layers; ++l) {
      if (info.has_hidden) {
        const auto h = cap.read_hidden(l, s);
        if (h.rows() != info.seq_len || h.cols() != cfg.hidden_size) std::abort();
      } else {
        mla::MatrixR c, k;
        cap.read_latent(l, s, c, k);
        if (c.rows() != info.seq_len || c.cols() != cfg.kv_lora_rank || k.cols() != cfg.qk_rope_head_dim) std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchCleanup cleanup;
  static const mla::model::MlaConfig cfg = fuzz_config();
  const auto& path = fuzz::write_input(data, size);
  try {
    read_with_io_reader(path);
  } catch (const mla::Error&) {
  }
  try {
    read_with_calib_reader(path, cfg);
  } catch (const mla::Error&) {
  }
  return 0;
}
