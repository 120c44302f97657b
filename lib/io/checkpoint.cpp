#include "io/checkpoint.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"

namespace mla::io {
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(path.string() + ": not valid JSON: " + e.what());
  }
}

}  // namespace

std::map<std::string, std::string> parse_weight_map(const nlohmann::json& index, const std::string& source) {
  std::map<std::string, std::string> weight_map;
  const auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || wm == index.end() || !wm->is_object())
    throw InputError(source + ": key 'weight_map' is missing or not an object");
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string())
      throw InputError(source + ": weight_map['" + tensor + "'] has bad value " + file.dump() +
                       ": expected a shard file name");
    const std::string f = file.get<std::string>();
    // A shard is a plain file beside the index: no paths that escape the directory.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw InputError(source + ": weight_map['" + tensor + "'] has bad value '" + f +
                       "': expected a file name in the checkpoint directory");
    weight_map[tensor] = f;
  }
  if (weight_map.empty()) throw InputError(source + ": key 'weight_map' is empty");
  return weight_map;
}

struct Checkpoint::Impl {
  fs::path dir;
  nlohmann::json config_json;
  model::MlaConfig config;
  std::vector<SafetensorsFile> files;        // sorted by path
  std::map<std::string, size_t> where;       // tensor -> index into files

  const SafetensorsFile& file_for(const std::string& name) const {
    auto it = where.find(name);
    if (it == where.end())
      throw InputError(dir.string() + ": tensor '" + name + "' is not in the checkpoint");
    return files[it->second];
  }
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const fs::path& dir) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  if (!fs::is_directory(dir)) throw InputError(dir.string() + ": not a checkpoint directory (does not exist or is a file)");

  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) throw InputError(config_path.string() + ": missing (a checkpoint needs config.json)");
  impl->config_json = read_json_file(config_path);
  impl->config = model::parse_mla_config(impl->config_json, config_path.string());
  model::log_config_warnings(impl->config);

  const fs::path index_path = dir / kIndexFileName;
  const fs::path single_path = dir / kSingleFileName;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  if (fs::exists(index_path)) {
    weight_map = parse_weight_map(read_json_file(index_path), index_path.string());
  } else if (fs::exists(single_path)) {
    // Single file: its own header is the map.
    auto file = SafetensorsFile::open(single_path);
    for (const auto& t : file.header().tensors) weight_map[t.name] = std::string(kSingleFileName);
    impl->files.push_back(std::move(file));
  } else {
    throw InputError(dir.string() + ": no " + std::string(kSingleFileName) + " and no " + std::string(kIndexFileName));
  }

  if (impl->files.empty()) {
    std::map<std::string, std::string> first_tensor_of;  // shard -> a tensor naming it (for messages)
    for (const auto& [tensor, file] : weight_map) first_tensor_of.emplace(file, tensor);
    for (const auto& [file, tensor] : first_tensor_of) {
      const fs::path p = dir / file;
      if (!fs::exists(p))
        throw InputError(index_path.string() + ": shard '" + file + "' (named for tensor '" + tensor +
                         "') is missing from " + dir.string());
      impl->files.push_back(SafetensorsFile::open(p));  // validates the header
    }
  }
  std::map<std::string, size_t> file_index;
  for (size_t i = 0; i < impl->files.size(); ++i) file_index[impl->files[i].path().filename().string()] = i;

  // Every mapped tensor must be in its shard, and every tensor of a shard must be mapped there:
  // a tensor the index does not list would be invisible to every lookup.
  for (const auto& [tensor, file] : weight_map) {
    const size_t fi = file_index.at(file);
    if (!impl->files[fi].find(tensor))
      throw InputError(index_path.string() + ": weight_map puts tensor '" + tensor + "' in shard '" + file +
                       "', which has no such tensor");
    impl->where[tensor] = fi;
  }
  for (const auto& f : impl->files) {
    for (const auto& t : f.header().tensors) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end() || it->second != f.path().filename().string())
        throw InputError(f.path().string() + ": tensor '" + t.name + "' is not mapped to this shard by " +
                         index_path.filename().string());
    }
  }

  // FP8 block-scale pairing, checked up front so a bad checkpoint fails at open.
  const std::string suffix = "_scale_inv";
  for (const auto& [name, fi] : impl->where) {
    const TensorInfo* info = impl->files[fi].find(name);
    if (info->dtype == DType::F8_E4M3) {
      const std::string sname = name + suffix;
      if (!impl->where.count(sname))
        throw InputError(impl->files[fi].path().string() + ": F8_E4M3 tensor '" + name + "' has no '" + sname + "'");
      if (info->shape.size() != 2)
        throw InputError(impl->files[fi].path().string() + ": F8_E4M3 tensor '" + name + "' has shape " +
                         shape_to_string(info->shape) + ": block scales need a 2-D weight");
      const SafetensorsFile& sf = impl->files[impl->where.at(sname)];
      const TensorInfo* sinfo = sf.find(sname);
      const Shape want = fp8_scale_shape(info->shape[0], info->shape[1]);
      if (sinfo->dtype != DType::F32 || sinfo->shape != want)
        throw InputError(sf.path().string() + ": scale tensor '" + sname + "' is " +
                         std::string(dtype_name(sinfo->dtype)) + " " + shape_to_string(sinfo->shape) +
                         ", expected F32 " + shape_to_string(want) + " for weight " + shape_to_string(info->shape));
    } else if (name.size() > suffix.size() && name.ends_with(suffix)) {
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (!impl->where.count(base))
        throw InputError(impl->files[fi].path().string() + ": scale tensor '" + name + "' has no weight '" + base + "'");
    }
  }
  return Checkpoint(std::move(impl));
}

