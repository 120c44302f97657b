// Structure-aware libFuzzer target for the HDF5 capture reader (docs/fuzzing.md): the input is
// a recipe (h5_recipe.hpp) for a well-formed capture with adversarial content (attributes,
// groups, tokens, per-layer hidden / latent / k_pe / attn_out / logits datasets with fuzzed
// extents, element types, layouts, fill values and values), built in memory by libhdf5 and read
// through io::CaptureReader both ways:
//  - whole file (verify-decode, mla-forward): opened, then tokens and every layer's hidden
//    (and attn_out, logits) of the first and last sequence of each group;
//  - one split against a fuzzed model (mla-calibrate): opened, then every layer of the first
//    and last sequence through read_hidden / read_latent or SequencePrefetch (buffered,
//    direct, HDF5 or auto reads; raw chunk pread when the layout allows).
// The oracle is the reader's contract (capture.hpp) evaluated on the recipe: an accepted file
// satisfies every rule; a file that satisfies them is accepted; a read of finite stored values
// succeeds and returns exactly the stored values (float32, bfloat16, and what HDF5 converts
// exactly), a read of a sequence holding NaN or Inf fails with an mla::Error (split reader).
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "h5_recipe_dataset.hpp"
#include "io/capture.hpp"

namespace {

using fuzz::h5r::DsSpec;
using fuzz::h5r::Elem;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_capture_h5_recipe: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A scalar integer attribute (num_layers, hidden_size) of the recipe.
struct IntAttr {
  enum Kind { Int64, Missing, Double, String, Int32 } kind = Int64;
  int64_t value = 0;
  bool readable() const { return kind == Int64 || kind == Double || kind == Int32; }
};

IntAttr pick_int_attr(FuzzedDataProvider& fdp, fuzz::h5r::Builder& b, const char* name, int64_t valid, bool& changed) {
  IntAttr a;
  a.value = valid;
  const int k = fdp.ConsumeIntegralInRange<int>(0, 9);
  switch (k) {
    case 1: a.kind = IntAttr::Missing; break;
    case 2: a.kind = IntAttr::Double; break;  // an integral double: HDF5 converts it exactly
    case 3: a.kind = IntAttr::String; break;
    case 4: a.kind = IntAttr::Int32; break;
    case 5: a.value = 0; break;
    case 6: a.value = -1; break;
    case 7: a.value = valid + 1; break;
    case 8: a.value = valid - 1; break;
    case 9: a.value = fdp.ConsumeIntegralInRange<int64_t>(-1000, 1000); break;
    default: break;
  }
  if (a.kind != IntAttr::Int64 || a.value != valid) changed = true;
  switch (a.kind) {
    case IntAttr::Int64: b.attr_number("/", name, H5T_STD_I64LE, 0, a.value, true); break;
    case IntAttr::Double: b.attr_number("/", name, H5T_IEEE_F64LE, static_cast<double>(a.value), 0, false); break;
    case IntAttr::String: b.attr_string("/", name, std::to_string(a.value), false); break;
    case IntAttr::Int32: b.attr_number("/", name, H5T_STD_I32LE, 0, a.value, true); break;
    default: break;
  }
  return a;
}

// One group of the capture (calib, eval or reference) as the recipe wrote it.
struct GroupRecipe {
  int kind = 0;  // 0 group, 1 missing, 2 a dataset in its place
  uint64_t S = 0, T = 0, V = 0;
  int mode = 0;  // 0 hidden, 1 latent + k_pe, 2 both
  DsSpec tokens, logits;
  std::vector<DsSpec> hidden, latent, k_pe, attn_out;  // per layer written
  bool exists() const { return kind != 1; }
};

std::vector<double> pattern(FuzzedDataProvider& fdp, uint64_t n) {
  std::vector<double> v(n);
  const double scale = fdp.ConsumeIntegralInRange<int>(1, 64) / 16.0;
  for (uint64_t i = 0; i < n; ++i) v[i] = scale * (static_cast<double>((i * 7919) % 97) / 48.0 - 1.0);
  return v;
}

GroupRecipe build_group(FuzzedDataProvider& fdp, fuzz::h5r::Builder& b, const std::string& name, int64_t layers,
                        uint64_t D, uint64_t d_c, uint64_t d_r, bool reference, bool present, bool& changed) {
  GroupRecipe g;
  g.kind = present ? std::array<int, 8>{0, 0, 0, 0, 0, 0, 0, 2}[fdp.ConsumeIntegralInRange<int>(0, 7)] : 1;
  if (g.kind == 2) {
    changed = true;
    b.dataset(name, Elem::I32, {}, {}, std::vector<unsigned char>(4, 0));
  }
  if (g.kind != 0) return g;
  b.group(name);
  g.S = fdp.ConsumeIntegralInRange<uint64_t>(1, 3);
  g.T = fdp.ConsumeIntegralInRange<uint64_t>(1, 4);
  g.V = fdp.ConsumeIntegralInRange<uint64_t>(1, 4);
  g.mode = reference ? 0 : std::array<int, 4>{0, 1, 0, 2}[fdp.ConsumeIntegralInRange<int>(0, 3)];
  const Elem elem = fdp.ConsumeBool() ? Elem::BF16 : Elem::F32;  // both valid
  std::vector<double> toks(g.S * g.T);
  for (auto& t : toks) t = fdp.ConsumeIntegralInRange<int>(0, 255);
  g.tokens = fuzz::h5r::pick_dataset(fdp, b, name + "/tokens", Elem::I32, {g.S, g.T}, toks, 0, changed);
  const int64_t file_layers = std::max<int64_t>(0, layers + std::array<int64_t, 6>{0, 0, 0, 0, -1, 1}[fdp.ConsumeIntegralInRange<int>(0, 5)]);
  for (int64_t l = 0; l < file_layers; ++l) {
    const std::string lg = name + "/" + mla::io::h5::layer_group_name(l) + "/";
    auto ds = [&](const char* what, uint64_t w) {
      return fuzz::h5r::pick_dataset(fdp, b, lg + what, elem, {g.S, g.T, w}, pattern(fdp, g.S * g.T * w), 2, changed);
    };
    if (g.mode != 1) g.hidden.push_back(ds("hidden", D));
    if (g.mode != 0) {
      g.latent.push_back(ds("latent", d_c));
      g.k_pe.push_back(ds("k_pe", d_r));
    }
    if (reference) g.attn_out.push_back(ds("attn_out", D));
  }
  if (reference) g.logits = fuzz::h5r::pick_dataset(fdp, b, name + "/logits", Elem::F32, {g.S, g.T, g.V}, pattern(fdp, g.S * g.T * g.V), 2, changed);
  else g.logits.kind = DsSpec::Missing;
  return g;
}

// The recipe's dataset of layer l (absent beyond the layers written).
const DsSpec* at(const std::vector<DsSpec>& v, int64_t l) {
  return l < static_cast<int64_t>(v.size()) ? &v[static_cast<size_t>(l)] : nullptr;
}

// Stored values of sequence s (rows T x width) and whether the reader must return them exactly
// as float32: float32 and bfloat16 are read raw; f16, big-endian f32 and integers convert
// exactly; f64 converts exactly when in float range (HDF5's overflow handling not assumed).
struct Expect {
  bool finite = true;
  bool exact = true;  // false: f64 beyond float range, where neither outcome is asserted
  std::vector<float> values;
};
Expect expect_seq(const DsSpec& d, uint64_t s, uint64_t row_elems) {
  Expect e;
  for (uint64_t i = 0; i < row_elems; ++i) {
    const double x = d.stored[s * row_elems + i];
    e.finite &= std::isfinite(x);
    if (d.elem == Elem::F64 && std::isfinite(x) && std::fabs(x) >= 3.4e38) e.exact = false;
    e.values.push_back(static_cast<float>(x));
  }
  return e;
}

bool same(const float* got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) return false;
  return true;
}

