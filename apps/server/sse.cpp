// See sse.h.
#include "server/sse.h"

#include "server/api_error.h"

namespace ga::server {

std::string sse_data(const nlohmann::json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(std::string_view text) {
  std::string line = ": ";
  for (const char c : text) line += (c == '\n' || c == '\r') ? ' ' : c;
  return line + "\n\n";
}

}  // namespace ga::server
