// Vocab::from_hf_json: a Hugging Face tokenizer.json (+ optional tokenizer_config.json).
//
// Only the parts that decide token ids are read, and each is mapped onto what the GGUF path already
// implements, so both sources share one set of algorithms:
// - model BPE with byte_fallback (Llama 2 / Mistral style) -> an SPM vocab whose merges decide by rank;
//   its spaces come from the normalizer (Prepend "▁" + Replace " " -> "▁") or a Metaspace pre-tokenizer.
// - model BPE with a ByteLevel pre-tokenizer -> a byte-level BPE vocab; the Split(Isolated) regexes and
//   ByteLevel(use_regex) become pre_regexes, in their order.
// - normalizer NFC (Qwen2) -> requires_nfc (see nfc.h: text between special tokens is normalized to NFC).
// - added_tokens: special -> Control, others -> UserDefined (split out of the text before tokenizing).
// - the decoder is ignored: decoding follows from the token texts.
// Whatever else a file uses (WordPiece/Unigram models, other normalizers or pre-tokenizers, ByteLevel
// with add_prefix_space) is refused with Unsupported naming it, never approximated.
// BOS/EOS: tokenizer_config.json's add_bos_token/add_eos_token and bos_token/eos_token when given,
// otherwise the post_processor's TemplateProcessing (a special token before/after the sequence).
#include <nlohmann/json.hpp>

#include <string>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/vocab_common.h"

namespace ga {
namespace {

using nlohmann::json;

constexpr const char* kSpaceMarker = "\xE2\x96\x81";  // U+2581

json parse_json_file(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    GA_THROW(InvalidFormat, path, ": not valid JSON: ", e.what());
  }
}

std::string type_of(const json& node) { return node.is_object() ? node.value("type", std::string()) : std::string(); }

// Escapes regex metacharacters so a Split pattern given as {"String": ...} matches literally.
std::string regex_escape(const std::string& literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// A token given as "text" or {"content": "text", ...} (tokenizer_config.json uses both).
std::optional<std::string> token_text(const json& node) {
  if (node.is_string()) return node.get<std::string>();
  if (node.is_object() && node.contains("content") && node["content"].is_string()) {
    return node["content"].get<std::string>();
  }
  return std::nullopt;
}

struct Spaces {
  bool sentencepiece = false;  // spaces are written as U+2581
  bool prefix = false;         // a U+2581 is prepended
};

// Normalizer: null, NFC, or SentencePiece's Prepend("▁") + Replace(" " -> "▁").
void read_normalizer(const json& node, Vocab& v, Spaces& spaces) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const auto& n : node.at("normalizers")) read_normalizer(n, v, spaces);
  } else if (type == "NFC") {
    v.requires_nfc = true;
  } else if (type == "Prepend" && node.value("prepend", std::string()) == kSpaceMarker) {
    spaces.prefix = true;
  } else if (type == "Replace" && node.contains("pattern") && node["pattern"].value("String", std::string()) == " " &&
             node.value("content", std::string()) == kSpaceMarker) {
    spaces.sentencepiece = true;
  } else {
    GA_THROW(Unsupported, "tokenizer.json: unsupported normalizer ", node.dump().substr(0, 200));
  }
}