// ---- whole file ----
void whole_file(const std::filesystem::path& path, const fuzz::h5r::StrAttr& schema, bool optional_ok, const IntAttr& nl,
                const IntAttr& hs,
                const std::array<GroupRecipe, 3>& groups) {
  static const char* names[] = {"calib", "eval", "reference"};
  std::string broken;
  if (!fuzz::h5r::reads_as(schema, mla::io::kCaptureSchema)) broken = "schema";
  else if (!nl.readable() || nl.value <= 0) broken = "num_layers";
  else if (!hs.readable() || hs.value <= 0) broken = "hidden_size";
  else if (!optional_ok) broken = "an optional attribute that is not a string";
  for (int gi = 0; gi < 3 && broken.empty(); ++gi) {
    const GroupRecipe& g = groups[static_cast<size_t>(gi)];
    if (!g.exists()) continue;
    if (g.kind != 0) { broken = std::string(names[gi]) + " is not a group"; break; }
    if (!g.tokens.is_dataset() || g.tokens.dims.size() != 2) { broken = "tokens"; break; }
    const std::vector<uint64_t> act{g.tokens.dims[0], g.tokens.dims[1], static_cast<uint64_t>(hs.value)};
    const DsSpec* a0 = at(g.attn_out, 0);
    const bool has_attn = a0 && a0->link_exists();
    for (int64_t l = 0; l < nl.value && broken.empty(); ++l) {
      const DsSpec* h = at(g.hidden, l);
      if (!h || !h->is_dataset() || h->dims != act) broken = "hidden of layer " + std::to_string(l);
      const DsSpec* a = at(g.attn_out, l);
      if (has_attn && (!a || !a->is_dataset() || a->dims != act)) broken = "attn_out of layer " + std::to_string(l);
    }
    if (broken.empty() && g.logits.link_exists() &&
        (!g.logits.is_dataset() || g.logits.dims.size() != 3 || g.logits.dims[0] != act[0] || g.logits.dims[1] != act[1]))
      broken = "logits";
  }
  std::unique_ptr<mla::io::CaptureReader> r;
  try {
    r = std::make_unique<mla::io::CaptureReader>(path);
  } catch (const mla::Error& e) {
    if (broken.empty()) fail("whole file: refused a valid capture", e.what());
    return;
  }
  if (!broken.empty()) fail("whole file: accepted a capture that breaks a rule", broken);
  if (r->meta().num_layers != nl.value || r->meta().hidden_size != hs.value) fail("whole file", "root attributes");
  for (int gi = 0; gi < 3; ++gi) {
    const GroupRecipe& g = groups[static_cast<size_t>(gi)];
    if (r->has_group(names[gi]) != g.exists()) fail("whole file", "has_group");
    if (!g.exists()) continue;
    const auto info = r->group_info(names[gi]);
    const uint64_t S = g.tokens.dims[0], T = g.tokens.dims[1];
    if (static_cast<uint64_t>(info.sequences) != S || static_cast<uint64_t>(info.seq_len) != T) fail("whole file", "group_info");
    if (S == 0 || g.tokens.huge) continue;
    for (uint64_t s : {uint64_t{0}, S - 1}) {
      try {
        const auto t = r->tokens(names[gi], static_cast<int64_t>(s));
        if (t.size() != T) fail("whole file", "tokens size");
        if (g.tokens.elem == Elem::I32)
          for (uint64_t k = 0; k < T; ++k)
            if (t[k] != g.tokens.stored[s * T + k]) fail("whole file", "tokens values");
      } catch (const mla::Error& e) {
        if (fuzz::h5r::is_numeric(g.tokens.elem)) fail("whole file: tokens read failed", e.what());
      }
      for (int64_t l = 0; l < nl.value; ++l) {
        const DsSpec& h = *at(g.hidden, l);
        const uint64_t n = T * static_cast<uint64_t>(hs.value);
        try {
          const auto v = r->hidden(names[gi], l, static_cast<int64_t>(s));
          if (v.size() != n) fail("whole file", "hidden size");
          const Expect e = expect_seq(h, s, n);
          if (h.elem == Elem::F32 && !same(v.data(), e.values)) fail("whole file", "hidden values");
        } catch (const mla::Error& e) {
          if (fuzz::h5r::is_numeric(h.elem)) fail("whole file: hidden read failed", e.what());
        }
      }
    }
  }
}

