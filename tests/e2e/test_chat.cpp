// End-to-end tests of `gpu-accel chat` on stories260K (the repository's models/), through a pipe and on a
// pseudo-terminal.
//
// The reference for a reply is `gpu-accel run` on the conversation rendered by hand in ChatML (the format
// the chat falls back to for a model without a template, written out here from Hugging Face's definition):
// greedy decoding must give the same text whether the chat prefills the whole conversation or, from the
// second turn on, only what its KV cache does not hold yet. The terminal tests type as a user does: text and
// Enter, Ctrl-C (the line discipline sends SIGINT), Ctrl-D (end of input), and read what the terminal shows.
// Timeouts are generous: a loaded 2-core CI machine may take seconds for what takes milliseconds alone.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/process.h"
#include "common/test_data.h"

namespace ga {
namespace {

using test::CliResult;
using test::describe;
using test::PtyCli;
using test::run_cli;
using test::TempDir;

constexpr double kTimeout = 120;  // seconds, for anything the chat should do at once
constexpr char kReplyTokens[] = "24";
constexpr char kChatMlEnd[] = "<|im_end|>";

std::string model_path() { return test::repo_path("models/stories260K.gguf"); }

std::vector<std::string> greedy_chat(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"chat", "-m", model_path(), "--temp", "0", "-n", kReplyTokens};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct Turn {
  std::string user, assistant;
};

// Hugging Face's ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then the assistant's opening.
std::string chatml(const std::vector<Turn>& turns, const std::string& user, const std::string& system = {}) {
  auto message = [](const std::string& role, const std::string& content) {
    return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };
  std::string text = system.empty() ? "" : message("system", system);
  for (const Turn& t : turns) text += message("user", t.user) + message("assistant", t.assistant);
  return text + message("user", user) + "<|im_start|>assistant\n";
}

// The greedy continuation of a rendered conversation: what the chat's reply must be.
std::string run_reply(const std::string& rendered) {
  const CliResult r = run_cli({"run", "-m", model_path(), "-p", rendered, "--temp", "0", "-n", kReplyTokens,
                               "--stop", kChatMlEnd});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(r.out.empty()) << describe(r);
  return r.out;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(test::read_file(path)); }

TEST(Chat, PipeAnswersEveryLineAsRunDoesOnTheRenderedConversation) {
  const std::string first = "Once upon a time", second = "The cat sat on the mat";
  const std::string reply1 = run_reply(chatml({}, first));
  const std::string reply2 = run_reply(chatml({{first, reply1}}, second));

  const CliResult once = run_cli(greedy_chat(), first + "\n");  // echo "..." | gpu-accel chat: one answer, exit
  EXPECT_EQ(once.exit_code, 0) << describe(once);
  EXPECT_EQ(once.out, reply1 + "\n") << describe(once);
  EXPECT_EQ(once.err.find("> "), std::string::npos) << "no prompt in a pipe: " << describe(once);

  const CliResult two = run_cli(greedy_chat(), first + "\n" + second + "\n");
  EXPECT_EQ(two.exit_code, 0) << describe(two);
  EXPECT_EQ(two.out, reply1 + "\n" + reply2 + "\n") << describe(two);
}

// Over context-parallel ranks (--context-parallel 3) a two-turn chat answers as the one-rank chat does: the
// second turn's prompt is prefilled over the sharded cache of the first.
TEST(Chat, ContextParallelRanksAnswerAsOneRank) {
  const std::string input = "Once upon a time\nThe cat sat on the mat\n";
  const CliResult one = run_cli(greedy_chat(), input);
  const CliResult split = run_cli(greedy_chat({"--context-parallel", "3"}), input);
  ASSERT_EQ(one.exit_code, 0) << describe(one);
  ASSERT_EQ(split.exit_code, 0) << describe(split);
  EXPECT_EQ(split.out, one.out) << describe(split);
}

TEST(Chat, PipeMultiLineMessagesSystemMessageAndSave) {
  TempDir tmp("ga_chat");
  const std::string saved = tmp.file("conversation.json");
  const std::string input = "\"\"\"line one\nline two\"\"\"\n"  // a """ block
                            "first\\\nsecond\n"                 // a continued line
                            "//slash\n"                         // a message that starts with /
                            "\n"                                // nothing: no turn
                            "/save " + saved + "\n";
  const CliResult r = run_cli(greedy_chat({"--system", "You tell stories."}), input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json messages = read_json(saved);
  ASSERT_EQ(messages.size(), 7u) << messages.dump(1);
  EXPECT_EQ(messages[0], (nlohmann::json{{"role", "system"}, {"content", "You tell stories."}}));
  const std::vector<std::string> users = {"line one\nline two", "first\nsecond", "/slash"};
  std::vector<Turn> turns;
  for (size_t i = 0; i < users.size(); ++i) {
    const nlohmann::json& user = messages[1 + 2 * i];
    const nlohmann::json& assistant = messages[2 + 2 * i];
    EXPECT_EQ(user["role"], "user");
    EXPECT_EQ(user["content"], users[i]);
    EXPECT_EQ(assistant["role"], "assistant");
    turns.push_back({users[i], assistant["content"].get<std::string>()});
  }
  // Every saved reply is what was printed, and the last one what run gives on the whole conversation.
  EXPECT_EQ(r.out, turns[0].assistant + "\n" + turns[1].assistant + "\n" + turns[2].assistant + "\n") << describe(r);
  const std::vector<Turn> before_last(turns.begin(), turns.end() - 1);
  EXPECT_EQ(turns[2].assistant, run_reply(chatml(before_last, users[2], "You tell stories.")));
  EXPECT_NE(r.err.find("saved 7 messages to " + saved), std::string::npos) << describe(r);
}

TEST(Chat, PipeDropsTheOldestTurnsWhenTheContextFills) {
  TempDir tmp("ga_chat");
  const std::string saved = tmp.file("conversation.json");
  std::string input;
  const int n_messages = 8;
  for (int i = 1; i <= n_messages; ++i) input += "Message number " + std::to_string(i) + " about a dog\n";
  input += "/save " + saved + "\n";
  const CliResult r = run_cli(greedy_chat({"--ctx", "96", "-n", "8"}), input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("no longer fits in the context: dropped the oldest"), std::string::npos) << describe(r);
  const nlohmann::json messages = read_json(saved);
  ASSERT_GE(messages.size(), 2u);
  EXPECT_LT(messages.size(), 2u * n_messages) << messages.dump(1);
  EXPECT_EQ(messages[messages.size() - 2]["content"], "Message number 8 about a dog");
  EXPECT_NE(messages[0]["content"], "Message number 1 about a dog");
  // Eight replies were printed, each followed by a line break (8 tokens of stories rarely hold one).
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), n_messages) << describe(r);
}

TEST(Chat, AMessageLongerThanTheContextIsAnErrorInAPipe) {
  const CliResult r = run_cli(greedy_chat({"--ctx", "16"}), std::string(200, 'a') + "\n");
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  const size_t at = r.err.find("error: the message needs ");
  ASSERT_NE(at, std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("the context has 16", at), std::string::npos) << describe(r);
}

// Types `message` and Enter at the prompt that starts at `from`; returns where the reply starts (after the
// terminal's echo of the line).
size_t send(PtyCli& chat, size_t from, const std::string& message) {
  const size_t prompt = chat.wait_for("> ", from, kTimeout);
  EXPECT_NE(prompt, std::string::npos) << chat.output();
  chat.type(message + "\n");
  const size_t echo = chat.wait_for(message + "\n", prompt, kTimeout);
  EXPECT_NE(echo, std::string::npos) << chat.output();
  return echo == std::string::npos ? std::string::npos : echo + message.size() + 1;
}

// The reply starting at `at` must be exactly `expected`, followed by the line break and the next prompt. Returns
// where that prompt is (npos on a failure), so that the next message is typed after it, never after a "> " that a
// reply happened to contain.
size_t expect_reply(PtyCli& chat, size_t at, const std::string& expected) {
  if (at == std::string::npos) return std::string::npos;
  const size_t found = chat.wait_for(expected + "\n> ", at, kTimeout);
  EXPECT_EQ(found, at) << "expected reply:\n" << expected << "\n--- terminal:\n" << chat.output();
  return found == at ? at + expected.size() + 1 : std::string::npos;
}

TEST(Chat, TerminalTwoTurnsResetSaveAndEndOfInput) {
  TempDir tmp("ga_chat");
  const std::string saved = tmp.file("after_reset.json");
  const std::string first = "Once upon a time", second = "The cat sat on the mat";
  const std::string reply1 = run_reply(chatml({}, first));
  const std::string reply2 = run_reply(chatml({{first, reply1}}, second));

  PtyCli chat(greedy_chat());
  size_t at = expect_reply(chat, send(chat, 0, first), reply1);
  at = expect_reply(chat, send(chat, at, second), reply2);
  ASSERT_NE(at, std::string::npos);

  // /reset forgets both turns: the first message gets the first reply again, and is all there is to save.
  at = chat.wait_for("conversation cleared\n", send(chat, at, "/reset"), kTimeout);
  ASSERT_NE(at, std::string::npos) << chat.output();
  at = expect_reply(chat, send(chat, at, first), reply1);
  ASSERT_NE(at, std::string::npos);
  at = chat.wait_for("saved 2 messages", send(chat, at, "/save " + saved), kTimeout);
  ASSERT_NE(at, std::string::npos) << chat.output();
  EXPECT_EQ(read_json(saved), (nlohmann::json{{{"role", "user"}, {"content", first}},
                                             {{"role", "assistant"}, {"content", reply1}}}));

  ASSERT_NE(chat.wait_for("> ", at, kTimeout), std::string::npos) << chat.output();
  chat.type("\x04");  // Ctrl-D on an empty line: end of input
  EXPECT_EQ(chat.wait_exit(kTimeout), 0) << chat.output();
}

TEST(Chat, TerminalCtrlCStopsTheReplyAndThePromptComesBack) {
  TempDir tmp("ga_chat");
  const std::string saved = tmp.file("stopped.json");
  const std::string first = "Once upon a time";
  const std::string reply_start = run_reply(chatml({}, first)).substr(0, 12);
  // A reply that would run for thousands of tokens (no EOS, a large context): only Ctrl-C ends it soon.
  PtyCli chat({"chat", "-m", model_path(), "--temp", "0", "-n", "-1", "--ignore-eos", "--ctx", "8192"});
  const size_t at = send(chat, 0, first);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(chat.wait_for(reply_start, at, kTimeout), at) << chat.output();  // the reply is streaming
  chat.type("\x03");  // Ctrl-C
  const size_t stopped = chat.wait_for("[reply stopped]\n> ", at, kTimeout);
  ASSERT_NE(stopped, std::string::npos) << chat.output();

  // The chat goes on, with the reply as far as it was shown in the conversation.
  const size_t after = send(chat, stopped, "/save " + saved);
  ASSERT_NE(chat.wait_for("saved 2 messages", after, kTimeout), std::string::npos) << chat.output();
  const nlohmann::json messages = read_json(saved);
  ASSERT_EQ(messages.size(), 2u);
  const std::string kept = messages[1]["content"].get<std::string>();
  EXPECT_EQ(kept.rfind(reply_start, 0), 0u) << kept;
  std::string shown = chat.output().substr(at);
  const size_t echo = shown.find("^C");  // the terminal's echo of Ctrl-C, wherever the reply was then
  if (echo != std::string::npos) shown.erase(echo, 2);
  EXPECT_EQ(shown.rfind(kept + "\n", 0), 0u) << "the kept reply is what was shown:\n" << kept << "\n---\n" << shown;

  ASSERT_NE(chat.wait_for("> ", after, kTimeout), std::string::npos) << chat.output();
  chat.type("\x04");
  EXPECT_EQ(chat.wait_exit(kTimeout), 0) << chat.output();
}

TEST(Chat, TerminalCtrlCAtThePromptEndsTheChat) {
  PtyCli chat(greedy_chat());
  ASSERT_NE(chat.wait_for("/help for commands", 0, kTimeout), std::string::npos) << chat.output();
  ASSERT_NE(chat.wait_for("> ", 0, kTimeout), std::string::npos) << chat.output();
  chat.type("\x03");
  EXPECT_EQ(chat.wait_exit(kTimeout), 0) << chat.output();
}

TEST(Chat, UsageErrors) {
  const CliResult no_model = run_cli({"chat"});
  EXPECT_EQ(no_model.exit_code, 2) << describe(no_model);
  EXPECT_NE(no_model.err.find("-m MODEL"), std::string::npos) << describe(no_model);
  const CliResult bad_temp = run_cli({"chat", "-m", model_path(), "--temp", "-1"});
  EXPECT_EQ(bad_temp.exit_code, 2) << describe(bad_temp);
  const CliResult missing = run_cli({"chat", "-m", "/nonexistent/model.gguf"});
  EXPECT_EQ(missing.exit_code, 1) << describe(missing);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << describe(missing);
}

}  // namespace
}  // namespace ga
