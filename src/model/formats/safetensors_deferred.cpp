// The streamed safetensors writer: the header is known from the tensor list alone (names, dtypes, shapes, sizes),
// so it is written first and each tensor's bytes follow as its fill produces them, in one buffer of that tensor's
// size. Memory use is the largest tensor, not the model.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::safetensors {

using nlohmann::json;

namespace {

constexpr uint64_t kHeaderAlignment = 8;  // as Writer and the Python writer pad it

std::string header_text(std::span<const DeferredTensor> tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const DeferredTensor& t : tensors) {
    GA_CHECK(t.name != kMetadataKey, InvalidArgument, "a tensor cannot be named ", kMetadataKey);
    GA_CHECK(names.insert(t.name).second, InvalidArgument, "safetensors writer: tensor '", t.name, "' added twice");
    if (const auto size = dtype_size(t.dtype)) {
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      GA_CHECK(n * *size == t.nbytes, InvalidArgument, "safetensors writer: tensor '", t.name, "' (", t.dtype,
               ") needs ", n * *size, " bytes, got ", t.nbytes);
    }
    GA_CHECK(static_cast<bool>(t.fill), InvalidArgument, "safetensors writer: tensor '", t.name, "' has no fill");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string text = header.dump();
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  return text;
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace

void write_deferred(const std::string& path, std::span<const DeferredTensor> tensors,
                    const std::map<std::string, std::string>& metadata) {
  const std::string text = header_text(tensors, metadata);
  const std::string tmp = path + ".tmp";
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GA_CHECK(out.good(), Io, "cannot create '", tmp, "'");
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), sizeof(length));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<uint8_t> buffer;
    for (const DeferredTensor& t : tensors) {
      buffer.assign(t.nbytes, 0);
      t.fill(buffer.data());
      out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
      GA_CHECK(out.good(), Io, "cannot write '", tmp, "' (tensor ", t.name, ")");
    }
    out.flush();
    GA_CHECK(out.good(), Io, "cannot write '", tmp, "'");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    GA_THROW(Io, "cannot rename '", tmp, "' to '", path, "'");
  }
}

std::vector<std::string> write_sharded(const std::string& dir, std::span<const DeferredTensor> tensors,
                                       uint64_t max_shard_bytes) {
  GA_CHECK(max_shard_bytes > 0, InvalidArgument, "safetensors writer: the shard limit must be positive");
  // [first, last) tensor ranges of each shard
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (shards.empty() || (bytes > 0 && bytes + tensors[i].nbytes > max_shard_bytes)) {
      shards.emplace_back(i, i);
      bytes = 0;
    }
    shards.back().second = i + 1;
    bytes += tensors[i].nbytes;
  }
  GA_CHECK(!shards.empty(), InvalidArgument, "safetensors writer: no tensors to write to '", dir, "'");
  const std::filesystem::path folder(dir);
  std::filesystem::create_directories(folder);
  // Stale shards of an earlier run would be read beside the new files: the folder keeps only what is written now.
  for (const std::filesystem::directory_entry& f : std::filesystem::directory_iterator(folder)) {
    const std::string file = f.path().filename().string();
    if (file.ends_with(".safetensors") || file == kIndexFileName) std::filesystem::remove(f.path());
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_deferred((folder / kSingleFileName).string(), tensors, metadata);
    written.emplace_back(kSingleFileName);
    return written;
  }
  std::map<std::string, std::string> weight_map;
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    const auto part = tensors.subspan(shards[s].first, shards[s].second - shards[s].first);
    write_deferred((folder / name).string(), part, metadata);
    for (const DeferredTensor& t : part) {
      weight_map[t.name] = name;
      total += t.nbytes;
    }
    written.push_back(name);
  }
  const std::filesystem::path index = folder / kIndexFileName;
  std::ofstream out(index, std::ios::binary | std::ios::trunc);
  out << index_json(weight_map, total);
  GA_CHECK(out.good(), Io, "cannot write '", index.string(), "'");
  written.emplace_back(kIndexFileName);
  return written;
}

}  // namespace ga::safetensors
