// mla-capture/1 round trip through the C++ writer and reader, and typed errors on bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "common/scratch_dir.hpp"
#include "io/byte_text.hpp"
#include "io/capture.hpp"
#include "io/checkpoint.hpp"
#include "io/hdf5.hpp"
#include "io/mla_weights.hpp"
#include "model/dense_forward.hpp"

namespace {

using mla::MatrixR;

std::filesystem::path temp_dir() { return mla::test::process_scratch_dir("mla_capture_test"); }

TEST(Capture, DenseWriterRoundTripsThroughReader) {
  const auto ckpt = mla::io::Checkpoint::open(std::string(MLA_SOURCE_DIR) + "/datasets/tiny-v3");
  const auto model = mla::io::load_dense_model(ckpt);
  std::vector<uint8_t> text(3 * 16);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>("Hello, MLA world! "[i % 18]);
  const auto windows = mla::io::byte_windows(text, 16, 0);
  ASSERT_EQ(windows.size(), 3u);
  mla::io::CaptureMeta meta{"deepseek_v3", 0, 0, "unit test", "abc", "fp"};
  const auto out = temp_dir() / "cap.h5";
  mla::io::write_dense_capture(model, meta, {{"calib", windows, false}, {"reference", {windows[1]}, true}}, out);
  const mla::io::CaptureReader r(out);
  EXPECT_EQ(r.meta().num_layers, 6);
  EXPECT_EQ(r.meta().hidden_size, 384);
  EXPECT_EQ(r.meta().checkpoint_fingerprint, "fp");
  EXPECT_FALSE(r.has_group("eval"));
  const auto ci = r.group_info("calib");
  EXPECT_EQ(ci.sequences, 3);
  EXPECT_EQ(ci.seq_len, 16);
  EXPECT_FALSE(ci.has_attn_out);
  EXPECT_EQ(r.tokens("calib", 2), windows[2]);
  // The stored hidden state is the forward's own (float32-rounded), sequence by sequence.
  mla::model::ForwardTrace tr;
  tr.want_hidden = true;
  tr.want_attn_out = true;
  const MatrixR logits = mla::model::dense_forward(model, windows[1], &tr);
  const auto h = r.hidden("calib", 4, 1);
  ASSERT_EQ(h.size(), static_cast<size_t>(16 * 384));
  for (size_t i = 0; i < h.size(); i += 97) EXPECT_EQ(h[i], static_cast<float>(tr.hidden[4].data()[i]));
  const auto a = r.attn_out("reference", 5, 0);
  for (size_t i = 0; i < a.size(); i += 89) EXPECT_EQ(a[i], static_cast<float>(tr.attn_out[5].data()[i]));
  const auto lg = r.logits("reference", 0);
  ASSERT_EQ(lg.size(), static_cast<size_t>(16 * 260));
  EXPECT_EQ(lg[300], static_cast<float>(logits.data()[300]));
  // No temporary file is left beside the output.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(out.parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Capture, SplitViewReadsWhatTheWholeFileViewReads) {
  // The one reader opened both ways on the same file: the split against the model (what
  // mla-calibrate streams, raw chunk reads and prefetch) returns the whole-file view's values.
  const auto ckpt = mla::io::Checkpoint::open(std::string(MLA_SOURCE_DIR) + "/datasets/tiny-v3");
  const auto model = mla::io::load_dense_model(ckpt);
  std::vector<uint8_t> text(3 * 16);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>("split view test. "[i % 17]);
  const auto out = temp_dir() / "split.h5";
  mla::io::write_dense_capture(model, {"deepseek_v3", 0, 0, "unit test", "abc", ""},
                               {{"calib", mla::io::byte_windows(text, 16, 0), false}}, out);
  const mla::io::CaptureReader whole(out);
  const mla::io::CaptureReader split(out, model.cfg, "calib");
  EXPECT_EQ(split.info().sequences, 3);
  EXPECT_EQ(split.info().seq_len, 16);
  EXPECT_TRUE(split.info().has_hidden);
  EXPECT_EQ(split.info().latent_type, mla::io::StoredType::F32);
  const auto h = whole.hidden("calib", 2, 1);
  const MatrixR m = split.read_hidden(2, 1);
  ASSERT_EQ(m.size(), static_cast<int64_t>(h.size()));
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(m.data()[i], static_cast<double>(h[i]));
  for (const auto mode : {mla::io::IoMode::Buffered, mla::io::IoMode::Hdf5, mla::io::IoMode::Direct}) {
    mla::io::CaptureReader r(out, model.cfg, "calib");
    r.set_io_mode(mode);
    mla::io::SequencePrefetch pf(r, 3, {"hidden"}, {2, 0}, 2);
    for (const int64_t s : {2, 0}) {
      const auto& rows = pf.next();
      ASSERT_EQ(rows.size(), 1u);
      const auto want = whole.hidden("calib", 3, s);
      ASSERT_EQ(rows[0].rows * rows[0].width, static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(rows[0].at(static_cast<int64_t>(i)), want[i]);
    }
  }
}

TEST(Capture, ReaderRejectsWrongSchemaAndShapes) {
  const auto dir = temp_dir();
  {
    auto f = mla::io::h5::File::create(dir / "bad_schema.h5");
    f.root().set_attr("schema", "mla-capture/0");
  }
  try {
    mla::io::CaptureReader r(dir / "bad_schema.h5");
    FAIL() << "accepted a wrong schema";
  } catch (const mla::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mla-capture/0"), std::string::npos) << e.what();
  }
  {
    auto f = mla::io::h5::File::create(dir / "bad_shape.h5");
    auto& root = f.root();
    root.set_attr("schema", "mla-capture/1");
    root.set_attr("model_type", "deepseek_v2");
    root.set_attr("num_layers", int64_t{1});
    root.set_attr("hidden_size", int64_t{4});
    root.set_attr("source", "test");
    root.set_attr("corpus_sha256", "x");
    auto g = root.create_group("calib");
    const std::vector<int32_t> toks(2 * 3, 1);
    g.write<int32_t>("tokens", {2, 3}, toks.data());
    const std::vector<float> hid(2 * 3 * 5, 0.f);  // D = 5, not 4
    g.write<float>("layer_00/hidden", {2, 3, 5}, hid.data());
  }
  try {
    mla::io::CaptureReader r(dir / "bad_shape.h5");
    FAIL() << "accepted a wrong hidden shape";
  } catch (const mla::InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer_00/hidden"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3, 5]"), std::string::npos) << msg;
  }
}

}  // namespace
