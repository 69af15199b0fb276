// Chat templates rendered by ga::ChatTemplate against jinja2, the reference Hugging Face renders them with.
//
// tests/data/chat_templates holds real model templates (from their tokenizer_config.json files), a few
// feature templates, the conversations, and goldens/<template>.json written by tools/gen_chat_goldens.py from
// jinja2's output. Every (template, conversation) pair must match byte for byte; where jinja2 stopped with
// raise_exception the same message must come back; where jinja2 failed otherwise, ChatTemplate must fail too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/chat.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/tokenizer.h"

namespace {

using json = nlohmann::ordered_json;

std::string data_dir() {
  return ga::test::repo_path("tests/data/chat_templates");
}

json read_json(const std::string& path) { return json::parse(ga::test::read_file(path)); }

std::string template_text(const std::string& name) {
  return ga::test::read_file(data_dir() + "/templates/" + name + ".jinja");
}

ga::ChatTemplateOptions options_for(const json& tokens, const json& conversation) {
  ga::ChatTemplateOptions opt;
  opt.add_generation_prompt = conversation.at("add_generation_prompt").get<bool>();
  if (tokens.at("bos_token").is_string()) opt.bos_token = tokens.at("bos_token").get<std::string>();
  if (tokens.at("eos_token").is_string()) opt.eos_token = tokens.at("eos_token").get<std::string>();
  if (conversation.contains("vars")) opt.extra_vars_json = conversation.at("vars").dump();
  return opt;
}

// Plain role/content conversations also go through the std::vector<ChatMessage> entry point.
bool as_plain_messages(const json& messages, std::vector<ga::ChatMessage>& out) {
  for (const json& m : messages) {
    if (m.size() != 2 || !m.contains("role") || !m.contains("content") || !m.at("content").is_string()) return false;
    out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  return true;
}

TEST(ChatTemplate, MatchesJinja2OnEveryTemplateAndConversation) {
  const json manifest = read_json(data_dir() + "/templates.json");
  const json conversations = read_json(data_dir() + "/conversations.json");
  int outputs = 0, raises = 0, errors = 0;
  for (auto it = manifest.begin(); it != manifest.end(); ++it) {
    if (it.key().rfind('_', 0) == 0) continue;
    const std::string name = it.key();
    SCOPED_TRACE(name);
    const json goldens = read_json(data_dir() + "/goldens/" + name + ".json");
    const ga::ChatTemplate tmpl(template_text(name));
    for (const json& conv : conversations) {
      const std::string case_name = conv.at("name").get<std::string>();
      SCOPED_TRACE(name + " / " + case_name);
      const json& golden = goldens.at(case_name);
      const ga::ChatTemplateOptions opt = options_for(it.value(), conv);
      const std::string messages = conv.at("messages").dump();
      std::vector<ga::ChatMessage> plain;
      const bool is_plain = as_plain_messages(conv.at("messages"), plain);
      if (golden.contains("output")) {
        const std::string expected = golden.at("output").get<std::string>();
        EXPECT_EQ(tmpl.apply_json(messages, opt), expected);
        if (is_plain) {
          EXPECT_EQ(tmpl.apply(plain, opt), expected);
        }
        ++outputs;
      } else if (golden.contains("raise")) {
        try {
          tmpl.apply_json(messages, opt);
          ADD_FAILURE() << "expected raise_exception: " << golden.at("raise");
        } catch (const ga::Error& e) {
          EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument);
          EXPECT_EQ(e.message(), golden.at("raise").get<std::string>());
        }
        ++raises;
      } else {
        EXPECT_THROW(tmpl.apply_json(messages, opt), ga::Error) << "jinja2 failed with " << golden.at("error");
        ++errors;
      }
    }
  }
  // A run that compared nothing is a failure, never a pass.
  EXPECT_GT(outputs, 300);
  EXPECT_GT(raises, 30);
  EXPECT_GT(errors, 10);
}

TEST(ChatTemplate, FallbackIsChatMLAndVocabTemplateIsUsed) {
  ga::Vocab empty;
  EXPECT_EQ(ga::ChatTemplate::for_vocab(empty).source(), ga::ChatTemplate::chatml_source());
  EXPECT_EQ(ga::ChatTemplate::chatml_source(), template_text("chatml-default"));

  // Phi-3's GGUF vocab: its own template and special tokens give jinja2's rendering.
  const ga::Vocab phi3 = ga::Vocab::from_gguf(ga::gguf::File::open(ga::test::shared_path("vocab/ggml-vocab-phi-3.gguf")));
  const ga::ChatTemplate tmpl = ga::ChatTemplate::for_vocab(phi3);
  EXPECT_EQ(tmpl.source(), template_text("phi3"));
  const ga::ChatTemplateOptions opt = ga::ChatTemplate::options_for_vocab(phi3, true);
  const json manifest = read_json(data_dir() + "/templates.json");
  EXPECT_EQ(opt.bos_token, manifest.at("phi3").at("bos_token").get<std::string>());
  EXPECT_EQ(opt.eos_token, manifest.at("phi3").at("eos_token").get<std::string>());
  const json goldens = read_json(data_dir() + "/goldens/phi3.json");
  for (const json& conv : read_json(data_dir() + "/conversations.json")) {
    if (conv.at("name") != "multi_turn") continue;
    EXPECT_EQ(tmpl.apply_json(conv.at("messages").dump(), opt),
              goldens.at("multi_turn").at("output").get<std::string>());  // newer nlohmann-json has no string == json
  }
}

TEST(ChatTemplate, RuntimeErrorsNameTheirPlace) {
  const ga::ChatTemplate tmpl("line one\n{{ messages[0].content + 1 }}");
  try {
    tmpl.apply({{"user", "hi"}}, {});
    FAIL() << "expected an error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("line 2:"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("can only concatenate str (not \"int\") to str"), std::string::npos) << e.message();
  }
  try {
    tmpl.apply_json("[{\"role\": ", {});
    FAIL() << "expected an error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument);
  }
}

}  // namespace
