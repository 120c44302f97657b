#include "io/fingerprint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "io/sha256.hpp"

namespace mla::io {
namespace {

// %.17g: round-trips every double, independent of locale-free iostream state.
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void hash_tensor(Sha256& h, const Checkpoint& ckpt, const std::string& name) {
  const TensorView v = ckpt.raw(name);
  h.update(name + "\n" + std::string(dtype_name(v.dtype)) + "\n" + shape_to_string(v.shape) + "\n" +
           std::to_string(v.bytes.size()) + "\n");
  h.update(v.bytes.data(), v.bytes.size());
}

}  // namespace

std::string fingerprint_config_text(const model::MlaConfig& c) {
  std::ostringstream s;
  s << "model_type=" << c.model_type << "\n"
    << "hidden_size=" << c.hidden_size << "\n"
    << "num_attention_heads=" << c.num_heads << "\n"
    << "q_lora_rank=" << c.q_lora_rank << "\n"
    << "kv_lora_rank=" << c.kv_lora_rank << "\n"
    << "qk_nope_head_dim=" << c.qk_nope_head_dim << "\n"
    << "qk_rope_head_dim=" << c.qk_rope_head_dim << "\n"
    << "v_head_dim=" << c.v_head_dim << "\n"
    << "num_hidden_layers=" << c.num_hidden_layers << "\n"
    << "num_nextn_predict_layers=" << c.num_nextn_predict_layers << "\n"
    << "rms_norm_eps=" << num(c.rms_norm_eps) << "\n"
    << "rope_theta=" << num(c.rope_theta) << "\n"
    << "rope_interleave=" << (c.rope_interleave ? 1 : 0) << "\n";
  if (c.yarn) {
    s << "yarn.factor=" << num(c.yarn->factor) << "\n"
      << "yarn.mscale=" << num(c.yarn->mscale) << "\n"
      << "yarn.mscale_all_dim=" << num(c.yarn->mscale_all_dim) << "\n"
      << "yarn.original_max_position_embeddings=" << c.yarn->original_max_position_embeddings << "\n"
      << "yarn.beta_fast=" << num(c.yarn->beta_fast) << "\n"
      << "yarn.beta_slow=" << num(c.yarn->beta_slow) << "\n";
  } else {
    s << "yarn=none\n";
  }
  return s.str();
}

std::string fingerprint(const Checkpoint& ckpt) {
  const model::MlaConfig& cfg = ckpt.config();
  Sha256 h;
  h.update("mla-fingerprint-v1\n");
  h.update(fingerprint_config_text(cfg));
  for (int64_t i = 0; i < cfg.attention_layers(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    const bool mtp = i >= cfg.num_hidden_layers;
    if (mtp && !ckpt.has(p + "kv_a_proj_with_mqa.weight")) continue;
    for (const char* t : {"kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight"}) {
      const std::string name = p + t;
      if (!ckpt.has(name))
        throw InputError(ckpt.dir().string() + ": tensor '" + name + "' is missing (needed for the fingerprint)");
      hash_tensor(h, ckpt, name);
      if (ckpt.has(name + "_scale_inv")) hash_tensor(h, ckpt, name + "_scale_inv");
    }
  }
  return h.hex();
}

std::string sha256_file(const std::filesystem::path& path) {
  // Large reads with asynchronous readahead kept kWindow ahead: a plain sequential read
  // waits on one small readahead window at a time, which on a cold file leaves the disk
  // mostly idle and made this the slowest part of a conversion.
  constexpr size_t kChunk = 8u << 20;
  constexpr off_t kWindow = 64 << 20;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open for SHA-256: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  ::posix_fadvise(fd, 0, kWindow, POSIX_FADV_WILLNEED);
  Sha256 h;
  std::vector<char> buf(kChunk);
  off_t off = 0;
  for (;;) {
    if (off % kWindow == 0) ::posix_fadvise(fd, off + kWindow, kWindow, POSIX_FADV_WILLNEED);
    const ssize_t got = ::pread(fd, buf.data(), buf.size(), off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(path.string() + ": read failed while hashing: " + std::strerror(errno));
    if (got == 0) break;
    h.update(buf.data(), static_cast<size_t>(got));
    off += got;
  }
  return h.hex();
}

}  // namespace mla::io
