#pragma once
// safetensors: reader (mmap, zero-copy views, strict validation) and deterministic writer.
//
// Format: [u64 little-endian N][N bytes UTF-8 JSON header][data buffer].
// Header: {"__metadata__": {str: str}?, "<name>": {"dtype": "BF16", "shape": [..],
//          "data_offsets": [begin, end]}, ...}; offsets are relative to the data buffer.
// Validation (exactly the reference implementation's rules, safetensors/src/tensor.rs):
//   - file at least 8 bytes; N <= 100,000,000; 8 + N <= file size
//   - header is UTF-8 and a JSON object; no duplicate tensor names
//   - every tensor: known dtype, shape of non-negative integers, begin <= end
//   - numel x bits / 8 == end - begin, computed with overflow checks (F4: numel even)
//   - offsets, sorted, are contiguous from 0 with no holes or overlaps and end at the
//     data buffer's size
//   - __metadata__, if present, maps strings to strings
// Every violation throws SafetensorsError naming the file, the tensor and field, and the
// bad value.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/phase_clock.hpp"
#include "core/tensor.hpp"

namespace mla::io {

class SafetensorsError : public InputError {
 public:
  enum class Kind {
    Io, TooSmall, HeaderTooLarge, HeaderPastEof, InvalidUtf8, InvalidJson, NotAnObject,
    DuplicateName, MissingField, BadDtype, BadShape, BadOffsets, SizeMismatch, Overflow,
    NotContiguous, BufferSizeMismatch, BadMetadata, MissingTensor,
  };
  SafetensorsError(Kind kind, const std::string& message) : InputError(message), kind_(kind) {}
  Kind kind() const { return kind_; }
  static std::string_view kind_name(Kind k);

