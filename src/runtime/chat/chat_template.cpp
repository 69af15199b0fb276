// ga::ChatTemplate: the public face of the chat-template interpreter (include/gpu_accel/chat.h).
//
// Builds the render variables the way transformers' apply_chat_template does (messages, tools=None,
// documents=None, add_generation_prompt, the special tokens the tokenizer has, then the caller's extras) and
// turns the interpreter's internal failures into ga::Error with the kinds the header promises.
#include "gpu_accel/chat.h"

#include <nlohmann/json.hpp>

#include "gpu_accel/error.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/chat/ast.h"
#include "runtime/chat/interpreter.h"
#include "runtime/chat/lexer.h"

namespace ga {

struct ChatTemplate::Impl {
  std::string source;
  std::vector<chat::StmtPtr> program;
};

ChatTemplate::ChatTemplate(std::string source) {
  auto impl = std::make_shared<Impl>();
  try {
    impl->program = chat::parse_template(source);
  } catch (const chat::ParseError& e) {
    if (e.unsupported) GA_THROW(Unsupported, "chat template line ", e.line, ":", e.col, ": ", e.what());
    GA_THROW(InvalidArgument, "chat template line ", e.line, ":", e.col, ": ", e.what());
  }
  impl->source = std::move(source);
  impl_ = std::move(impl);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

namespace {

std::string render(const std::vector<chat::StmtPtr>& program, chat::Value messages, const ChatTemplateOptions& opt) {
  using chat::Value;
  auto globals = std::make_shared<chat::Scope>();
  chat::add_builtin_globals(*globals);
  globals->set("messages", std::move(messages));
  globals->set("tools", Value::none());
  globals->set("documents", Value::none());
  globals->set("add_generation_prompt", Value::boolean(opt.add_generation_prompt));
  if (!opt.bos_token.empty()) globals->set("bos_token", Value::string(opt.bos_token));
  if (!opt.eos_token.empty()) globals->set("eos_token", Value::string(opt.eos_token));
  if (!opt.extra_vars_json.empty()) {
    nlohmann::ordered_json extra;
    try {
      extra = nlohmann::ordered_json::parse(opt.extra_vars_json);
    } catch (const nlohmann::json::exception& e) {
      GA_THROW(InvalidArgument, "chat template extra variables are not valid JSON: ", e.what());
    }
    GA_CHECK(extra.is_object(), InvalidArgument, "chat template extra variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) globals->set(it.key(), chat::from_json(it.value()));
  }
  chat::Interpreter interp{chat::Limits{}};
  try {
    return interp.render(program, std::make_shared<chat::Scope>(globals));
  } catch (const chat::RaisedError& e) {
    throw Error(ErrorKind::InvalidArgument, e.what(), __FILE__, __LINE__);
  } catch (const chat::RuntimeError& e) {
    GA_THROW(InvalidArgument, "chat template error at line ", e.line, ":", e.col, ": ", e.what());
  } catch (const chat::LimitError& e) {
    GA_THROW(OutOfRange, "chat template: ", e.what());
  }
}

}  // namespace

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const {
  std::vector<chat::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    chat::Dict d;
    d.set("role", chat::Value::string(m.role));
    d.set("content", chat::Value::string(m.content));
    list.push_back(chat::Value::dict_of(std::move(d)));
  }
  return render(impl_->program, chat::Value::list_of(std::move(list)), options);
}

std::string ChatTemplate::apply_json(std::string_view messages_json, const ChatTemplateOptions& options) const {
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(messages_json);
  } catch (const nlohmann::json::exception& e) {
    GA_THROW(InvalidArgument, "chat messages are not valid JSON: ", e.what());
  }
  GA_CHECK(parsed.is_array(), InvalidArgument, "chat messages must be a JSON array");
  for (const auto& m : parsed) GA_CHECK(m.is_object(), InvalidArgument, "each chat message must be a JSON object");
  return render(impl_->program, chat::from_json(parsed), options);
}

const std::string& ChatTemplate::chatml_source() {
  static const std::string kChatML =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
      " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return kChatML;
}

ChatTemplate ChatTemplate::for_vocab(const Vocab& vocab) {
  return ChatTemplate(vocab.chat_template.empty() ? chatml_source() : vocab.chat_template);
}

ChatTemplateOptions ChatTemplate::options_for_vocab(const Vocab& vocab, bool add_generation_prompt) {
  ChatTemplateOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  if (vocab.bos_id >= 0 && vocab.bos_id < n) opt.bos_token = vocab.tokens[static_cast<size_t>(vocab.bos_id)];
  if (vocab.eos_id >= 0 && vocab.eos_id < n) opt.eos_token = vocab.tokens[static_cast<size_t>(vocab.eos_id)];
  return opt;
}

}  // namespace ga
