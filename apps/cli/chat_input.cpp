// See chat_input.h.
#include "chat_input.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "gpu_accel/error.h"

namespace ga::cli {

namespace {

// The handler's state: a counter and the write end of a self-pipe (both async-signal-safe to touch).
std::atomic<int> g_interrupts{0};
int g_wake_pipe[2] = {-1, -1};
struct sigaction g_previous;

void on_sigint(int) {
  const int saved_errno = errno;
  g_interrupts.fetch_add(1);
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_wake_pipe[1], &byte, 1);  // a full pipe is already readable
  errno = saved_errno;
}

void drain(int fd) {
  char buffer[64];
  while (::read(fd, buffer, sizeof buffer) > 0) {
  }
}

constexpr char kBlockQuote[] = R"(""")";
constexpr size_t kBlockQuoteSize = sizeof kBlockQuote - 1;

bool starts_with(const std::string& s, const char* prefix, size_t n) { return s.compare(0, n, prefix) == 0; }
bool ends_with(const std::string& s, const char* suffix, size_t n) {
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

InterruptFlag::InterruptFlag() {
  GA_CHECK(::pipe(g_wake_pipe) == 0, Io, "cannot create a pipe for Ctrl-C: ", std::strerror(errno));
  for (const int fd : g_wake_pipe) {
    const int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART
  sigaction(SIGINT, &action, &g_previous);
}

InterruptFlag::~InterruptFlag() {
  sigaction(SIGINT, &g_previous, nullptr);
  ::close(g_wake_pipe[0]);
  ::close(g_wake_pipe[1]);
  g_wake_pipe[0] = g_wake_pipe[1] = -1;
}

int InterruptFlag::count() const { return g_interrupts.load(); }

void InterruptFlag::clear() {
  drain(g_wake_pipe[0]);
  g_interrupts.store(0);
}

int InterruptFlag::wake_fd() const { return g_wake_pipe[0]; }

LineReader::Status LineReader::read_line(std::string& line) {
  while (true) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();  // a CRLF file
      return Status::Line;
    }
    if (eof_) {
      if (pending_.empty()) return Status::Eof;
      line = std::move(pending_);
      pending_.clear();
      return Status::Line;
    }
    if (interrupts_.count() > 0) return Status::Interrupted;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {interrupts_.wake_fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      GA_CHECK(errno == EINTR, Io, "waiting for input failed: ", std::strerror(errno));
      continue;  // a signal: the loop looks at the counter
    }
    if (fds[0].revents == 0) continue;  // only the wake pipe: the counter says why
    char buffer[4096];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0) {
      GA_CHECK(errno == EINTR || errno == EAGAIN, Io, "reading the input failed: ", std::strerror(errno));
      continue;
    }
    if (n == 0) {
      eof_ = true;  // a terminal's Ctrl-D on an empty line, or the end of a pipe
    } else {
      pending_.append(buffer, static_cast<size_t>(n));
    }
  }
}

UserInput read_user_input(LineReader& reader, const std::function<void()>& prompt_more) {
  UserInput input;
  std::string line;
  input.status = reader.read_line(line);
  if (input.status != LineReader::Status::Line) return input;
  // The next line of a multi-line message; false when the message ends before it (end of input, or Ctrl-C,
  // which input.status then says).
  const auto next_line = [&] {
    prompt_more();
    const LineReader::Status status = reader.read_line(line);
    if (status == LineReader::Status::Interrupted) input.status = status;
    return status == LineReader::Status::Line;
  };

  if (starts_with(line, kBlockQuote, kBlockQuoteSize)) {  // a """ block
    input.multi_line = true;
    line.erase(0, kBlockQuoteSize);
    for (bool first = true;; first = false) {
      const bool closes = ends_with(line, kBlockQuote, kBlockQuoteSize);
      if (closes) line.erase(line.size() - kBlockQuoteSize);
      if (!first) input.text += '\n';
      input.text += line;
      if (closes || !next_line()) return input;
    }
  }

  while (!line.empty() && line.back() == '\\') {  // continued lines
    input.multi_line = true;
    line.back() = '\n';
    input.text += line;
    if (!next_line()) return input;
  }
  input.text += line;
  return input;
}

}  // namespace ga::cli
