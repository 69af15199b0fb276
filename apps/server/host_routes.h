// The host's HTTP routes (host_service.h has the host itself):
//   POST /v1/host/ask            {"question", "max_tokens"?, "stream"? (true), "temperature"? (0)}: the
//                                host model's answer, streamed as SSE events: first "host.answer.figures"
//                                (the figures and log lines its prompt held: computed, not generated), then
//                                "host.answer.delta" {"text"} events, then "host.answer.done", then [DONE].
//                                stream false: one "host.answer" object.
//   GET  /v1/host/report         a brief now: the figures table and the host's summary beneath
//                                (?format=markdown for text/markdown; ?latest=1 for the last brief made)
//   POST /v1/host/housekeeping   admin: run the housekeeping now; its actions as JSON
//   GET  /v1/host/schedule       the periodic brief and housekeeping intervals; POST (admin) changes them
//   GET  /v1/host/status         the host's state (the dashboard's Host panel)
// Roles: with ServerOptions::host_admin_key set, admin routes need that key (403 with the API key, 401
// with no or an unknown key, as everywhere); reading routes take either key.
#pragma once

#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace ga::server {

struct ServerContext;

void handle_host_ask(ServerContext& ctx, const std::string& body, httplib::Response& res);
void handle_host_report(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_host_housekeeping(ServerContext& ctx, const httplib::Request& req, const std::string& body,
                              httplib::Response& res);
void handle_host_schedule_get(ServerContext& ctx, httplib::Response& res);
void handle_host_schedule_post(ServerContext& ctx, const httplib::Request& req, const std::string& body,
                               httplib::Response& res);
void handle_host_status(ServerContext& ctx, httplib::Response& res);

// Throws ApiError 403 unless the request carries the host admin key (any authorized request when the
// server has none). The API key itself was checked before.
void require_host_admin(const ServerContext& ctx, const httplib::Request& req);

}  // namespace ga::server
