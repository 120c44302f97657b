#include "io/capture.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace mla::io {
namespace {

std::string shape_str(const h5::Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

[[noreturn]] void bad(const std::string& file, const std::string& what) { throw InputError(file + ": " + what); }

void expect_dims(const std::string& file, const std::string& path, const h5::Dims& got, const h5::Dims& want) {
  if (got != want) bad(file, "dataset " + path + " has shape " + shape_str(got) + ", expected " + shape_str(want));
}

std::vector<float> to_float(const MatrixR& m) {
  std::vector<float> out(static_cast<size_t>(m.size()));
  for (int64_t i = 0; i < m.size(); ++i) out[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return out;
}

}  // namespace

std::string capture_layer_path(int64_t layer, const std::string& what) {
  return h5::layer_group_name(layer) + "/" + what;
}

CaptureMeta read_capture_attributes(const h5::Group& root, const std::string& where) {
  const std::string schema = root.has_attr("schema") ? root.attr_string("schema") : "<missing>";
  if (schema != kCaptureSchema)
    bad(where, "attribute schema is '" + schema + "', expected '" + std::string(kCaptureSchema) + "'");
  auto optional = [&](const char* name) { return root.has_attr(name) ? root.attr_string(name) : std::string(); };
  CaptureMeta meta;
  meta.model_type = optional("model_type");
  meta.num_layers = root.attr_int("num_layers");
  meta.hidden_size = root.attr_int("hidden_size");
  if (meta.num_layers <= 0) bad(where, "attribute num_layers is " + std::to_string(meta.num_layers) + ", expected > 0");
  if (meta.hidden_size <= 0) bad(where, "attribute hidden_size is " + std::to_string(meta.hidden_size) + ", expected > 0");
  meta.source = optional("source");
  meta.corpus_sha256 = optional("corpus_sha256");
  meta.checkpoint_fingerprint = optional("checkpoint_fingerprint");
  return meta;
}

CaptureReader::CaptureReader(const std::filesystem::path& path) : file_(h5::File::open_read(path)) {
  meta_ = read_capture_attributes(file_.root(), path.string());
  for (const char* g : {"calib", "eval", "reference"}) {
    if (has_group(g)) (void)group_info(g);  // validates every shape of the group
  }
}

bool CaptureReader::has_group(const std::string& group) const { return file_.root().exists(group); }

CaptureGroupInfo CaptureReader::group_info(const std::string& group) const {
  const std::string f = file_.path().string();
  if (!has_group(group)) bad(f, "group /" + group + " not found");
  const h5::Group g = file_.root().open_group(group);
  CaptureGroupInfo info;
  info.name = group;
  const h5::Dims td = g.open("tokens").dims();
  if (td.size() != 2) bad(f, "dataset /" + group + "/tokens has shape " + shape_str(td) + ", expected [S, T]");
  info.sequences = static_cast<int64_t>(td[0]);
  info.seq_len = static_cast<int64_t>(td[1]);
  const h5::Dims act{td[0], td[1], static_cast<uint64_t>(meta_.hidden_size)};
  info.has_attn_out = g.exists(capture_layer_path(0, "attn_out"));
  for (int64_t i = 0; i < meta_.num_layers; ++i) {
    const std::string p = capture_layer_path(i, "hidden");
    if (!g.exists(p)) bad(f, "dataset /" + group + "/" + p + " missing (num_layers = " + std::to_string(meta_.num_layers) + ")");
    expect_dims(f, "/" + group + "/" + p, g.open(p).dims(), act);
    if (info.has_attn_out) {
      const std::string q = capture_layer_path(i, "attn_out");
      if (!g.exists(q)) bad(f, "dataset /" + group + "/" + q + " missing");
      expect_dims(f, "/" + group + "/" + q, g.open(q).dims(), act);
    }
  }
  if (g.exists("logits")) {
    const h5::Dims ld = g.open("logits").dims();
    if (ld.size() != 3 || ld[0] != td[0] || ld[1] != td[1])
      bad(f, "dataset /" + group + "/logits has shape " + shape_str(ld) + ", expected [" + std::to_string(td[0]) + ", " +
                 std::to_string(td[1]) + ", V]");
    info.vocab = static_cast<int64_t>(ld[2]);
  }
  return info;
}

std::vector<int32_t> CaptureReader::tokens(const std::string& group, int64_t seq) const {
  return file_.root().open_group(group).open("tokens").read_rows<int32_t>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::hidden(const std::string& group, int64_t layer, int64_t seq) const {
  return file_.root().open_group(group).open(capture_layer_path(layer, "hidden")).read_rows<float>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::attn_out(const std::string& group, int64_t layer, int64_t seq) const {
  return file_.root().open_group(group).open(capture_layer_path(layer, "attn_out")).read_rows<float>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::logits(const std::string& group, int64_t seq) const {
  return file_.root().open_group(group).open("logits").read_rows<float>(static_cast<uint64_t>(seq), 1);
}

void write_capture_attributes(h5::Group& root, const CaptureMeta& meta) {
  root.set_attr("schema", kCaptureSchema);
  root.set_attr("model_type", meta.model_type);
  root.set_attr("num_layers", meta.num_layers);
  root.set_attr("hidden_size", meta.hidden_size);
  root.set_attr("source", meta.source);
  root.set_attr("corpus_sha256", meta.corpus_sha256);
  if (!meta.checkpoint_fingerprint.empty()) root.set_attr("checkpoint_fingerprint", meta.checkpoint_fingerprint);
}

void write_dense_capture(const model::DenseModel& m, const CaptureMeta& meta, const std::vector<CaptureGroupSpec>& groups,
                         const std::filesystem::path& out,
                         const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const int64_t L = m.cfg.num_hidden_layers, D = m.cfg.hidden_size, V = m.cfg.vocab_size;
  h5::write_atomically(out, [&](h5::File& file) {
      h5::Group& root = file.root();
      CaptureMeta written = meta;
      written.num_layers = L;
      written.hidden_size = D;
      write_capture_attributes(root, written);
      for (const CaptureGroupSpec& spec : groups) {
        const uint64_t S = spec.sequences.size();
        if (S == 0) throw InputError("capture group '" + spec.name + "' has no sequences");
        const uint64_t T = spec.sequences.front().size();
        std::vector<int32_t> toks;
        for (const auto& s : spec.sequences) {
          if (s.size() != T)
            throw InputError("capture group '" + spec.name + "': sequences of different lengths (" +
                             std::to_string(s.size()) + " vs " + std::to_string(T) + ")");
          toks.insert(toks.end(), s.begin(), s.end());
        }
        h5::Group g = root.create_group(spec.name);
        g.write<int32_t>("tokens", {S, T}, toks.data());
        std::vector<h5::Dataset> hid, att;
        for (int64_t i = 0; i < L; ++i) {
          hid.push_back(g.create<float>(capture_layer_path(i, "hidden"), {S, T, static_cast<uint64_t>(D)}, 1));
          if (spec.reference)
            att.push_back(g.create<float>(capture_layer_path(i, "attn_out"), {S, T, static_cast<uint64_t>(D)}, 1));
        }
        std::optional<h5::Dataset> logits_ds;
        if (spec.reference) logits_ds = g.create<float>("logits", {S, T, static_cast<uint64_t>(V)}, 1);
        for (uint64_t s = 0; s < S; ++s) {
          model::ForwardTrace tr;
          tr.want_hidden = true;
          tr.want_attn_out = spec.reference;
          const MatrixR logits = model::dense_forward(m, spec.sequences[s], &tr);
          for (int64_t i = 0; i < L; ++i) {
            hid[static_cast<size_t>(i)].write_rows<float>(s, 1, to_float(tr.hidden[static_cast<size_t>(i)]).data());
            if (spec.reference)
              att[static_cast<size_t>(i)].write_rows<float>(s, 1, to_float(tr.attn_out[static_cast<size_t>(i)]).data());
          }
          if (logits_ds) logits_ds->write_rows<float>(s, 1, to_float(logits).data());
          if (progress) progress(spec.name, static_cast<int64_t>(s + 1), static_cast<int64_t>(S));
        }
      }
  });
}

}  // namespace mla::io
