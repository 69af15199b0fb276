// What `gpu-accel chat` reads: the user's messages from stdin, a line at a time, interruptible by Ctrl-C.
//
// Multi-line messages, as llama.cpp's and ollama's interactive modes write them:
//   - a line ending in a backslash continues on the next line (the backslash becomes the line break);
//   - a line starting with """ opens a block that ends at the next line ending in """ (the quotes are not
//     part of the message; `"""one line"""` is a block of one line).
// A terminal in canonical mode hands over whole lines; a pipe may hand over any chunk, so lines are cut here.
// Ctrl-C is a SIGINT (the terminal's line discipline turns the key into the signal): the handler installed by
// InterruptFlag counts it and wakes a read waiting in LineReader, so that the prompt can end at once.
#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace ga::cli {

// SIGINT while the chat runs: counted, never fatal. One object per process (it owns the handler).
class InterruptFlag {
 public:
  InterruptFlag();  // installs the handler (no SA_RESTART: a blocking read is interrupted)
  ~InterruptFlag();  // restores the previous handler
  InterruptFlag(const InterruptFlag&) = delete;
  InterruptFlag& operator=(const InterruptFlag&) = delete;

  int count() const;  // SIGINTs since the last clear()
  void clear();
  int wake_fd() const;  // readable after a SIGINT, until clear()
};

class LineReader {
 public:
  enum class Status { Line, Eof, Interrupted };

  LineReader(int fd, const InterruptFlag& interrupts) : fd_(fd), interrupts_(interrupts) {}

  // The next line without its '\n' (a last line without one counts at end of input). Interrupted when a SIGINT
  // arrives before a whole line did.
  Status read_line(std::string& line);

 private:
  int fd_;
  const InterruptFlag& interrupts_;
  std::string pending_;
  bool eof_ = false;
};

struct UserInput {
  LineReader::Status status = LineReader::Status::Line;  // Line: `text` is a message or a /command
  std::string text;
  bool multi_line = false;  // a continued line or a """ block (never a /command)
};

// Reads one message (one line, or several joined as above); `prompt_more` is called before each continuation
// line (a terminal shows "... "). End of input inside a block or after a backslash ends the message there.
UserInput read_user_input(LineReader& reader, const std::function<void()>& prompt_more);

}  // namespace ga::cli
