// safetensors reader: header length, JSON header, per-tensor validation, data-range checks.
//
// Nothing read from the file is trusted: the header length is checked against the file size and
// kMaxHeaderBytes before the JSON is parsed (so a corrupt length never makes us allocate), shape
// products are overflow-checked, and only after every tensor's range is known to lie inside the
// data section and to be disjoint from the others does the File hand out pointers. Duplicate
// names are caught with the parser's key callback, because nlohmann::json keeps only the last of
// two equal keys and the first tensor would silently vanish.
#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::safetensors {

using nlohmann::json;

namespace {

struct DTypeName {
  std::string_view name;
  uint32_t size;
};

// The dtypes of the safetensors spec with a whole number of bytes per element.
constexpr DTypeName kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::optional<uint32_t> dtype_size(std::string_view dtype) {
  for (const auto& d : kDTypes) {
    if (d.name == dtype) return d.size;
  }
  return std::nullopt;
}

std::optional<DType> dtype_to_ga(std::string_view dtype) {
  if (dtype == "F32") return DType::F32;
  if (dtype == "F16") return DType::F16;
  if (dtype == "BF16") return DType::BF16;
  return std::nullopt;
}

const char* ga_to_dtype(DType type) {
  switch (type) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: break;
  }
  GA_THROW(Unsupported, "safetensors holds no ", dtype_name(type), " tensors (only F32, F16, BF16)");
}

// Turns the header JSON into TensorInfos and metadata; a friend of File.
class HeaderParser {
 public:
  HeaderParser(File& file, const std::string& name) : file_(file), name_(name) {}

  void run() {
    const auto bytes = file_.bytes_;
    GA_CHECK(bytes.size() >= 8, InvalidFormat, "safetensors '", name_, "': file of ", bytes.size(),
             " bytes is too small for the 8-byte header length");
    const uint64_t header_len = read_u64_le(bytes.data());
    GA_CHECK(header_len <= kMaxHeaderBytes, InvalidFormat, "safetensors '", name_, "': header length ", header_len,
             " exceeds the limit of ", kMaxHeaderBytes, " bytes");
    GA_CHECK(header_len <= bytes.size() - 8, InvalidFormat, "safetensors '", name_, "': header length ", header_len,
             " runs past the end of the file (", bytes.size(), " bytes)");
    GA_CHECK(header_len >= 2, InvalidFormat, "safetensors '", name_, "': header of ", header_len,
             " bytes cannot hold a JSON object");
    file_.data_offset_ = 8 + header_len;
    data_size_ = bytes.size() - file_.data_offset_;

    const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
    GA_CHECK(text[0] == '{', InvalidFormat, "safetensors '", name_, "': header does not start with '{'");
    const json header = parse_json(text, text + header_len);
    GA_CHECK(header.is_object(), InvalidFormat, "safetensors '", name_, "': header is not a JSON object");

    for (const auto& [key, value] : header.items()) {
      if (key == kMetadataKey) {
        read_metadata(value);
      } else {
        read_tensor(key, value);
      }
    }
    check_ranges();
  }