// Pre-tokenizer: null, ByteLevel, Split(Isolated), Metaspace, or a Sequence of them.
void read_pre_tokenizer(const json& node, Vocab& v, Spaces& spaces, bool& byte_level) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const auto& n : node.at("pretokenizers")) read_pre_tokenizer(n, v, spaces, byte_level);
  } else if (type == "ByteLevel") {
    GA_CHECK(!node.value("add_prefix_space", false), Unsupported,
             "tokenizer.json: ByteLevel pre-tokenizer with add_prefix_space = true is not supported");
    byte_level = true;
    if (node.value("use_regex", true)) v.pre_regexes.push_back(tok::gpt2_regex());
  } else if (type == "Split") {
    GA_CHECK(node.value("behavior", std::string()) == "Isolated" && !node.value("invert", false), Unsupported,
             "tokenizer.json: only Split pre-tokenizers with behavior Isolated and invert false are supported, got ",
             node.dump().substr(0, 200));
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex")) {
      v.pre_regexes.push_back(pattern["Regex"].get<std::string>());
    } else {
      v.pre_regexes.push_back(regex_escape(pattern.at("String").get<std::string>()));
    }
  } else if (type == "Metaspace") {
    GA_CHECK(node.value("replacement", std::string(kSpaceMarker)) == kSpaceMarker && !node.value("split", false),
             Unsupported, "tokenizer.json: only a Metaspace pre-tokenizer with replacement U+2581 and split = false",
             " is supported, got ", node.dump().substr(0, 200));
    spaces.sentencepiece = true;
    const std::string scheme = node.value("prepend_scheme", std::string(node.value("add_prefix_space", true) ? "always" : "never"));
    spaces.prefix = scheme != "never";
  } else {
    GA_THROW(Unsupported, "tokenizer.json: unsupported pre-tokenizer type '", type, "'");
  }
}

// TemplateProcessing "single": [SpecialToken, Sequence, SpecialToken] -> BOS before, EOS after.
void read_post_processor(const json& node, Vocab& v) {
  if (type_of(node) != "TemplateProcessing" || !node.contains("single")) return;
  const json& single = node["single"];
  bool seen_sequence = false;
  for (const auto& item : single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item["SpecialToken"].value("id", std::string());
    const auto& specials = node.value("special_tokens", json::object());
    int32_t id = -1;
    if (specials.contains(name) && specials[name].contains("ids") && !specials[name]["ids"].empty()) {
      id = specials[name]["ids"][0].get<int32_t>();
    }
    if (id < 0) continue;
    if (!seen_sequence) {
      v.add_bos = true, v.bos_id = id;
    } else {
      v.add_eos = true, v.eos_id = id;
    }
  }
}

std::vector<std::string> read_merges(const json& merges) {
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (const auto& m : merges) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else {
      GA_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), InvalidFormat,
               "tokenizer.json: a merge must be \"left right\" or [left, right], got ", m.dump());
      out.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
  }
  return out;
}

void read_config(const std::string& path, Vocab& v, const std::unordered_map<std::string, int32_t>& ids) {
  const json cfg = parse_json_file(path);
  const auto id_of = [&](const char* key) -> std::optional<int32_t> {
    if (!cfg.contains(key)) return std::nullopt;
    const auto text = token_text(cfg[key]);
    if (!text) return std::nullopt;
    const auto it = ids.find(*text);
    GA_CHECK(it != ids.end(), InvalidFormat, path, ": ", key, " '", *text, "' is not a token of the vocabulary");
    return it->second;
  };
  if (auto id = id_of("bos_token")) v.bos_id = *id;
  if (auto id = id_of("eos_token")) v.eos_id = *id;
  if (auto id = id_of("pad_token")) v.pad_id = *id;
  if (auto id = id_of("unk_token")) v.unk_id = *id;
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) v.add_bos = cfg["add_bos_token"].get<bool>();
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) v.add_eos = cfg["add_eos_token"].get<bool>();
  if (cfg.contains("chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      v.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{name, template}, ...]: the one named "default"
      for (const auto& entry : t) {
        if (entry.value("name", std::string()) == "default") v.chat_template = entry.value("template", std::string());
      }
    }
  }
}

}  // namespace