 private:
  Kind kind_;
};

struct TensorInfo {
  std::string name;
  DType dtype{};
  Shape shape;
  uint64_t begin = 0;  // data_offsets, relative to the data buffer
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorInfo> tensors;            // sorted by begin offset
  std::map<std::string, std::string> metadata;
  uint64_t header_size = 0;                   // N
  uint64_t data_size = 0;                     // bytes of the data buffer
};

// Parses and validates a whole file image (header + data). `label` names the file in errors.
// Pure function over bytes: the fuzz target calls this.
Header parse_and_validate(std::span<const std::byte> file_bytes, const std::string& label);

// A read-only memory-mapped safetensors file.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::filesystem::path& path() const;
  const Header& header() const;
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  TensorView view(std::string_view name) const;          // throws MissingTensor

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- writing ----

struct TensorSpec {
  std::string name;
  DType dtype{};
  Shape shape;
  uint64_t nbytes() const;
};

// Deterministic layout: tensors ordered by dtype alignment (largest first; equal sizes in
// the reference serializer's dtype order, so the data buffer matches the Python package's
// byte for byte) then name,
// header JSON compact with keys sorted, padded with spaces to a multiple of 8 bytes.
struct FileLayout {
  std::vector<TensorSpec> order;        // write order
  std::vector<uint64_t> offsets;        // begin offset of each, relative to data buffer
  std::string header_json;              // padded
  uint64_t data_size = 0;
  uint64_t file_size() const { return 8 + header_json.size() + data_size; }
};
FileLayout plan_file(std::vector<TensorSpec> specs, const std::map<std::string, std::string>& metadata);

// Where StreamingFileWriters add their time and bytes (mla-convert --profile), from any thread.
struct WriterStats {
  PhaseTotals write;      // pwrite / direct writes of tensor bytes
  PhaseTotals hash;       // SHA-256 updates of tensor bytes
  PhaseTotals read_back;  // bytes read back from the file for the hash (not held in memory)
};

// Bytes that writers may keep in memory, shared by every writer that points at it: a tensor
// that lands ahead of its file's hashed prefix is held (no copy: its owner is kept alive)
// until the prefix reaches it, instead of being read back from the file for the hash.
class HoldBudget {
 public:
  explicit HoldBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  bool try_take(uint64_t n);
  void give(uint64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  uint64_t limit_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
};

struct StreamingWriterOptions {
  // finish() fsyncs the file before renaming it. Off: the caller makes the file durable
  // (e.g. AtomicDirectory::commit() fsyncs its whole tree before the rename).
  bool fsync_on_finish = true;
  // Computes the SHA-256 of the whole file while tensors arrive: whenever the tensors
  // written so far extend the contiguous prefix of the data buffer, the writer that
  // completes it hashes that prefix (its own bytes from memory, earlier-landed ones read back
  // while their pages are hot). sha256() then needs no second pass over the file.
  bool hash = false;
  // Writes the 4096-byte-aligned interior of every tensor of >= 1 MiB with O_DIRECT (staged
  // through an aligned buffer), bypassing the page-cache copy that dominates buffered writes
  // of large outputs; unaligned edges and small tensors go through the page cache. Falls back
  // to buffered writes where the filesystem refuses O_DIRECT. Durability still needs fsync.
  bool direct_io = false;
  WriterStats* stats = nullptr;  // not counted when null
  // With hash: where out-of-order tensors given with an owner (write()'s third argument) are
  // held for the hash; null: they are read back from the file when the prefix reaches them.
  HoldBudget* hold = nullptr;
  // With hash: called with the byte count of every range of tensor data hashed (from the
  // thread that hashed it), e.g. to pace work by how far the hash has got.
  std::function<void(uint64_t)> on_hashed = nullptr;
};

// Streams one file into a temporary beside `path` (io::AtomicFile), renamed to `path` by
// finish(): the header is written at construction, tensors may then be written in any order
// (positional writes, safe from several threads), finish() checks each was written exactly
// once and (by default) fsyncs.
class StreamingFileWriter {
 public:
  StreamingFileWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                      const std::map<std::string, std::string>& metadata, StreamingWriterOptions options = {});
  ~StreamingFileWriter();  // unfinished: the `.tmp` file is removed
  StreamingFileWriter(const StreamingFileWriter&) = delete;
  StreamingFileWriter& operator=(const StreamingFileWriter&) = delete;
  const FileLayout& layout() const;
  // Throws SizeMismatch (wrong byte count), MissingTensor (name not planned),
  // DuplicateName (written twice).
  void write(std::string_view name, std::span<const std::byte> bytes);
  // The same; `owner` keeps `bytes` valid for as long as the writer holds it, so a tensor
  // that lands ahead of the hashed prefix can be hashed later from memory (options.hold).
  void write(std::string_view name, std::span<const std::byte> bytes, std::shared_ptr<const void> owner);
  // Bytes [at, at + bytes.size()) of a tensor, for tensors built in pieces (e.g. row blocks):
  // the pieces of a tensor may come in any order and from any thread, and must cover it exactly
  // once by finish() (overlap: DuplicateName; empty or outside the tensor: SizeMismatch).
  void write_part(std::string_view name, uint64_t at, std::span<const std::byte> bytes,
                  std::shared_ptr<const void> owner = nullptr);
  void finish();
  // Hex SHA-256 of the finished file (options.hash); throws Error before finish() or without hash.
  const std::string& sha256() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes a whole file from owned tensors.
void write_safetensors(const std::filesystem::path& path, const std::vector<OwnedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Shards: greedy in deterministic order, a new shard when the next tensor would pass
// max_shard_bytes (a single larger tensor gets its own shard). One shard is written as
// `model.safetensors` without an index; more as `model-0000i-of-0000n.safetensors` plus
// `model.safetensors.index.json` {"metadata": {"total_size": ...}, "weight_map": {...}}.
struct ShardPlan {
  std::vector<std::string> file_names;
  std::vector<std::vector<TensorSpec>> shards;
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  uint64_t total_size = 0;                         // sum of tensor bytes
};
// Shard assignment walks tensors in name order (a weight and its `_scale_inv` stay
// together); max_shard_bytes counts tensor bytes only, not headers.
ShardPlan plan_shards(std::vector<TensorSpec> specs, uint64_t max_shard_bytes);
std::string index_json(const ShardPlan& plan);  // indent 2, keys sorted, trailing newline

inline constexpr std::string_view kSingleFileName = "model.safetensors";
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
std::string shard_file_name(size_t index, size_t count);  // 0-based index: model-00001-of-00003...

// Writes the shards (and the index when more than one) into an existing directory, e.g. an
// AtomicDirectory's tmp_path(). Every shard carries the same __metadata__.
ShardPlan write_safetensors_sharded(const std::filesystem::path& dir, const std::vector<OwnedTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    uint64_t max_shard_bytes);

}  // namespace mla::io
