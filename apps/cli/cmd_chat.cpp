// gpu-accel chat: an interactive conversation with a model, through its chat template.
//
// stdin gives the user's messages (chat_input.h: one per line; a line ending in \ continues, a """ block spans
// lines), stdout gets each reply as it streams, followed by a line break; everything else (the model's log
// lines, notes, errors) goes to stderr. On a terminal a prompt ("> ", "... " for continuation lines) is shown
// and commands are read:
//   /reset         forget the conversation (the system message stays)
//   /system TEXT   set the system message (/system alone removes it)
//   /save FILE     write the conversation as a JSON array of {"role", "content"} messages
//   /help, /exit
// A message that starts with / is written //. In a pipe (`echo hi | gpu-accel chat -m M`) the same happens
// without prompts: one reply per message, then exit at the end of the input.
//
// Ctrl-C stops the reply being generated (what was printed is kept in the conversation) and the prompt comes
// back; Ctrl-C at the prompt, a second Ctrl-C before the reply has stopped, /exit or the end of input (Ctrl-D)
// end the chat with exit code 0. The conversation stays within the context (chat_conversation.h): when a prompt
// would leave too little room for a reply, the oldest turns are dropped with a note on stderr.
//
// A reply is generated until an end-of-generation token, the context's end, or -n tokens (default -1: no
// limit, as llama-cli's conversation mode). The prompt must leave min(-n, ctx/2) tokens of room for it (ctx/4
// with -n -1). Models without a chat template (stories260K) get the ChatML fallback, and its "<|im_end|>"
// ends a reply even where the vocabulary has no such token.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "args.h"
#include "chat_conversation.h"
#include "chat_input.h"
#include "cli_common.h"
#include "commands.h"
#include "generation_args.h"
#include "gpu_accel/chat.h"
#include "gpu_accel/error.h"

namespace ga::cli {

namespace {

constexpr int64_t kDefaultReplyTokens = -1;
constexpr char kChatMlEnd[] = "<|im_end|>";

const char* const kCommandHelp =
    "commands:\n"
    "  /reset         forget the conversation (the system message stays)\n"
    "  /system TEXT   set the system message (/system alone removes it)\n"
    "  /save FILE     write the conversation to FILE (a JSON array of messages)\n"
    "  /help          this list\n"
    "  /exit          end the chat (as Ctrl-D)\n"
    "a message that starts with / is written //; a line ending in \\ continues on the next line,\n"
    "and a block between \"\"\" lines is one message. Ctrl-C stops a reply; at the prompt it ends the chat.\n";

int64_t reply_room(int64_t n_predict, int64_t n_ctx) {
  return n_predict >= 0 ? std::min(n_predict, n_ctx / 2) : n_ctx / 4;
}

class Terminal {
 public:
  Terminal() : interactive_(isatty(STDIN_FILENO) == 1), prompt_to_(isatty(STDOUT_FILENO) == 1 ? stdout : stderr) {}
  bool interactive() const { return interactive_; }
  void prompt(const char* text) const {
    if (!interactive_) return;
    std::fputs(text, prompt_to_);
    std::fflush(prompt_to_);
  }