Vocab Vocab::from_hf_json(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path) {
  const json root = parse_json_file(tokenizer_json_path);
  GA_CHECK(root.is_object() && root.contains("model"), InvalidFormat, tokenizer_json_path, ": no \"model\" object");
  const json& model = root["model"];
  const std::string model_type = type_of(model);
  GA_CHECK(model_type == "BPE", Unsupported, tokenizer_json_path, ": unsupported tokenizer model type '", model_type,
           "' (supported: BPE)");

  Vocab v;
  try {
    // Token table: model.vocab plus added_tokens, indexed by id (gaps stay empty and are never produced).
    std::unordered_map<std::string, int32_t> ids;
    int64_t max_id = -1;
    for (const auto& [text, id] : model.at("vocab").items()) {
      const int64_t i = id.get<int64_t>();
      GA_CHECK(i >= 0 && i < INT32_MAX, InvalidFormat, tokenizer_json_path, ": token '", text, "' has id ", i);
      max_id = std::max(max_id, i);
    }
    const json added = root.value("added_tokens", json::array());
    for (const auto& t : added) max_id = std::max(max_id, t.at("id").get<int64_t>());
    GA_CHECK(max_id >= 0, InvalidFormat, tokenizer_json_path, ": empty vocabulary");
    v.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
    v.token_types.assign(v.tokens.size(), TokenType::Unused);
    for (const auto& [text, id] : model["vocab"].items()) {
      v.tokens[id.get<size_t>()] = text;
      v.token_types[id.get<size_t>()] = TokenType::Normal;
      ids[text] = id.get<int32_t>();
    }
    for (const auto& t : added) {
      const int64_t id = t.at("id").get<int64_t>();
      GA_CHECK(id >= 0, InvalidFormat, tokenizer_json_path, ": added token with id ", id);
      v.tokens[static_cast<size_t>(id)] = t.at("content").get<std::string>();
      v.token_types[static_cast<size_t>(id)] = t.value("special", false) ? TokenType::Control : TokenType::UserDefined;
      ids[v.tokens[static_cast<size_t>(id)]] = static_cast<int32_t>(id);
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = ids.find(model["unk_token"].get<std::string>());
      if (it != ids.end()) v.unk_id = it->second, v.token_types[static_cast<size_t>(it->second)] = TokenType::Unknown;
    }
    v.merges = read_merges(model.at("merges"));
    v.ignore_merges = model.value("ignore_merges", false);
    v.byte_fallback = model.value("byte_fallback", false);

    Spaces spaces;
    bool byte_level = false;
    read_normalizer(root.value("normalizer", json()), v, spaces);
    read_pre_tokenizer(root.value("pre_tokenizer", json()), v, spaces, byte_level);
    if (byte_level) {
      GA_CHECK(!spaces.sentencepiece && !spaces.prefix && !v.byte_fallback, Unsupported, tokenizer_json_path,
               ": a ByteLevel tokenizer that also uses SentencePiece spaces or byte_fallback is not supported");
      v.type = VocabType::BPE;
      v.pre = v.pre_regexes.empty() ? "none" : "tokenizer.json";
      v.add_space_prefix = false;
    } else {
      GA_CHECK(spaces.sentencepiece, Unsupported, tokenizer_json_path,
               ": a BPE model needs a ByteLevel pre-tokenizer or SentencePiece-style spaces (Metaspace, or Replace",
               " \" \" -> \"\\u2581\")");
      GA_CHECK(v.pre_regexes.empty(), Unsupported, tokenizer_json_path,
               ": Split pre-tokenizers together with SentencePiece-style spaces are not supported");
      v.type = VocabType::SPM;
      v.add_space_prefix = spaces.prefix;
      if (v.byte_fallback) {
        for (size_t id = 0; id < v.tokens.size(); ++id) {
          const std::string& t = v.tokens[id];
          if (v.token_types[id] == TokenType::Normal && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
            v.token_types[id] = TokenType::Byte;
          }
        }
      }
    }

    read_post_processor(root.value("post_processor", json()), v);
    if (!tokenizer_config_path.empty()) read_config(tokenizer_config_path, v, ids);
  } catch (const json::exception& e) {
    GA_THROW(InvalidFormat, tokenizer_json_path, ": unexpected structure: ", e.what());
  }

  tok::apply_eog_conventions(v);
  tok::validate_vocab(v, tokenizer_json_path.c_str());
  return v;
}

}  // namespace ga
