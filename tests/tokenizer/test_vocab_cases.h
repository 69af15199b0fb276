// Reader for llama.cpp's tokenizer test vectors (../shared/vocab/ggml-vocab-<name>.gguf.{inp,out}),
// shared by the tokenizer test files. Format: see ../shared/vocab/README.md.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/test_data.h"

namespace ga::test {

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;  // expected, with add_special = false, parse_special = false
};

inline std::vector<VocabCase> read_vocab_cases(const std::string& name) {
  const std::string inp = read_file(shared_path("vocab/ggml-vocab-" + name + ".gguf.inp"));
  const std::string out = read_file(shared_path("vocab/ggml-vocab-" + name + ".gguf.out"));
  static const std::string kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t sep = inp.find(kSeparator, pos);
    if (sep == std::string::npos) throw std::runtime_error(name + ".inp does not end with a separator");
    texts.push_back(inp.substr(pos, sep - pos));
    pos = sep + kSeparator.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (const auto& text : texts) {
    if (!std::getline(lines, line)) throw std::runtime_error(name + ".out has fewer lines than tests");
    VocabCase c{text, {}};
    std::istringstream ids(line);
    for (long long id; ids >> id;) c.ids.push_back(static_cast<int32_t>(id));
    cases.push_back(std::move(c));
  }
  if (std::getline(lines, line)) throw std::runtime_error(name + ".out has more lines than tests");
  return cases;
}

}  // namespace ga::test
