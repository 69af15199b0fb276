// apps/server/dashboard_routes.h
#pragma once
#include <functional>
#include <string>
#include <nlohmann/json.hpp>
namespace httplib { class Server; }
namespace ga::telemetry { class Telemetry; }
namespace ga::server {
// What the dashboard needs from the server, as JSON-producing callbacks (thread-safe).
struct DashboardSources {
  std::function<nlohmann::json()> model_info;       // {"name","arch","path","format","n_params","weight_bytes","n_ctx","n_vocab","weight_types","precision","precision_detail"}
  std::function<nlohmann::json()> scheduler_stats;  // ga::SchedulerStats as JSON (field names as in the struct) + "max_running"
  std::function<nlohmann::json()> recent_requests;  // [{"id","finished_unix_ms","prompt_tokens","completion_tokens","ttft_ms","total_ms","finish_reason"}] newest last, at most 100
  std::function<nlohmann::json()> host_status;      // HostService::status_json (the Host panel); null: none
  telemetry::Telemetry* telemetry = nullptr;         // the machine figures (not owned); null: the dashboard makes its own
  std::string api_key;                               // when non-empty, /api/* needs it (or host_admin_key) too
  std::string host_admin_key;
};
// Registers GET / (the embedded page and its assets) and GET /api/stats on the server.
void register_dashboard_routes(httplib::Server& server, DashboardSources sources);
}
