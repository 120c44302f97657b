#include "transform/convert.hpp"
#include "transform/kv_cache_meta.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/error.hpp"
#include "core/phase_clock.hpp"
#include "io/atomic_output.hpp"
#include "io/converted_checkpoint.hpp"
#include "io/resources.hpp"
#include "io/checkpoint.hpp"
#include "io/fingerprint.hpp"
#include "io/sha256.hpp"
#include "transform/calib_input.hpp"
#include "transform/encode.hpp"
#include "transform/kv4_params.hpp"
#include "transform/schedule.hpp"
#include "transform/shard_table.hpp"

namespace mla::transform {

namespace fs = std::filesystem;

std::string_view out_dtype_name(OutDtype d) { return d == OutDtype::FP8 ? "fp8" : "bf16"; }

OutDtype parse_out_dtype(std::string_view name) {
  if (name == "bf16") return OutDtype::BF16;
  if (name == "fp8") return OutDtype::FP8;
  throw InputError("unknown --out-dtype '" + std::string(name) + "' (expected bf16 or fp8)");
}

namespace {

constexpr std::string_view kToolName = "mla-convert";

std::string attn(int64_t layer, const char* tensor) {
  return "model.layers." + std::to_string(layer) + ".self_attn." + tensor;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Layer index of "model.layers.{i}.<...>", or -1.
int64_t layer_of(const std::string& name) {
  constexpr std::string_view p = "model.layers.";
  if (name.rfind(p, 0) != 0) return -1;
  const size_t dot = name.find('.', p.size());
  if (dot == std::string::npos) return -1;
  try {
    return std::stoll(name.substr(p.size(), dot - p.size()));
  } catch (...) {
    return -1;
  }
}

// Output dtype rule (docs/formats/converted-checkpoint.md): FP8 output quantises 2-D linear
// weights (`*_proj.weight`); 1-D F32 tensors (router bias) stay F32; everything else BF16.
DType output_dtype(const std::string& name, DType in, size_t ndim, OutDtype out) {
  if (out == OutDtype::FP8 && ndim == 2 && ends_with(name, "_proj.weight")) return DType::F8_E4M3;
  if (ndim == 1 && in == DType::F32) return DType::F32;
  return DType::BF16;
}

// The run's live counters (see ConvertProfile), filled from every thread.
struct LiveProfile {
  EncodeStats enc;          // read, dequantise, encode, fast_encode
  PhaseTotals math;         // float64 absorb / rotate / slice of the latent units
  io::WriterStats writer;   // write, hash of outputs, read-back for the hash
  PhaseTotals hash_input;   // SHA-256 of the input files
  PhaseTotals fingerprint;  // SHA-256 of the attention latent tensors (calibration identity)
  PhaseTotals memory_wait;  // workers waiting for the memory budget of big slices
  PhaseTotals gate_wait;    // workers waiting for the hash to consume started output (OutputGate)
};

// One piece of independent work. A simple tensor becomes one unit per distinct slice (ranks
// with the same slice share it), so the slices of one big tensor (vocab-parallel embedding,
// lm_head) run on different threads.
struct Unit {
  enum class Kind { Simple, Latent } kind = Kind::Simple;
  std::string name;           // Simple: the input tensor
  const ShardRule* rule = nullptr;
  int64_t per_head = 1;
  int64_t layer = -1;         // Latent: the layer
  uint64_t input_bytes = 0;
  // Simple, after make_plan: rows [r0, r1) x cols [c0, c1) of the input, written to `ranks`;
  // a row chunk of its slice when `part` (the slice starts at input row `slice_row0`).
  std::array<int64_t, 4> slice{};
  int64_t slice_row0 = 0;
  bool part = false;
  std::vector<int> ranks;
  bool rows_disjoint = false;  // no other slice reads these input rows: drop their pages after
  // Slices of this tensor not finished yet; the last one drops the tensor's input pages.
  std::shared_ptr<std::atomic<int>> slices_left;
};

struct OutSpec {
  std::string name;
  DType dtype{};
  Shape shape;
};

void add_spec(RankPlan& rp, const OutSpec& s) {
  rp.tensors.push_back({s.name, s.dtype, s.shape});
  if (s.dtype == DType::F8_E4M3)
    rp.tensors.push_back({s.name + "_scale_inv", DType::F32, fp8_scale_shape(s.shape[0], s.shape[1])});
}

Shape slice_shape(const Shape& in, const Slice2D& s) {
  return in.size() == 2 ? Shape{s.rows.size(), s.cols.size()} : Shape{s.cols.size()};
}

std::optional<TensorView> scale_of(const io::Checkpoint& ckpt, const std::string& name) {
  const std::string s = name + "_scale_inv";
  if (ckpt.has(s)) return ckpt.raw(s);
  return std::nullopt;
}

// Per-rank writers, one per shard file; write() may be called from any thread. Each file's
// SHA-256 is computed while it is written (no second pass over the output); durability is
// left to AtomicDirectory::commit(), which fsyncs the whole tree once before the rename.
class RankWriters {
 public:
  RankWriters(const fs::path& dir, const RankPlan& rp, uint64_t max_shard_bytes, io::WriterStats* stats,
              io::HoldBudget* hold, std::function<void(uint64_t)> on_hashed)
      : dir_(dir) {
    plan_ = io::plan_shards(rp.tensors, max_shard_bytes);
    const std::map<std::string, std::string> meta{{"format", "pt"}};
    const io::StreamingWriterOptions wo{.fsync_on_finish = false, .hash = true, .direct_io = true, .stats = stats,
                                        .hold = hold, .on_hashed = std::move(on_hashed)};
    for (size_t i = 0; i < plan_.shards.size(); ++i)
      writers_.push_back(std::make_unique<io::StreamingFileWriter>(dir / plan_.file_names[i], plan_.shards[i], meta, wo));
    for (size_t i = 0; i < plan_.shards.size(); ++i)
      for (const auto& t : plan_.shards[i]) where_[t.name] = i;
    for (size_t i = 0; i < writers_.size(); ++i) {
      const io::FileLayout& l = writers_[i]->layout();
      for (size_t k = 0; k < l.order.size(); ++k) slot_[l.order[k].name] = {i, k};
    }
  }
  void write(const std::string& name, std::span<const std::byte> bytes, std::shared_ptr<const void> owner) {
    writers_.at(where_.at(name))->write(name, bytes, std::move(owner));
  }
  void write_part(const std::string& name, uint64_t at, std::span<const std::byte> bytes,
                  std::shared_ptr<const void> owner) {
    writers_.at(where_.at(name))->write_part(name, at, bytes, std::move(owner));
  }
  // Where a tensor's bytes go: file index, data offset and size.
  struct Location {
    size_t file = 0;
    uint64_t at = 0, n = 0;
  };
  std::optional<Location> locate(const std::string& name) const {
    auto it = slot_.find(name);
    if (it == slot_.end()) return std::nullopt;
    const auto [file, k] = it->second;
    const io::FileLayout& l = writers_[file]->layout();
    return Location{file, l.offsets[k], l.order[k].nbytes()};
  }
  void finish() {
    for (size_t i = 0; i < writers_.size(); ++i) {
      writers_[i]->finish();
      sha256_[plan_.file_names[i]] = writers_[i]->sha256();
    }
    if (plan_.file_names.size() > 1) {
      const std::string text = io::index_json(plan_);
      io::write_file_atomically(dir_ / io::kIndexFileName, text);
      sha256_[std::string(io::kIndexFileName)] = io::sha256_hex(text);
    }
  }
  const io::ShardPlan& plan() const { return plan_; }
  const std::map<std::string, std::string>& sha256() const { return sha256_; }
  DType dtype_of(const std::string& name) const {
    const auto [file, k] = slot_.at(name);
    return writers_[file]->layout().order[k].dtype;
  }

 private:
  fs::path dir_;
  io::ShardPlan plan_;
  std::vector<std::unique_ptr<io::StreamingFileWriter>> writers_;
  std::map<std::string, size_t> where_;
  std::unordered_map<std::string, std::pair<size_t, size_t>> slot_;  // tensor -> (file, index in its layout)
  std::map<std::string, std::string> sha256_;  // file name -> hex, after finish()
};

// Everything decided before a byte is written.
struct Plan {
  model::MlaConfig cfg;
  TplaLayout layout;
  std::vector<Unit> units;
  std::vector<int64_t> layers;                // attention layers converted
  std::map<int64_t, SliceCorrections> corr;   // per layer
  std::map<int64_t, MatrixR> rotation;        // per layer (pca) or shared under key -1
  std::map<int64_t, bool> mu_per_head;
  std::optional<Kv4Params> kv4;               // --kv-cache fp4 | codebook
  nlohmann::json kv4_rotation;
  std::string fingerprint;
  std::string calib_sha256;
  ConvertResult result;
};

const MatrixR& rotation_for(const Plan& p, int64_t layer) {
  auto it = p.rotation.find(layer);
  return it != p.rotation.end() ? it->second : p.rotation.at(-1);
}

void check_paths(const ConvertOptions& o) {
  if (!fs::is_directory(o.input)) throw InputError("input checkpoint '" + o.input.string() + "' is not a directory");
  if (o.output.empty()) throw InputError("no output directory given (-o)");
  const fs::path in = fs::weakly_canonical(o.input), out = fs::weakly_canonical(o.output);
  auto inside = [](const fs::path& a, const fs::path& b) {  // a inside (or equal to) b
    auto [ie, be] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    return be == b.end();
  };
  if (inside(out, in) || inside(in, out))
    throw InputError("output '" + o.output.string() + "' is, contains or lies inside the input checkpoint '" +
                     o.input.string() + "'; refusing to overwrite the input");
}

// make_plan's steps, in order. Units from the shard table, in name order (latent tensors only
// mark their layer; a _scale_inv is consumed with its weight).
void plan_table_units(const io::Checkpoint& ckpt, Plan& p) {
  const model::MlaConfig& cfg = p.cfg;
  for (const std::string& name : ckpt.tensor_names()) {
    const ShardRule& rule = find_rule(name);
    if (rule.kind == SplitKind::Consumed) {
      const std::string weight = name.substr(0, name.size() - std::string_view("_scale_inv").size());
      if (!ckpt.has(weight)) throw InputError("tensor '" + name + "' has no weight '" + weight + "'");
      continue;
    }
    const int64_t layer = layer_of(name);
    if (rule.kind == SplitKind::TplaLatent || rule.kind == SplitKind::TplaLatentNorm || rule.kind == SplitKind::TplaKvB) {
      if (layer < 0 || layer >= cfg.attention_layers())
        throw InputError("tensor '" + name + "' belongs to no attention layer (config has " +
                         std::to_string(cfg.attention_layers()) + ")");
      continue;  // converted as its layer's latent unit (plan_attention_layers)
    }
    Unit u;
    u.name = name;
    u.rule = &rule;
    if (rule.kind == SplitKind::TplaHeads) u.per_head = rule.dim == 0 ? cfg.qk_head_dim() : cfg.v_head_dim;
    p.units.push_back(u);
  }
}

// Every decoder layer must be complete; MTP layers may be absent as a whole. Adds one latent
// unit per converted layer.
void plan_attention_layers(const io::Checkpoint& ckpt, const ConvertOptions& o, Plan& p) {
  const model::MlaConfig& cfg = p.cfg;
  for (int64_t i = 0; i < cfg.attention_layers(); ++i) {
    std::vector<std::string> need = {attn(i, "kv_a_proj_with_mqa.weight"), attn(i, "kv_a_layernorm.weight"),
                                     attn(i, "kv_b_proj.weight"), attn(i, "o_proj.weight")};
    if (cfg.has_q_lora()) {
      need.push_back(attn(i, "q_a_proj.weight"));
      need.push_back(attn(i, "q_a_layernorm.weight"));
      need.push_back(attn(i, "q_b_proj.weight"));
    } else {
      need.push_back(attn(i, "q_proj.weight"));
    }
    bool any = false;
    for (const auto& n : need) any = any || ckpt.has(n);
    if (i >= cfg.num_hidden_layers && !any) continue;
    for (const auto& n : need)
      if (!ckpt.has(n))
        throw InputError("checkpoint '" + o.input.string() + "' is missing tensor '" + n + "'");
    p.layers.push_back(i);
  }
  for (int64_t i : p.layers) {
    Unit u;
    u.kind = Unit::Kind::Latent;
    u.layer = i;
    u.name = attn(i, "kv_*");
    p.units.push_back(u);
  }

}

// The input's fingerprint, the slice corrections and rotations (from calib.h5 when given).
void plan_calibration(const io::Checkpoint& ckpt, const ConvertOptions& o, int g, LiveProfile& prof, Plan& p) {
  const model::MlaConfig& cfg = p.cfg;
  {
    ScopedPhase timed(&prof.fingerprint);
    p.fingerprint = io::fingerprint(ckpt);
  }
  for (int64_t i : p.layers) p.corr[i] = SliceCorrections::defaults(cfg.num_heads, g);
  if (!o.calib.empty()) {
    const int64_t n = p.layers.empty() ? 0 : p.layers.back() + 1;
    CalibrationInput calib = load_calibration(o.calib, p.fingerprint, n, cfg.num_heads, cfg.kv_lora_rank, g, o.reparam);
    p.calib_sha256 = io::sha256_file(o.calib);
    for (int64_t i : p.layers) {
      auto& lc = calib.layers.at(static_cast<size_t>(i));
      p.corr[i] = lc.corrections;
      p.mu_per_head[i] = lc.mu_per_head;
      if (needs_calibrated_basis(o.reparam))
        p.rotation[i] = make_rotation(o.reparam, cfg.kv_lora_rank, o.seed, &*lc.pca_basis,
                                      o.calib.string() + " layer " + std::to_string(i));
    }
  }
  if (!needs_calibrated_basis(o.reparam))
    p.rotation[-1] = make_rotation(o.reparam, cfg.kv_lora_rank, o.seed, nullptr, "config.json kv_lora_rank");
  if (is_kv4_format(o.kv_cache))
    p.kv4 = plan_kv4_conversion(o.calib, o.kv_cache, cfg.attention_layers(), cfg.kv_lora_rank, cfg.qk_rope_head_dim, g,
                                o.seed, o.kv_rotation, p.rotation, p.kv4_rotation);

}

// Per-rank output specs (this also runs every divisibility check) and the input bytes.
void plan_rank_outputs(const io::Checkpoint& ckpt, const ConvertOptions& o, int g, Plan& p) {
  const model::MlaConfig& cfg = p.cfg;
  const TplaLayout& L = p.layout;
  ConvertResult& res = p.result;
  res.g = g;
  res.ranks.resize(o.tp);
  for (int r = 0; r < o.tp; ++r) {
    RankPlan& rp = res.ranks[r];
    rp.rank = r;
    rp.group = L.group_of(r);
    rp.heads = L.heads(r);
    rp.latent = L.latent(r);
  }
  const int64_t H_l = L.heads_per_rank(), dcl = L.latent_per_group();
  for (Unit& u : p.units) {
    if (u.kind == Unit::Kind::Simple) {
      const TensorView v = ckpt.raw(u.name);
      u.input_bytes = v.bytes.size();
      if (auto s = scale_of(ckpt, u.name); s && v.dtype == DType::F8_E4M3) u.input_bytes += s->bytes.size();
      for (int r = 0; r < o.tp; ++r) {
        const Slice2D s = simple_slice(u.name, v.shape, *u.rule, L, r, u.per_head);
        add_spec(res.ranks[r], {u.name, output_dtype(u.name, v.dtype, v.shape.size(), o.out_dtype), slice_shape(v.shape, s)});
      }
    } else {
      const int64_t i = u.layer;
      const std::string a = attn(i, "kv_a_proj_with_mqa.weight"), n = attn(i, "kv_a_layernorm.weight"),
                        b = attn(i, "kv_b_proj.weight");
      const TensorView va = ckpt.raw(a), vn = ckpt.raw(n), vb = ckpt.raw(b);
      const Shape want_a{cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.hidden_size}, want_n{cfg.kv_lora_rank},
          want_b{cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank};
      if (va.shape != want_a) throw InputError("tensor '" + a + "' has shape " + shape_to_string(va.shape) + ", expected " + shape_to_string(want_a));
      if (vn.shape != want_n) throw InputError("tensor '" + n + "' has shape " + shape_to_string(vn.shape) + ", expected " + shape_to_string(want_n));
      if (vb.shape != want_b) throw InputError("tensor '" + b + "' has shape " + shape_to_string(vb.shape) + ", expected " + shape_to_string(want_b));
      u.input_bytes = va.bytes.size() + vn.bytes.size() + vb.bytes.size();
      for (const auto& nm : {a, b})
        if (auto s = scale_of(ckpt, nm); s && ckpt.raw(nm).dtype == DType::F8_E4M3) u.input_bytes += s->bytes.size();
      for (int r = 0; r < o.tp; ++r) {
        RankPlan& rp = res.ranks[r];
        add_spec(rp, {a, output_dtype(a, va.dtype, 2, o.out_dtype), {dcl + cfg.qk_rope_head_dim, cfg.hidden_size}});
        add_spec(rp, {n, output_dtype(n, vn.dtype, 1, o.out_dtype), {dcl}});
        add_spec(rp, {b, output_dtype(b, vb.dtype, 2, o.out_dtype), {H_l * (cfg.qk_nope_head_dim + cfg.v_head_dim), dcl}});
        if (o.absorb) {
          add_spec(rp, {attn(i, "absorbed_w_uk"), DType::BF16, {H_l, cfg.qk_nope_head_dim, dcl}});
          add_spec(rp, {attn(i, "absorbed_w_uv"), DType::BF16, {H_l, cfg.v_head_dim, dcl}});
        }
      }
    }
    res.input_bytes += u.input_bytes;
  }
}

// Simple tensors -> one unit per distinct slice (ranks that hold the same slice share it),
// and a big slice (vocab-parallel embed_tokens / lm_head: 926 MB each at tp = 2 on V3) one
// unit per row chunk, so that many threads build the head of each file at once and its bytes
// land in file order.
void split_simple_units(const io::Checkpoint& ckpt, const ConvertOptions& o, Plan& p) {
  const TplaLayout& L = p.layout;
  std::vector<Unit> units;
  for (Unit& u : p.units) {
    if (u.kind != Unit::Kind::Simple) {
      units.push_back(std::move(u));
      continue;
    }
    const TensorView v = ckpt.raw(u.name);
    const Shape shape = v.shape;
    const DType dt = output_dtype(u.name, v.dtype, shape.size(), o.out_dtype);
    std::map<std::array<int64_t, 4>, std::vector<int>> by_slice;
    for (int r = 0; r < o.tp; ++r) {
      const Slice2D sl = simple_slice(u.name, shape, *u.rule, L, r, u.per_head);
      by_slice[{sl.rows.begin, sl.rows.end, sl.cols.begin, sl.cols.end}].push_back(r);
    }
    std::vector<Unit> mine;
    for (auto& [key, ranks] : by_slice) {
      const auto [r0, r1, c0, c1] = key;
      const int64_t step = shape.size() == 2
                               ? unit_rows(r1 - r0, static_cast<uint64_t>((c1 - c0) * dtype_bits(dt) / 8),
                                           static_cast<int>(ranks.size()), o.unit_bytes ? o.unit_bytes : kUnitBytes)
                               : r1 - r0;
      for (int64_t a = r0; a < r1 || a == r0; a += std::max<int64_t>(1, step)) {
        Unit su = u;
        su.slice = {a, std::min(r1, a + step), c0, c1};
        su.slice_row0 = r0;
        su.part = step < r1 - r0;
        su.ranks = ranks;
        su.rows_disjoint = u.rule->kind == SplitKind::Column || u.rule->kind == SplitKind::VocabColumn ||
                           by_slice.size() == 1;
        if (!mine.empty()) su.input_bytes = 0;  // counted once, for the progress log
        mine.push_back(std::move(su));
        if (step <= 0) break;
      }
    }
    auto left = std::make_shared<std::atomic<int>>(static_cast<int>(mine.size()));
    for (Unit& su : mine) {
      su.slices_left = left;
      units.push_back(std::move(su));
    }
  }
  p.units = std::move(units);
}

Plan make_plan(const io::Checkpoint& ckpt, const ConvertOptions& o, LiveProfile& prof) {
  Plan p;
  p.cfg = ckpt.config();
  const model::MlaConfig& cfg = p.cfg;
  const int g = o.groups == 0 ? o.tp : o.groups;
  p.layout = TplaLayout::make(cfg, o.tp, g);
  const TplaLayout& L = p.layout;
  if (needs_calibrated_basis(o.reparam) && o.calib.empty())
    throw InputError("--reparam " + std::string(reparam_name(o.reparam)) +
                     " needs a calibration file (--calib calib.h5 from mla-calibrate)");

  if (cfg.vocab_size % o.tp != 0)
    spdlog::warn("vocab_size {} is not divisible by tp {}: embed_tokens and lm_head are replicated on every rank "
                 "instead of vocab-parallel (the rank configs keep vocab_size {} and say tpla.vocab_parallel = false)",
                 cfg.vocab_size, o.tp, cfg.vocab_size);
  plan_table_units(ckpt, p);
  plan_attention_layers(ckpt, o, p);
  plan_calibration(ckpt, o, g, prof, p);
  plan_rank_outputs(ckpt, o, g, p);
  split_simple_units(ckpt, o, p);
  ConvertResult& res = p.result;
  const int64_t dcl = L.latent_per_group();
  for (RankPlan& rp : res.ranks) {
    std::sort(rp.tensors.begin(), rp.tensors.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
    for (const auto& t : rp.tensors) rp.bytes += t.nbytes();
    res.output_bytes += rp.bytes;
  }
  res.attention_layers = static_cast<int64_t>(p.layers.size());
  res.kv_bytes_per_token_per_device = res.attention_layers * (dcl + cfg.qk_rope_head_dim) * 2;
  res.kv_bytes_per_token_mla = res.attention_layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2;
  res.fingerprint = p.fingerprint;
  return p;
}

// ---- execution ----

// Bytes of encoded output (and float64 working copies) that units may have in memory at
// once; a unit waits for its share before it builds it. This bounds peak memory for any
// thread count and layer count while letting big slices (vocab-parallel embeddings) run
// beside the layer units instead of one at a time. Shares are granted first come, first
// served, so a big slice is not overtaken forever by small ones (the hashed prefix of its
// file waits for it).
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}
  class Lease {
   public:
    Lease(MemoryBudget& b, uint64_t n, PhaseTotals* wait) : b_(&b), n_(std::min(n, b.limit_)) {
      std::unique_lock lock(b_->mu_);
      const uint64_t ticket = b_->next_ticket_++;
      auto ready = [&] { return b_->serving_ == ticket && b_->used_ + n_ <= b_->limit_; };
      if (!ready()) {
        ScopedPhase timed(wait);
        b_->cv_.wait(lock, ready);
      }
      b_->used_ += n_;
      ++b_->serving_;
      lock.unlock();
      b_->cv_.notify_all();  // the next ticket may fit too
    }
    ~Lease() {
      {
        std::lock_guard lock(b_->mu_);
        b_->used_ -= n_;
      }
      b_->cv_.notify_all();
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    MemoryBudget* b_;
    uint64_t n_;
  };

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
  uint64_t next_ticket_ = 0, serving_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};
// Encoded slices (and the latent units' float64 working copies) in flight: at least this
// much, or four of the largest slice unit. Big slices are split into row-chunk units of ~64 MiB
// (kUnitBytes), so this is 1.5 GiB on V3; OutputGate bounds the encoded output more tightly
// where it is on. Independent of the layer count and, beyond four, of the thread count.
constexpr uint64_t kMinSliceMemoryBytes = 1536ull << 20;
constexpr int kBigSlicesAtOnce = 4;
// Out-of-order output held for the streaming hash instead of read back (io::HoldBudget).
constexpr uint64_t kHashHoldBytes = 1024ull << 20;

struct Writers {
  std::vector<std::unique_ptr<RankWriters>> ranks;
  LiveProfile* prof = nullptr;
  MemoryBudget* memory = nullptr;
};

// Writers may keep the encoding alive (shared ownership, no copy) to hash it later.
void write_encoded(Writers& w, int rank, const std::string& name, const std::shared_ptr<const EncodedTensor>& e) {
  w.ranks[rank]->write(name, e->weight, e);
  if (!e->scale_inv.empty()) w.ranks[rank]->write(name + "_scale_inv", e->scale_inv, e);
}
// A row chunk of a tensor: its bytes (and its FP8 block rows' scales) at their offsets.
void write_encoded_part(Writers& w, int rank, const std::string& name, uint64_t weight_at, uint64_t scale_at,
                        const std::shared_ptr<const EncodedTensor>& e) {
  w.ranks[rank]->write_part(name, weight_at, e->weight, e);
  if (!e->scale_inv.empty()) w.ranks[rank]->write_part(name + "_scale_inv", scale_at, e->scale_inv, e);
}
std::shared_ptr<const EncodedTensor> shared(EncodedTensor e) { return std::make_shared<const EncodedTensor>(std::move(e)); }


void run_simple(const io::Checkpoint& ckpt, const ConvertOptions& o, const Unit& u, Writers& w) {
  const TensorView v = ckpt.raw(u.name);
  EncodeStats* es = &w.prof->enc;
  const SourceTensor src(u.name, v, scale_of(ckpt, u.name), es);
  const DType dt = output_dtype(u.name, v.dtype, v.shape.size(), o.out_dtype);
  const auto [r0, r1, c0, c1] = u.slice;
  const int64_t ncols = c1 - c0;
  {
    const MemoryBudget::Lease lease(*w.memory, static_cast<uint64_t>((r1 - r0) * ncols * dtype_bits(dt) / 8),
                                    &w.prof->memory_wait);
    std::optional<EncodedTensor> e = encode_slice_fast(src, r0, r1, c0, c1, dt, u.rows_disjoint);
    if (!e)
      // Init-captures: clang 14 cannot capture structured bindings (the sanitizer CI build).
      e = encode_rows(u.name, dt, r1 - r0, ncols, [&, r0 = r0, c0 = c0, c1 = c1](int64_t a, int64_t b, double* out) {
        src.populate_rows(r0 + a, r0 + b);
        ScopedPhase timed(&es->dequantise, static_cast<uint64_t>((b - a) * ncols * dtype_bits(src.dtype()) / 8));
        for (int64_t r = a; r < b; ++r) src.read_row(r0 + r, c0, c1, out + (r - a) * ncols);
      }, es);
    if (u.rows_disjoint) src.release_rows(r0, r1);  // these input rows are not read again
    // Ranks with the same slice (replicated tensors, heads repeated across groups) share it.
    const std::shared_ptr<const EncodedTensor> enc = shared(std::move(*e));
    e.reset();
    const int64_t skip = r0 - u.slice_row0;  // rows of the slice before this chunk
    const uint64_t weight_at = static_cast<uint64_t>(skip * ncols * dtype_bits(dt) / 8);
    const uint64_t scale_at = static_cast<uint64_t>(skip / kFp8BlockSize * fp8_scale_shape(1, ncols)[1] * 4);
    for (int r : u.ranks)
      if (u.part) write_encoded_part(w, r, u.name, weight_at, scale_at, enc); else write_encoded(w, r, u.name, enc);
  }
  if (--*u.slices_left == 0) src.release_pages();
}

void run_latent(const io::Checkpoint& ckpt, const Plan& p, const ConvertOptions& o, const Unit& u, Writers& w) {
  const model::MlaConfig& cfg = p.cfg;
  const int64_t i = u.layer;
  const std::string a = attn(i, "kv_a_proj_with_mqa.weight"), n = attn(i, "kv_a_layernorm.weight"),
                    b = attn(i, "kv_b_proj.weight");
  EncodeStats* es = &w.prof->enc;
  const SourceTensor sa(a, ckpt.raw(a), scale_of(ckpt, a), es), sn(n, ckpt.raw(n), std::nullopt, es),
      sb(b, ckpt.raw(b), scale_of(ckpt, b), es);
  // float64 copies of kv_a and kv_b plus one rank's slices of them.
  const uint64_t working = static_cast<uint64_t>(sa.rows() * sa.cols() + sb.rows() * sb.cols()) * 8 * 2;
  const MemoryBudget::Lease lease(*w.memory, working, &w.prof->memory_wait);
  model::AttentionWeights lw;
  lw.kv_a_proj_with_mqa = sa.read_matrix();
  lw.kv_a_layernorm = sn.read_matrix().row(0).transpose();
  lw.kv_b_proj = sb.read_matrix();
  {
    ScopedPhase timed(&w.prof->math, static_cast<uint64_t>((lw.kv_a_proj_with_mqa.size() + lw.kv_b_proj.size()) * 8));
    absorb_gamma(cfg, lw);
    rotate_latent(cfg, lw, rotation_for(p, i));
  }
  const SliceCorrections& corr = p.corr.at(i);
  const int64_t d_n = cfg.qk_nope_head_dim, d_v = cfg.v_head_dim;
  for (int r = 0; r < o.tp; ++r) {
    MatrixR ka, ln, kb;
    {
      ScopedPhase timed(&w.prof->math);
      ka = slice_kv_a(cfg, lw.kv_a_proj_with_mqa, p.layout, r);
      ln = MatrixR::Constant(1, p.layout.latent_per_group(), layernorm_scale(p.layout, r, corr, o.norm));
      kb = slice_kv_b(cfg, lw.kv_b_proj, p.layout, r, corr);
    }
    write_encoded(w, r, a, shared(encode_rows(a, output_dtype(a, sa.dtype(), 2, o.out_dtype), ka.rows(), ka.cols(), matrix_rows(ka), es)));
    write_encoded(w, r, n, shared(encode_rows(n, output_dtype(n, sn.dtype(), 1, o.out_dtype), 1, ln.cols(), matrix_rows(ln), es)));
    write_encoded(w, r, b, shared(encode_rows(b, output_dtype(b, sb.dtype(), 2, o.out_dtype), kb.rows(), kb.cols(), matrix_rows(kb), es)));
    if (o.absorb) {
      // [H_l, d_n, d_c/g] and [H_l, d_v, d_c/g]: kv_b_proj's per-head blocks split in two.
      const int64_t H_l = p.layout.heads_per_rank(), per = d_n + d_v;
      MatrixR uk(H_l * d_n, kb.cols()), uv(H_l * d_v, kb.cols());
      for (int64_t h = 0; h < H_l; ++h) {
        uk.middleRows(h * d_n, d_n) = kb.middleRows(h * per, d_n);
        uv.middleRows(h * d_v, d_v) = kb.middleRows(h * per + d_n, d_v);
      }
      write_encoded(w, r, attn(i, "absorbed_w_uk"), shared(encode_rows(attn(i, "absorbed_w_uk"), DType::BF16, uk.rows(), uk.cols(), matrix_rows(uk), es)));
      write_encoded(w, r, attn(i, "absorbed_w_uv"), shared(encode_rows(attn(i, "absorbed_w_uv"), DType::BF16, uv.rows(), uv.cols(), matrix_rows(uv), es)));
    }
  }
  sa.release_pages();
  sb.release_pages();
}

nlohmann::json options_json(const ConvertOptions& o, int g, const std::string& calib_sha) {
  // Only what determines the output bytes: threads, paths of the output and dry-run do not.
  nlohmann::json j;
  j["tp"] = o.tp;
  j["groups"] = g;
  j["reparam"] = reparam_name(o.reparam);
  j["seed"] = o.seed ? nlohmann::json(*o.seed) : nlohmann::json(nullptr);
  j["calib"] = o.calib.empty() ? nlohmann::json(nullptr)
                               : nlohmann::json{{"file", o.calib.filename().string()}, {"sha256", calib_sha}};
  j["norm"] = norm_mode_name(o.norm);
  j["out_dtype"] = out_dtype_name(o.out_dtype);
  j["absorb"] = o.absorb;
  if (o.kv_cache != "bf16") j["kv_cache"] = o.kv_cache;
  if (is_kv4_format(o.kv_cache)) j["kv_rotation"] = o.kv_rotation;
  j["max_shard_bytes"] = o.max_shard_bytes;
  return j;
}

nlohmann::json rank_config(const io::Checkpoint& ckpt, const Plan& p, const ConvertOptions& o, int r,
                           const nlohmann::json& provenance) {
  const TplaLayout& L = p.layout;
  nlohmann::json c = ckpt.config_json();
  nlohmann::json global;
  // The rank's own dimensions, so a loader sees consistent shapes; globals are kept below.
  auto localise = [&](const char* key, int64_t parts) {
    if (!c.contains(key) || !c[key].is_number_integer()) return;
    const int64_t v = c[key].get<int64_t>();
    global[key] = v;
    if (v % parts != 0)
      throw InputError("config.json " + std::string(key) + " = " + std::to_string(v) + " is not divisible by " +
                       std::to_string(parts));
    c[key] = v / parts;
  };
  localise("num_attention_heads", L.ranks_per_group());
  // Not used by MLA attention (config.cpp warns when it differs): the rank's head count.
  if (c.contains("num_key_value_heads")) {
    global["num_key_value_heads"] = c["num_key_value_heads"];
    c["num_key_value_heads"] = c["num_attention_heads"];
  }
  localise("kv_lora_rank", L.g);
  localise("intermediate_size", L.tp);
  localise("moe_intermediate_size", L.tp);
  // A vocabulary tp does not divide is replicated (shard_table.hpp, VocabColumn): the rank
  // keeps the whole vocab_size, and says so.
  const bool vocab_split = p.cfg.vocab_size % L.tp == 0;  // the same test as make_plan's warning
  if (vocab_split) localise("vocab_size", L.tp);
  if (o.out_dtype == OutDtype::FP8)
    c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
  else
    c.erase("quantization_config");
  c["torch_dtype"] = "bfloat16";

  nlohmann::json t;
  t["tp"] = L.tp;
  t["g"] = L.g;
  t["rank"] = r;
  t["group"] = L.group_of(r);
  t["index_in_group"] = L.index_in_group(r);
  t["heads"] = {L.heads(r).begin, L.heads(r).end};
  t["latent_slice"] = {L.latent(r).begin, L.latent(r).end};
  t["reparam"] = reparam_name(o.reparam);
  t["hadamard_seed"] = (uses_hadamard_seed(o.reparam) && o.seed) ? nlohmann::json(*o.seed) : nlohmann::json(nullptr);
  t["norm"] = norm_mode_name(o.norm);
  t["out_dtype"] = out_dtype_name(o.out_dtype);
  t["absorbed"] = o.absorb;
  t["vocab_parallel"] = vocab_split;
  t["global"] = global;
  nlohmann::json layers = nlohmann::json::array();
  const int k = L.group_of(r);
  for (int64_t i : p.layers) {
    const SliceCorrections& corr = p.corr.at(i);
    nlohmann::json mu = nlohmann::json::array();
    for (int64_t h = L.heads(r).begin; h < L.heads(r).end; ++h) mu.push_back(corr.mu(h, k));
    layers.push_back({{"layer", i},
                      {"f", corr.f},
                      {"kv_a_layernorm_scale", layernorm_scale(L, r, corr, o.norm)},
                      {"mu", mu}});
  }
  t["layers"] = layers;
  t["provenance"] = provenance;
  c["tpla"] = t;
  return c;
}

struct CpuTimes {
  double user = 0.0, system = 0.0;
  int64_t max_rss_kb = 0;
};
CpuTimes cpu_times() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return {static_cast<double>(u.ru_utime.tv_sec) + u.ru_utime.tv_usec * 1e-6,
          static_cast<double>(u.ru_stime.tv_sec) + u.ru_stime.tv_usec * 1e-6, u.ru_maxrss};
}

void fill_profile(ConvertProfile& out, const LiveProfile& prof, const CpuTimes& cpu0) {
  auto add = [&](const char* name, const PhaseTotals& t) {
    out.phases.push_back({name, t.seconds(), t.cpu_seconds(), t.bytes.load(), t.calls.load()});
  };
  add("read (input pages populated)", prof.enc.read);
  add("dequantise (stored -> float64)", prof.enc.dequantise);
  add("float64 math (absorb, rotate, slice)", prof.math);
  add("cast / quantise (float64 -> out)", prof.enc.encode);
  add("fast paths (copy, FP8->BF16 table)", prof.enc.fast_encode);
  add("write (pwrite / O_DIRECT)", prof.writer.write);
  add("SHA-256 outputs", prof.writer.hash);
  add("read-back for output SHA-256", prof.writer.read_back);
  add("SHA-256 inputs (manifest)", prof.hash_input);
  add("SHA-256 fingerprint (plan)", prof.fingerprint);
  add("wait for big-slice memory", prof.memory_wait);
  add("wait for the hash (output gate)", prof.gate_wait);
  const CpuTimes cpu1 = cpu_times();
  out.cpu_user_seconds = cpu1.user - cpu0.user;
  out.cpu_system_seconds = cpu1.system - cpu0.system;
  out.peak_rss_kb = cpu1.max_rss_kb;
}

}  // namespace

// f and mu under `hadamard` are only valid for the rotation they were measured under: take the
// calibration's seed when none is given, and refuse a different one.
ConvertOptions resolve_hadamard_seed(ConvertOptions o) {
  if (!uses_hadamard_seed(o.reparam) || o.calib.empty()) return o;
  const std::optional<uint64_t> calib_seed = calibration_hadamard_seed(o.calib);
  if (!calib_seed) return o;
  if (!o.seed) {
    spdlog::info("--reparam hadamard: using the calibration's random-sign seed {} ({})", *calib_seed, o.calib.string());
    o.seed = calib_seed;
  } else if (*o.seed != *calib_seed) {
    throw InputError("--seed " + std::to_string(*o.seed) + " differs from " + o.calib.string() + " hadamard_seed " +
                     std::to_string(*calib_seed) + ": its f and mu were measured under another Hadamard rotation");
  }
  return o;
}

// Bytes of the largest simple slice in its output dtype: sizes the memory budget.
uint64_t largest_slice_bytes(const io::Checkpoint& ckpt, const ConvertOptions& o, const Plan& p) {
  uint64_t largest_slice = 0;
  for (const Unit& u : p.units) {
    if (u.kind != Unit::Kind::Simple) continue;
    const TensorView v = ckpt.raw(u.name);
    const DType dt = output_dtype(u.name, v.dtype, v.shape.size(), o.out_dtype);
    largest_slice = std::max(largest_slice, static_cast<uint64_t>((u.slice[1] - u.slice[0]) * (u.slice[3] - u.slice[2]) *
                                                                  dtype_bits(dt) / 8));
  }
  return largest_slice;
}

// The output byte ranges a unit writes (OutputPiece::file = rank * 65536 + file index).
std::vector<OutputPiece> unit_pieces(const Plan& p, const ConvertOptions& o, const Writers& w, const Unit& u) {
  std::vector<OutputPiece> out;
  auto add = [&](int r, const std::string& name, uint64_t at, std::optional<uint64_t> n) {
    if (const auto loc = w.ranks[r]->locate(name))
      out.push_back({r * 65536 + static_cast<int>(loc->file), loc->at + at, n ? *n : loc->n});
  };
  if (u.kind == Unit::Kind::Simple) {
    const auto [r0, r1, c0, c1] = u.slice;
    const DType dt = w.ranks[u.ranks.front()]->dtype_of(u.name);
    const int64_t skip = r0 - u.slice_row0, ncols = c1 - c0, bc = fp8_scale_shape(1, ncols)[1];
    for (int r : u.ranks) {
      if (!u.part) {
        add(r, u.name, 0, std::nullopt);
        add(r, u.name + "_scale_inv", 0, std::nullopt);
        continue;
      }
      add(r, u.name, static_cast<uint64_t>(skip * ncols * dtype_bits(dt) / 8),
          static_cast<uint64_t>((r1 - r0) * ncols * dtype_bits(dt) / 8));
      if (dt == DType::F8_E4M3)
        add(r, u.name + "_scale_inv", static_cast<uint64_t>(skip / kFp8BlockSize * bc * 4),
            static_cast<uint64_t>((r1 - r0 + kFp8BlockSize - 1) / kFp8BlockSize * bc * 4));
    }
  } else {
    const int64_t i = u.layer;
    for (int r = 0; r < o.tp; ++r)
      for (const char* t : {"kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "absorbed_w_uk",
                            "absorbed_w_uv"}) {
        add(r, attn(i, t), 0, std::nullopt);
        add(r, attn(i, t) + "_scale_inv", 0, std::nullopt);
      }
  }
  (void)p;
  return out;
}

// Units in output-file order (the earliest byte each writes; the ranks' files share one
// layout), so the streaming hashes advance while the units run. The order does not change
// the output bytes. Returns each unit's pieces, in the new order.
std::vector<std::vector<OutputPiece>> sort_units_in_output_order(Plan& p, const ConvertOptions& o, const Writers& w) {
  std::vector<std::vector<OutputPiece>> pieces;
  std::vector<std::pair<std::pair<int, uint64_t>, size_t>> order;
  for (size_t i = 0; i < p.units.size(); ++i) {
    pieces.push_back(unit_pieces(p, o, w, p.units[i]));
    std::pair<int, uint64_t> key{INT_MAX, 0};
    for (const OutputPiece& q : pieces.back()) key = std::min(key, {q.file % 65536, q.at});
    order.push_back({key, i});
  }
  std::stable_sort(order.begin(), order.end());
  std::vector<Unit> sorted;
  std::vector<std::vector<OutputPiece>> sorted_pieces;
  for (const auto& [k, i] : order) {
    sorted.push_back(p.units[i]);
    sorted_pieces.push_back(std::move(pieces[i]));
  }
  p.units = std::move(sorted);
  return sorted_pieces;
}

// Input files are hashed on the side while the workers convert, several files at once when
// there are cores to spare (one file's SHA-256 is sequential: ~1-2 GB/s per core). Setting
// `stop` makes the hashers stop after their current file.
std::future<nlohmann::json> hash_inputs_async(const io::Checkpoint& ckpt, const ConvertOptions& o, int nthreads,
                                              LiveProfile& prof, std::atomic<bool>& stop_hashing) {
  return std::async(std::launch::async, [&ckpt, &o, nthreads, &prof, &stop_hashing] {
    std::vector<fs::path> in_files = ckpt.files();
    in_files.push_back(o.input / "config.json");
    if (fs::exists(o.input / io::kIndexFileName)) in_files.push_back(o.input / io::kIndexFileName);
    std::sort(in_files.begin(), in_files.end());
    std::vector<nlohmann::json> rows(in_files.size());
    std::atomic<size_t> next_file{0};
    auto hasher = [&] {
      for (size_t k; !stop_hashing && (k = next_file++) < in_files.size();) {
        const uint64_t bytes = fs::file_size(in_files[k]);
        ScopedPhase timed(&prof.hash_input, bytes);
        rows[k] = {{"file", in_files[k].filename().string()}, {"bytes", bytes}, {"sha256", io::sha256_file(in_files[k])}};
      }
    };
    const size_t extra = std::min(in_files.size(), static_cast<size_t>(std::max(1, nthreads / 4))) - 1;
    std::vector<std::future<void>> more;
    for (size_t t = 0; t < extra; ++t) more.push_back(std::async(std::launch::async, hasher));
    hasher();
    for (auto& f : more) f.get();
    return nlohmann::json(rows);
  });
}

// Each rank's config.json (and hf_quant_config.json), then manifest.json with the SHA-256 of
// every output file and the inputs' hashes, into the temporary output `dir`. Returns the manifest.
nlohmann::json write_configs_and_manifest(const io::Checkpoint& ckpt, const Plan& p, const ConvertOptions& o,
                                          const Writers& w, const fs::path& dir, const nlohmann::json& inputs) {
  const ConvertResult& res = p.result;
  const nlohmann::json opts = options_json(o, res.g, p.calib_sha256);
  const nlohmann::json provenance = {{"tool", kToolName}, {"version", MLA_VERSION_STRING},
                                     {"checkpoint_fingerprint", p.fingerprint}, {"options", opts},
                                     {"calib_fingerprint_checked", !o.calib.empty()}};
  nlohmann::json outputs = nlohmann::json::object();
  for (int r = 0; r < o.tp; ++r) {
    const std::string rd = io::rank_dir_name(r, o.tp);
    nlohmann::json rank_cfg = rank_config(ckpt, p, o, r, provenance);
    if (p.kv4)
      rank_cfg["kv_cache"] = kv4_cache_section(*p.kv4, p.layout.latent(r).size(), p.cfg.qk_rope_head_dim,
                                               p.cfg.num_hidden_layers, p.kv4_rotation);
    else if (o.kv_cache != "bf16")  // the default (bf16) leaves config.json as the input's plus tpla
      rank_cfg["kv_cache"] = kv_cache_section(o.kv_cache, p.layout.latent(r).size(), p.cfg.qk_rope_head_dim,
                                              p.cfg.num_hidden_layers);
    const std::string config_text = rank_cfg.dump(2) + "\n";
    io::write_file_atomically(dir / rd / "config.json", config_text);
    std::map<std::string, std::string> hashes = w.ranks[r]->sha256();
    hashes["config.json"] = io::sha256_hex(config_text);
    if (const nlohmann::json hq = hf_quant_config(o.kv_cache, MLA_VERSION_STRING); !hq.is_null()) {
      const std::string hq_text = hq.dump(2) + "\n";
      io::write_file_atomically(dir / rd / "hf_quant_config.json", hq_text);
      hashes["hf_quant_config.json"] = io::sha256_hex(hq_text);
    }
    for (const auto& [nm, h] : hashes) outputs[rd + "/" + nm] = h;
  }
  nlohmann::json manifest = {{"tool", kToolName},
                             {"version", MLA_VERSION_STRING},
                             {"options", opts},
                             {"input", {{"files", inputs}, {"checkpoint_fingerprint", p.fingerprint}}},
                             {"ranks", o.tp},
                             {"outputs", outputs}};
  io::write_file_atomically(dir / "manifest.json", manifest.dump(2) + "\n");
  return manifest;
}

// Converts the units on `nthreads` workers, in order. The first error stops everyone and is
// rethrown after the join, once `stop_side_work` has run (an out-of-memory error names the unit
// and its size). Nothing in a worker's handlers allocates: when the address space is
// exhausted, composing a message there would throw again and std::terminate the process,
// leaving the temporary output behind; the message is composed after the join, once the
// workers' buffers are freed.
void run_units(const io::Checkpoint& ckpt, const Plan& p, const ConvertOptions& o, Writers& w, OutputGate& gate,
               int nthreads, std::chrono::steady_clock::time_point t0, const std::function<void()>& stop_side_work) {
  const ConvertResult& res = p.result;
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;
  size_t oom_unit = p.units.size();  // the unit whose conversion ran out of memory, if any
  size_t done = 0;
  uint64_t bytes_done = 0;
  auto last_log = std::chrono::steady_clock::now();
  auto record_failure = [&](size_t unit) {
    std::lock_guard lock(mu);
    if (!error) {
      error = std::current_exception();
      oom_unit = unit;
    }
    failed = true;
    gate.stop();  // waiting workers give up
  };
  auto worker = [&] {
    while (!failed) {
      const std::optional<size_t> next = gate.next(&w.prof->gate_wait);
      if (!next) return;
      const size_t i = *next;
      const Unit& u = p.units[i];
      try {
        {
          struct Done {  // the gate learns the unit ended however it ended
            OutputGate& g;
            ~Done() { g.done(); }
          } done_with_gate{gate};
          if (u.kind == Unit::Kind::Simple) run_simple(ckpt, o, u, w); else run_latent(ckpt, p, o, u, w);
        }
        std::lock_guard lock(mu);
        ++done;
        bytes_done += u.input_bytes;
        const auto now = std::chrono::steady_clock::now();
        const double secs = std::chrono::duration<double>(now - t0).count();
        const bool loud = done == p.units.size() || now - last_log > std::chrono::seconds(2);
        if (loud) last_log = now;
        spdlog::log(loud ? spdlog::level::info : spdlog::level::debug, "[{}/{}] {}  {:.1f}/{:.1f} MB read, {:.0f} MB/s",
                    done, p.units.size(), u.name, bytes_done / 1e6, res.input_bytes / 1e6, bytes_done / 1e6 / secs);
      } catch (const std::bad_alloc&) {
        record_failure(i);
        return;
      } catch (...) {
        record_failure(p.units.size());
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int t = 0; t < nthreads; ++t) pool.emplace_back(worker);
  } catch (...) {  // no memory for another thread: stop and join the started ones, then report
    failed = true;  // (a joinable std::thread destroyed by unwinding would std::terminate)
    gate.stop();
    for (auto& t : pool) t.join();
    stop_side_work();
    throw;
  }
  for (auto& t : pool) t.join();
  if (error) {
    stop_side_work();
    if (oom_unit < p.units.size()) {  // say what and how much, not just "std::bad_alloc"
      const Unit& u = p.units[oom_unit];
      throw Error(io::out_of_memory_message("converting " + u.name + " of " + o.input.string(), 4 * u.input_bytes));
    }
    std::rethrow_exception(error);  // `out` is not committed: nothing is left behind
  }
}

ConvertResult convert_checkpoint(const ConvertOptions& requested) {
  const auto t0 = std::chrono::steady_clock::now();
  struct ReleasePool {  // recycled output buffers (encode.hpp) go back to the system at the end
    ~ReleasePool() { release_buffer_pool(); }
  } release_pool;
  const ConvertOptions o = resolve_hadamard_seed(requested);
  check_paths(o);
  const io::Checkpoint ckpt = io::Checkpoint::open(o.input);
  LiveProfile prof;
  const CpuTimes cpu0 = cpu_times();
  Plan p = make_plan(ckpt, o, prof);
  ConvertResult& res = p.result;
  res.profile.threads = std::max(1, o.threads);
  auto phase_start = t0;
  auto phase = [&](const char* what) {  // per-phase wall time, for docs/benchmarks.md
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - phase_start).count();
    spdlog::info("phase {}: {:.2f} s", what, secs);
    res.profile.wall.emplace_back(what, secs);
    phase_start = now;
  };
  phase("plan (open, validate, fingerprint)");
  if (o.dry_run) {
    fill_profile(res.profile, prof, cpu0);
    return res;
  }

  io::AtomicDirectory out(o.output);
  {  // the whole output must fit before the first byte is written
    uint64_t need = 0;
    for (const auto& rp : res.ranks) need += rp.bytes;
    io::require_free_space(out.tmp_path(), need, "mla-convert output " + o.output.string());
  }
  const uint64_t largest_slice = largest_slice_bytes(ckpt, o, p);
  MemoryBudget memory(std::max(kMinSliceMemoryBytes,
                               static_cast<uint64_t>(std::min(std::max(1, o.threads), kBigSlicesAtOnce)) * largest_slice));
  const uint64_t hold_bytes = o.hold_bytes ? o.hold_bytes : kHashHoldBytes;
  io::HoldBudget hold(hold_bytes);
  OutputGate* gate_ptr = nullptr;  // set before the first unit runs (nothing is hashed before)
  Writers w;  // after the budgets: a failed run's writers hand held bytes back as they close
  w.prof = &prof;
  w.memory = &memory;
  for (int r = 0; r < o.tp; ++r) {
    const fs::path dir = out.tmp_path() / io::rank_dir_name(r, o.tp);
    fs::create_directories(dir);
    w.ranks.push_back(std::make_unique<RankWriters>(dir, res.ranks[r], o.max_shard_bytes, &prof.writer, &hold,
                                                    [&gate_ptr](uint64_t n) { gate_ptr->hashed(n); }));
  }
  const std::vector<std::vector<OutputPiece>> pieces = sort_units_in_output_order(p, o, w);
  // Units start while the output started and not yet hashed fits the hold budget, so nothing
  // is read back for the hash; unless the layout cannot stream (in_order_lag, FP8 output).
  const uint64_t lag = in_order_lag(pieces);
  const bool gated = lag <= hold_bytes / 2;
  std::vector<uint64_t> unit_bytes;
  for (const auto& up : pieces) {
    uint64_t n = 0;
    for (const OutputPiece& q : up) n += q.n;
    unit_bytes.push_back(n);
  }
  OutputGate gate(std::move(unit_bytes), gated ? hold_bytes : OutputGate::kOff);
  gate_ptr = &gate;
  spdlog::log(gated ? spdlog::level::debug : spdlog::level::info,
              "{} units; output started and not yet hashed {} (in order it would reach {:.1f} MB)", p.units.size(),
              gated ? "kept within the " + std::to_string(hold_bytes >> 20) + " MiB hold budget"
                    : std::string("not limited, the layout cannot stream"),
              lag / 1e6);

  const int nthreads = std::max(1, o.threads);
  std::atomic<bool> stop_hashing{false};
  std::future<nlohmann::json> input_hashes = hash_inputs_async(ckpt, o, nthreads, prof, stop_hashing);
  run_units(ckpt, p, o, w, gate, nthreads, t0, [&] {
    stop_hashing = true;  // the hashers stop after their current file
    input_hashes.wait();
  });
  phase("convert (workers, output hashed as written)");
  for (auto& rw : w.ranks) rw->finish();
  phase("finish (last hash bytes, rename)");

  // Provenance, configs, hashes, manifest.
  const nlohmann::json inputs = input_hashes.get();
  phase("wait for input hashes");
  const nlohmann::json manifest = write_configs_and_manifest(ckpt, p, o, w, out.tmp_path(), inputs);
  phase("configs + manifest");
  out.commit();  // fsyncs every file and directory, then renames into place
  phase("sync (fsync all outputs) + commit");
  fill_profile(res.profile, prof, cpu0);
  res.profile.hash_hold_peak_bytes = hold.peak();
  res.profile.gate_peak_bytes = gated ? gate.peak() : 0;
  res.manifest = manifest;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("wrote {} ({} ranks, {:.1f} MB) in {:.2f} s", o.output.string(), o.tp, res.output_bytes / 1e6, res.seconds);
  return res;
}

std::string describe_plan(const ConvertResult& r, bool list_tensors) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "TPLA plan: tp=%zu g=%d, %lld attention layers, input %.1f MB, output %.1f MB\n",
                r.ranks.size(), r.g, static_cast<long long>(r.attention_layers), r.input_bytes / 1e6, r.output_bytes / 1e6);
  s += buf;
  std::snprintf(buf, sizeof buf, "KV cache (BF16 [x_k | k_pe]) per token per device: %lld B (unsliced MLA: %lld B)\n",
                static_cast<long long>(r.kv_bytes_per_token_per_device), static_cast<long long>(r.kv_bytes_per_token_mla));
  s += buf;
  for (const RankPlan& rp : r.ranks) {
    std::snprintf(buf, sizeof buf, "  rank %d: group %d, heads [%lld, %lld), latent [%lld, %lld): %zu tensors, %.1f MB\n",
                  rp.rank, rp.group, static_cast<long long>(rp.heads.begin), static_cast<long long>(rp.heads.end),
                  static_cast<long long>(rp.latent.begin), static_cast<long long>(rp.latent.end), rp.tensors.size(),
                  rp.bytes / 1e6);
    s += buf;
    if (list_tensors)
      for (const auto& t : rp.tensors)
        s += "    " + t.name + " " + std::string(dtype_name(t.dtype)) + " " + shape_to_string(t.shape) + "\n";
  }
  return s;
}