const fs::path& Checkpoint::dir() const { return impl_->dir; }
const nlohmann::json& Checkpoint::config_json() const { return impl_->config_json; }
const model::MlaConfig& Checkpoint::config() const { return impl_->config; }

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->where.size());
  for (const auto& [n, _] : impl_->where) names.push_back(n);
  return names;  // std::map keeps them sorted
}

bool Checkpoint::has(const std::string& name) const { return impl_->where.count(name) != 0; }

fs::path Checkpoint::file_of(const std::string& name) const { return impl_->file_for(name).path(); }

std::vector<fs::path> Checkpoint::files() const {
  std::vector<fs::path> out;
  for (const auto& f : impl_->files) out.push_back(f.path());
  std::sort(out.begin(), out.end());
  return out;
}

TensorView Checkpoint::raw(const std::string& name) const { return impl_->file_for(name).view(name); }

std::vector<double> Checkpoint::load_f64(const std::string& name, Shape* shape) const {
  const TensorView v = raw(name);
  if (shape) *shape = v.shape;
  if (v.dtype == DType::F8_E4M3) {
    const MatrixR m = dequantize_fp8_block(v, raw(name + "_scale_inv"), name);
    return std::vector<double>(m.data(), m.data() + m.size());
  }
  if (!dtype_is_float(v.dtype) && v.dtype != DType::BOOL && v.dtype != DType::U8 && v.dtype != DType::I8 &&
      v.dtype != DType::I16 && v.dtype != DType::U16 && v.dtype != DType::I32 && v.dtype != DType::U32 &&
      v.dtype != DType::I64 && v.dtype != DType::U64)
    throw InputError(file_of(name).string() + ": tensor '" + name + "' has dtype " + std::string(dtype_name(v.dtype)) +
                     " that cannot be read as float64");
  return to_f64(v);
}

MatrixR Checkpoint::load_matrix(const std::string& name) const {
  Shape shape;
  std::vector<double> values = load_f64(name, &shape);
  int64_t rows = 1, cols = 0;
  if (shape.size() == 1) {
    cols = shape[0];
  } else if (shape.size() == 2) {
    rows = shape[0];
    cols = shape[1];
  } else {
    throw InputError(file_of(name).string() + ": tensor '" + name + "' has shape " + shape_to_string(shape) +
                     ", expected a 1-D or 2-D weight");
  }
  return Eigen::Map<const MatrixR>(values.data(), rows, cols);
}

}  // namespace mla::io
