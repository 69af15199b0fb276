// POST /v1/chat/completions and POST /v1/completions: request -> tokens -> Scheduler -> answer.
//
// All validation happens before submit(), so every client mistake is a 4xx with nothing started.
// The scheduler calls back on its own thread; the callbacks only append to a per-request channel
// (mutex + condition variable) and return, as scheduler.h asks. The HTTP worker thread waits on the
// channel: for a whole answer until the result arrives, for a stream it writes each batch of new
// tokens as an SSE chunk; until a stream's first token it busy-waits on the channel's event counter instead
// of sleeping (bounded: ServerOptions::first_token_poll_ms, at most max_first_token_spinners streams), so the
// first token is written without a thread wake-up. A failed write (the client went away) cancels the request at once, and
// a comment line every second while nothing else is written notices departures during queueing and
// prefill too; a whole answer peeks at its connection every poll interval instead (connection_probe.h),
// so a gone client never keeps KV blocks. On shutdown (ServerContext::stopping) waiting
// routes cancel their requests, so the server can stop without waiting for long generations.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/request_parse.h"
#include "server/server_context.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace ga::server {

// body: the request body, already read (and bounded) by the caller, whose Content-Type was checked. Called on the
// connection's worker thread (a whole answer watches its client through current_connection_socket():
// connection_probe.h).
void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& body, httplib::Response& res);

// Pieces, for tests.

// Throws ApiError 415 unless the Content-Type is JSON ("application/json", "...+json", parameters
// allowed) or absent.
void check_content_type(const std::string& content_type);
// httplib's Request::is_multipart_form_data() test (a case-sensitive prefix) on a Content-Type already looked up.
bool is_multipart_form_data(std::string_view content_type);

// The scheduler's max_tokens for a prompt of n_prompt tokens in a context of n_ctx, or ApiError 400
// (code context_length_exceeded) naming both numbers when the prompt or prompt + max_tokens does not fit.
int64_t resolve_max_tokens(const ParsedRequest& request, int64_t n_prompt, int64_t n_ctx);

// Default max_tokens of /v1/completions when the request gives none (OpenAI's documented default).
constexpr int64_t kCompletionsDefaultMaxTokens = 16;

}  // namespace ga::server