static nlohmann::json profile_json(const ConvertProfile& pr) {
  nlohmann::json phases = nlohmann::json::array();
  for (const PhaseFigure& f : pr.phases)
    phases.push_back({{"phase", f.name}, {"thread_seconds", f.seconds}, {"cpu_seconds", f.cpu_seconds},
                      {"bytes", f.bytes}, {"calls", f.calls}});
  nlohmann::json wall = nlohmann::json::array();
  for (const auto& [name, secs] : pr.wall) wall.push_back({{"step", name}, {"seconds", secs}});
  return {{"threads", pr.threads}, {"phases", phases}, {"wall", wall}, {"cpu_user_seconds", pr.cpu_user_seconds},
          {"cpu_system_seconds", pr.cpu_system_seconds}, {"peak_rss_kb", pr.peak_rss_kb},
          {"hash_hold_peak_bytes", pr.hash_hold_peak_bytes}, {"gate_peak_bytes", pr.gate_peak_bytes}};
}

nlohmann::json result_json(const ConvertResult& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlan& rp : r.ranks)
    ranks.push_back({{"rank", rp.rank}, {"group", rp.group}, {"heads", {rp.heads.begin, rp.heads.end}},
                     {"latent", {rp.latent.begin, rp.latent.end}}, {"tensors", rp.tensors.size()}, {"bytes", rp.bytes}});
  return {{"tp", r.ranks.size()}, {"g", r.g}, {"attention_layers", r.attention_layers},
          {"kv_bytes_per_token_per_device", r.kv_bytes_per_token_per_device},
          {"kv_bytes_per_token_mla", r.kv_bytes_per_token_mla}, {"input_bytes", r.input_bytes},
          {"output_bytes", r.output_bytes}, {"seconds", r.seconds}, {"checkpoint_fingerprint", r.fingerprint},
          {"ranks", ranks}, {"profile", profile_json(r.profile)}};
}

