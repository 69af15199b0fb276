// A checkpoint's tensors across one or several safetensors files (Hugging Face sharding).
//
// The index (model.safetensors.index.json) maps each tensor name to a shard file name. We open
// each distinct shard once, register every tensor it holds, and then check the index against what
// the shards really contain: a name the index places in a shard that does not hold it, or a name
// held by two shards, is a corrupt checkpoint. Shard names must be plain file names in the same
// folder, so an index can never make us open a file elsewhere.
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::safetensors {

namespace fs = std::filesystem;
using nlohmann::json;

void Checkpoint::add_file(File file, const std::string& origin) {
  const size_t file_index = files_.size();
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const std::string& name = file.tensors()[i].name;
    const auto [it, inserted] = entries_.emplace(name, Entry{file_index, i});
    GA_CHECK(inserted, InvalidFormat, origin, ": tensor '", name, "' is in both '", files_[it->second.file].path(),
             "' and '", file.path(), "'");
  }
  files_.push_back(std::move(file));
}

Checkpoint Checkpoint::open_file(const std::string& path) {
  Checkpoint ckpt;
  ckpt.add_file(File::open(path), path);
  return ckpt;
}

Checkpoint Checkpoint::open_index(const std::string& index_path) {
  const std::string text = read_text_file(index_path);
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    GA_THROW(InvalidFormat, "'", index_path, "' is not valid JSON: ", e.what());
  }
  GA_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), InvalidFormat,
           "'", index_path, "' has no \"weight_map\" object");
  const json& weight_map = index["weight_map"];
  GA_CHECK(!weight_map.empty(), InvalidFormat, "'", index_path, "': weight_map is empty");

  const fs::path dir = fs::path(index_path).parent_path();
  Checkpoint ckpt;
  std::map<std::string, size_t> shard_files;  // shard name -> index in files_
  for (const auto& [tensor, shard_value] : weight_map.items()) {
    GA_CHECK(shard_value.is_string(), InvalidFormat, "'", index_path, "': weight_map entry '", tensor,
             "' is not a file name");
    const std::string shard = shard_value.get<std::string>();
    GA_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard.find('\\') == std::string::npos &&
                 shard != "." && shard != "..",
             InvalidFormat, "'", index_path, "': shard name '", shard, "' of tensor '", tensor,
             "' is not a plain file name");
    if (shard_files.count(shard) == 0) {
      shard_files.emplace(shard, ckpt.files_.size());
      ckpt.add_file(File::open((dir / shard).string()), index_path);
    }
  }
  for (const auto& [tensor, shard_value] : weight_map.items()) {
    const size_t expected_file = shard_files.at(shard_value.get<std::string>());
    const auto it = ckpt.entries_.find(tensor);
    GA_CHECK(it != ckpt.entries_.end() && it->second.file == expected_file, InvalidFormat, "'", index_path,
             "': tensor '", tensor, "' should be in '", shard_value.get<std::string>(), "' but is not there");
  }
  if (ckpt.entries_.size() != weight_map.size()) {
    GA_LOG(Warn, index_path, ": the shards hold ", ckpt.entries_.size() - weight_map.size(),
           " tensors the weight_map does not list");
  }
  return ckpt;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  const fs::path root(dir);
  GA_CHECK(fs::is_directory(root), Io, "'", dir, "' is not a folder");
  if (fs::exists(root / kIndexFileName)) return open_index((root / kIndexFileName).string());
  if (fs::exists(root / kSingleFileName)) return open_file((root / kSingleFileName).string());
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") found.push_back(entry.path());
  }
  GA_CHECK(!found.empty(), InvalidFormat, "'", dir, "' holds no ", kSingleFileName, ", ", kIndexFileName,
           " or other *.safetensors file");
  GA_CHECK(found.size() == 1, InvalidFormat, "'", dir, "' holds ", found.size(), " *.safetensors files but no ",
           kIndexFileName, " saying how they fit together");
  return open_file(found.front().string());
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &files_[it->second.file].tensors()[it->second.tensor];
}

const uint8_t* Checkpoint::tensor_data(std::string_view name) const {
  const auto it = entries_.find(name);
  GA_CHECK(it != entries_.end(), InvalidArgument, "checkpoint has no tensor '", name, "'");
  const File& file = files_[it->second.file];
  return file.tensor_data(file.tensors()[it->second.tensor]);
}

const std::string& Checkpoint::path_of(std::string_view name) const {
  const auto it = entries_.find(name);
  GA_CHECK(it != entries_.end(), InvalidArgument, "checkpoint has no tensor '", name, "'");
  return files_[it->second.file].path();
}

std::vector<std::shared_ptr<const void>> Checkpoint::storages() const {
  std::vector<std::shared_ptr<const void>> out;
  for (const auto& f : files_) {
    if (f.storage()) out.push_back(f.storage());
  }
  return out;
}

}  // namespace ga::safetensors