 private:
  json parse_json(const char* begin, const char* end) {
    std::set<std::string, std::less<>> seen;
    std::string duplicate;
    // depth 1 = keys of the top-level object, i.e. tensor names.
    const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && duplicate.empty()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!seen.insert(key).second) duplicate = key;
      }
      return true;
    };
    json header;
    try {
      header = json::parse(begin, end, on_event);
    } catch (const json::exception& e) {
      GA_THROW(InvalidFormat, "safetensors '", name_, "': header is not valid JSON: ", e.what());
    }
    GA_CHECK(duplicate.empty(), InvalidFormat, "safetensors '", name_, "': tensor '", duplicate,
             "' appears twice in the header");
    return header;
  }

  void read_metadata(const json& value) {
    if (value.is_null()) return;
    GA_CHECK(value.is_object(), InvalidFormat, "safetensors '", name_, "': __metadata__ is not an object");
    for (const auto& [key, v] : value.items()) {
      GA_CHECK(v.is_string(), InvalidFormat, "safetensors '", name_, "': __metadata__ entry '", key,
               "' is not a string");
      file_.metadata_[key] = v.get<std::string>();
    }
  }

  uint64_t read_uint(const json& v, const std::string& tensor, const char* what) {
    GA_CHECK(v.is_number_unsigned(), InvalidFormat, "safetensors '", name_, "': tensor '", tensor, "': ", what,
             " must hold non-negative integers, got ", v.dump());
    return v.get<uint64_t>();
  }

  void read_tensor(const std::string& tensor, const json& value) {
    GA_CHECK(value.is_object(), InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
             "' is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      GA_CHECK(value.contains(field), InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
               "' has no '", field, "'");
    }
    TensorInfo info;
    info.name = tensor;
    const json& dtype = value["dtype"];
    GA_CHECK(dtype.is_string(), InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
             "': dtype is not a string");
    info.dtype = dtype.get<std::string>();
    const auto elem_size = dtype_size(info.dtype);
    GA_CHECK(elem_size.has_value(), Unsupported, "safetensors '", name_, "': tensor '", tensor,
             "' has unknown dtype '", info.dtype, "'");
    info.type = dtype_to_ga(info.dtype);

    const json& shape = value["shape"];
    GA_CHECK(shape.is_array(), InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
             "': shape is not an array");
    uint64_t n = 1;
    bool overflow = false;
    for (const json& d : shape) {
      const uint64_t dim = read_uint(d, tensor, "shape");
      info.shape.push_back(dim);
      if (dim != 0 && n > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      n *= dim;
    }
    GA_CHECK(!overflow && n <= std::numeric_limits<uint64_t>::max() / *elem_size, InvalidFormat, "safetensors '",
             name_, "': tensor '", tensor, "': element count overflows");
    info.n_elements = n;

    const json& offsets = value["data_offsets"];
    GA_CHECK(offsets.is_array() && offsets.size() == 2, InvalidFormat, "safetensors '", name_, "': tensor '",
             tensor, "': data_offsets must be [begin, end]");
    info.begin = read_uint(offsets[0], tensor, "data_offsets");
    info.end = read_uint(offsets[1], tensor, "data_offsets");
    GA_CHECK(info.begin <= info.end, InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
             "': data_offsets begin ", info.begin, " > end ", info.end);
    GA_CHECK(info.end <= data_size_, InvalidFormat, "safetensors '", name_, "': tensor '", tensor,
             "': data_offsets [", info.begin, ", ", info.end, ") run past the data section (", data_size_,
             " bytes)");
    const uint64_t expected = n * *elem_size;
    GA_CHECK(info.nbytes() == expected, InvalidFormat, "safetensors '", name_, "': tensor '", tensor, "': ",
             info.dtype, " shape ", shape.dump(), " needs ", expected, " bytes but data_offsets span ",
             info.nbytes());

    file_.tensor_index_.emplace(tensor, file_.tensors_.size());
    file_.tensors_.push_back(std::move(info));
  }

  // Non-empty tensors must not share bytes (two names aliasing the same bytes is a corrupt file:
  // the official writer never produces it).
  void check_ranges() const {
    std::vector<const TensorInfo*> sorted;
    for (const auto& t : file_.tensors_) {
      if (t.nbytes() > 0) sorted.push_back(&t);
    }
    std::sort(sorted.begin(), sorted.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    for (size_t i = 1; i < sorted.size(); ++i) {
      const TensorInfo& prev = *sorted[i - 1];
      const TensorInfo& cur = *sorted[i];
      GA_CHECK(cur.begin >= prev.end, InvalidFormat, "safetensors '", name_, "': tensors '", prev.name, "' [",
               prev.begin, ", ", prev.end, ") and '", cur.name, "' [", cur.begin, ", ", cur.end, ") overlap");
    }
  }

  File& file_;
  const std::string& name_;
  uint64_t data_size_ = 0;
};

File File::parse(std::span<const uint8_t> bytes, const std::string& name) {
  File file;
  file.path_ = name;
  file.bytes_ = bytes;
  HeaderParser(file, name).run();
  return file;
}

File File::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  File file = parse(mapping->bytes(), path);
  file.storage_ = std::move(mapping);
  return file;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ga::safetensors