std::string describe_profile(const ConvertResult& r) {
  const ConvertProfile& pr = r.profile;
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "profile: %d threads, %.2f s wall, CPU %.1f s user + %.1f s system, peak RSS %.0f MB, "
                "output held for the hash at most %.0f MB, started and not yet hashed at most %.0f MB\n",
                pr.threads, r.seconds, pr.cpu_user_seconds, pr.cpu_system_seconds, pr.peak_rss_kb / 1e3,
                pr.hash_hold_peak_bytes / 1e6, pr.gate_peak_bytes / 1e6);
  s += buf;
  // thread-s: elapsed time summed over threads; CPU-s: their CPU time in the phase (the rest
  // is waiting: disk, locks, other processes); MB/s per CPU-s is one core's rate; threads:
  // thread-s / wall, the average number of threads in the phase.
  std::snprintf(buf, sizeof buf, "  %-38s %9s %8s %10s %13s %8s\n", "phase (summed over threads)", "thread-s", "CPU-s",
                "MB", "MB/s per CPU", "threads");
  s += buf;
  for (const PhaseFigure& f : pr.phases) {
    if (f.calls == 0) continue;
    std::snprintf(buf, sizeof buf, "  %-38s %9.2f %8.2f %10.1f %13.0f %8.2f\n", f.name.c_str(), f.seconds,
                  f.cpu_seconds, f.bytes / 1e6, f.cpu_seconds > 0 ? f.bytes / 1e6 / f.cpu_seconds : 0.0,
                  r.seconds > 0 ? f.seconds / r.seconds : 0.0);
    s += buf;
  }
  s += "  wall steps:";
  for (const auto& [name, secs] : pr.wall) {
    std::snprintf(buf, sizeof buf, " %s %.2f s;", name.c_str(), secs);
    s += buf;
  }
  return s + "\n";
}

}  // namespace mla::transform