 private:
  bool interactive_;
  FILE* prompt_to_;  // the prompt goes with the replies, unless they are redirected away from the terminal
};

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

bool save_conversation(const Conversation& conversation, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  const std::string json = conversation.messages_json();
  file.write(json.data(), static_cast<std::streamsize>(json.size()));
  file.close();
  if (!file) {
    std::fprintf(stderr, "error: cannot write the conversation to %s\n", path.c_str());
    return false;
  }
  std::fprintf(stderr, "saved %zu messages to %s\n", conversation.messages().size(), path.c_str());
  return true;
}

enum class CommandResult { Continue, Exit };

CommandResult run_command(const std::string& line, Conversation& conversation) {
  const size_t space = line.find(' ');
  const std::string name = line.substr(0, space);
  const std::string argument = space == std::string::npos ? std::string() : trim(line.substr(space + 1));
  if (name == "/exit" || name == "/quit") return CommandResult::Exit;
  if (name == "/help") {
    std::fputs(kCommandHelp, stderr);
  } else if (name == "/reset") {
    conversation.reset();
    std::fprintf(stderr, "conversation cleared\n");
  } else if (name == "/system") {
    conversation.set_system(argument);
    std::fprintf(stderr, argument.empty() ? "system message removed\n" : "system message set\n");
  } else if (name == "/save") {
    if (argument.empty()) {
      std::fprintf(stderr, "error: /save needs a file name\n");
    } else {
      save_conversation(conversation, argument);
    }
  } else {
    std::fprintf(stderr, "unknown command %s (/help lists them; write // to send a message starting with /)\n",
                 name.c_str());
  }
  return CommandResult::Continue;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  GenerationArgs a;
  a.n_predict = kDefaultReplyTokens;
  std::string system;
  ArgParser parser("chat", "-m MODEL [options]",
                   "An interactive conversation with the model through its chat template (ChatML when it has\n"
                   "none). Type a message and Enter; a line ending in \\ continues, \"\"\" opens and closes a\n"
                   "multi-line block. /help lists the commands (/reset, /system TEXT, /save FILE, /exit).\n"
                   "Ctrl-C stops a reply; at the prompt Ctrl-C or Ctrl-D ends the chat. With stdin from a pipe,\n"
                   "every line is a message and the chat ends with the input.");
  add_generation_options(parser, a, "tokens per reply at most; -1: no limit (a reply ends with the model's turn)");
  parser.option("--system", &system, "TEXT", "the system message (/system changes it)");
  if (!parser.parse(argc, argv)) return 0;
  finish_generation_options(parser, a);

  const Terminal terminal;
  const LoadedModel model = load_model_verbose(a.model, a.precision, a.device);
  const Tokenizer tokenizer(model.vocab);
  const ChatFormat format(tokenizer);
  Session session = start_session(model, a);
  std::fprintf(stderr, "chat template: %s\n",
               format.has_model_template() ? "the model's" : "ChatML (the model has none)");

  GenerateOptions options = generate_options(a);
  if (!format.has_model_template()) options.stop.push_back(kChatMlEnd);
  Conversation conversation(session, tokenizer, format, reply_room(a.n_predict, session.n_ctx()));
  conversation.set_system(trim(system));

  InterruptFlag interrupts;
  LineReader reader(STDIN_FILENO, interrupts);
  if (terminal.interactive()) {
    std::fprintf(stderr, "/help for commands; Ctrl-C stops a reply, Ctrl-D exits\n");
  }
  TextOut out;
  const auto on_dropped = [](size_t n_turns, size_t n_tokens) {
    const std::string what = n_turns == 1 ? "turn" : std::to_string(n_turns) + " turns";
    std::fprintf(stderr, "note: the conversation (%zu tokens) no longer fits in the context: dropped the oldest %s\n",
                 n_tokens, what.c_str());
  };
  while (true) {
    terminal.prompt("> ");
    const UserInput input = read_user_input(reader, [&] { terminal.prompt("... "); });
    if (input.status != LineReader::Status::Line) {  // end of input, or Ctrl-C at the prompt
      if (terminal.interactive()) std::fputc('\n', stderr);
      break;
    }
    std::string text = input.text;
    if (!input.multi_line && text.rfind('/', 0) == 0) {
      if (text.rfind("//", 0) != 0) {
        if (run_command(text, conversation) == CommandResult::Exit) break;
        continue;
      }
      text.erase(0, 1);
    }
    if (trim(text).empty()) continue;

    GenerateResult result;
    try {
      result = conversation.reply(
          text, options,
          // The piece is shown before the Ctrl-C check: the kept reply is exactly what was shown.
          [&](std::string_view piece) { return out.write(piece) && interrupts.count() == 0; }, on_dropped);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Internal) throw;
      std::fprintf(stderr, "error: %s\n", e.message().c_str());
      if (!terminal.interactive()) return 1;  // a script cannot answer the error: stop
      continue;
    }
    out.write("\n");
    if (out.failed()) return out.report_error() ? 1 : 0;
    if (interrupts.count() > 0) {
      if (result.finish == FinishReason::Cancelled) std::fprintf(stderr, "[reply stopped]\n");
      if (interrupts.count() > 1) break;  // a second Ctrl-C before the reply had stopped
      interrupts.clear();
    }
  }
  return 0;
}

}  // namespace ga::cli