// ---- one split against a model ----
void split_reader(const std::filesystem::path& path, const mla::model::MlaConfig& cfg, const std::string& split,
                  const fuzz::h5r::StrAttr& schema, bool optional_ok, const IntAttr& nl, const IntAttr& hs,
                  const GroupRecipe& g,
                  int read_way) {
  const uint64_t D = static_cast<uint64_t>(cfg.hidden_size), dc = static_cast<uint64_t>(cfg.kv_lora_rank),
                 dr = static_cast<uint64_t>(cfg.qk_rope_head_dim);
  std::string broken;
  bool has_hidden = false;
  if (!fuzz::h5r::reads_as(schema, mla::io::kCaptureSchema)) broken = "schema";
  else if (!nl.readable() || nl.value <= 0) broken = "num_layers";
  else if (!hs.readable() || hs.value <= 0) broken = "hidden_size";
  else if (!optional_ok) broken = "an optional attribute that is not a string";
  else if (nl.value != cfg.attention_layers() && nl.value != cfg.num_hidden_layers) broken = "num_layers vs model";
  else if (hs.value != cfg.hidden_size) broken = "hidden_size vs model";
  else if (g.kind != 0) broken = "split group";
  else if (!g.tokens.is_dataset() || g.tokens.dims.size() != 2 || g.tokens.dims[0] == 0 || g.tokens.dims[1] == 0) broken = "tokens";
  else {
    const DsSpec* h0 = at(g.hidden, 0);
    has_hidden = h0 && h0->link_exists();
    const uint64_t S = g.tokens.dims[0], T = g.tokens.dims[1];
    for (int64_t l = 0; l < nl.value && broken.empty(); ++l) {
      auto ok = [&](const DsSpec* d, uint64_t w) { return d && d->is_dataset() && d->dims == std::vector<uint64_t>{S, T, w} && fuzz::h5r::is_float(d->elem); };
      if (has_hidden ? !ok(at(g.hidden, l), D) : !ok(at(g.latent, l), dc) || !ok(at(g.k_pe, l), dr))
        broken = "layer " + std::to_string(l);
    }
  }
  std::unique_ptr<mla::io::CaptureReader> r;
  try {
    r = std::make_unique<mla::io::CaptureReader>(path, cfg, split);
  } catch (const mla::Error& e) {
    if (broken.empty()) fail("split: refused a valid capture", e.what());
    return;
  }
  if (!broken.empty()) fail("split: accepted a capture that breaks a rule", broken);
  const auto& info = r->info();
  const uint64_t S = g.tokens.dims[0], T = g.tokens.dims[1];
  if (info.has_hidden != has_hidden || static_cast<uint64_t>(info.sequences) != S || static_cast<uint64_t>(info.seq_len) != T)
    fail("split", "info");
  if (g.tokens.huge) return;
  std::vector<std::string> what = has_hidden ? std::vector<std::string>{"hidden"} : std::vector<std::string>{"latent", "k_pe"};
  static const mla::io::IoMode modes[] = {mla::io::IoMode::Buffered, mla::io::IoMode::Direct, mla::io::IoMode::Hdf5,
                                          mla::io::IoMode::Auto};
  if (read_way > 0) r->set_io_mode(modes[read_way - 1]);
  const std::vector<int64_t> seqs = S == 1 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, static_cast<int64_t>(S - 1)};
  for (int64_t l = 0; l < nl.value; ++l) {
    std::unique_ptr<mla::io::SequencePrefetch> pf;
    if (read_way > 0) pf = std::make_unique<mla::io::SequencePrefetch>(*r, l, what, seqs, 1);
    for (int64_t s : seqs) {
      // What the recipe stored for this sequence, per dataset read.
      std::vector<Expect> want;
      std::vector<uint64_t> widths;
      bool finite = true, exact = true;  // exact false: HDF5's f64 -> f32 overflow handling decides
      for (const auto& w : what) {
        const DsSpec& d = *at(w == "hidden" ? g.hidden : w == "latent" ? g.latent : g.k_pe, l);
        const uint64_t width = w == "hidden" ? D : w == "latent" ? dc : dr;
        want.push_back(expect_seq(d, static_cast<uint64_t>(s), T * width));
        widths.push_back(width);
        finite &= want.back().finite;
        exact &= want.back().exact;
      }
      try {
        std::vector<std::vector<float>> got;
        if (pf) {
          const auto& rows = pf->next();
          for (const auto& rr : rows) {
            std::vector<float> v(static_cast<size_t>(rr.rows * rr.width));
            for (size_t i = 0; i < v.size(); ++i) v[i] = rr.at(static_cast<int64_t>(i));
            got.push_back(std::move(v));
          }
        } else if (has_hidden) {
          const mla::MatrixR h = r->read_hidden(l, s);
          got.emplace_back(h.data(), h.data() + h.size());
        } else {
          mla::MatrixR c, k;
          r->read_latent(l, s, c, k);
          got.emplace_back(c.data(), c.data() + c.size());
          got.emplace_back(k.data(), k.data() + k.size());
        }
        if (!finite && exact) fail("split: a read returned a sequence holding NaN or Inf", what[0]);
        for (size_t k = 0; k < got.size(); ++k) {
          if (got[k].size() != T * widths[k]) fail("split", "returned size");
          for (float x : got[k])
            if (!std::isfinite(x)) fail("split", "returned a non-finite value");
          if (exact && !same(got[k].data(), want[k].values)) fail("split: returned values differ from the file", what[k]);
        }
      } catch (const mla::Error& e) {
        if (finite && exact) fail("split: a read of finite values failed", e.what());
        break;  // the prefetcher stops at its first error
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchCleanup cleanup;
  FuzzedDataProvider fdp(data, size);
  bool changed = false;

  mla::model::MlaConfig cfg;
  cfg.model_type = "deepseek_v3";
  cfg.num_hidden_layers = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  cfg.num_nextn_predict_layers = fdp.ConsumeIntegralInRange<int64_t>(0, 1);
  cfg.hidden_size = fdp.ConsumeIntegralInRange<int64_t>(1, 8);
  cfg.kv_lora_rank = fdp.ConsumeIntegralInRange<int64_t>(1, 8);
  cfg.qk_rope_head_dim = fdp.ConsumeIntegralInRange<int64_t>(1, 4);
  cfg.num_heads = 2;
  cfg.qk_nope_head_dim = 4;
  cfg.v_head_dim = 4;
  const auto D = static_cast<uint64_t>(cfg.hidden_size);

  fuzz::h5r::Builder b(fdp.ConsumeIntegralInRange<int>(0, 1));
  const auto schema = fuzz::h5r::pick_string_attr(fdp, mla::io::kCaptureSchema, changed);
  fuzz::h5r::write_string_attr(b, "/", "schema", schema);
  const int64_t layers = fdp.ConsumeBool() ? cfg.attention_layers() : cfg.num_hidden_layers;  // both valid
  const IntAttr nl = pick_int_attr(fdp, b, "num_layers", layers, changed);
  const IntAttr hs = pick_int_attr(fdp, b, "hidden_size", cfg.hidden_size, changed);
  // The optional string attributes: absent is fine, present they must be strings.
  bool optional_ok = true;
  for (const char* opt : {"model_type", "source", "corpus_sha256", "checkpoint_fingerprint"}) {
    const auto a = fuzz::h5r::pick_string_attr(fdp, "x", changed);
    fuzz::h5r::write_string_attr(b, "/", opt, a);
    optional_ok &= a.kind != fuzz::h5r::StrAttr::Integer;
  }

  const int present = fdp.ConsumeIntegralInRange<int>(0, 7);  // bits: eval, reference absent/present; calib always
  std::array<GroupRecipe, 3> groups;
  const int64_t file_layers = std::max<int64_t>(nl.value, 0) < 8 ? std::max<int64_t>(nl.value, 0) : 8;
  groups[0] = build_group(fdp, b, "calib", file_layers, D, static_cast<uint64_t>(cfg.kv_lora_rank),
                          static_cast<uint64_t>(cfg.qk_rope_head_dim), false, true, changed);
  groups[1] = build_group(fdp, b, "eval", file_layers, D, static_cast<uint64_t>(cfg.kv_lora_rank),
                          static_cast<uint64_t>(cfg.qk_rope_head_dim), false, present & 1, changed);
  groups[2] = build_group(fdp, b, "reference", file_layers, D, 0, 0, true, present & 2, changed);
  const bool eval_split = (present & 1) && fdp.ConsumeBool();
  const int read_way = fdp.ConsumeIntegralInRange<int>(0, 4);  // 0: read_hidden / read_latent; 1-4: prefetch mode
  const auto& path = b.write_image();

  whole_file(path, schema, optional_ok, nl, hs, groups);
  split_reader(path, cfg, eval_split ? "eval" : "calib", schema, optional_ok, nl, hs, groups[eval_split ? 1 : 0], read_way);
  return 0;
}
