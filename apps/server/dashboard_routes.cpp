// The dashboard's routes: the embedded page (GET /, /app.js, ...) and its data (GET /api/stats).
//
// The page is static and polls /api/stats once a second, so the server never pushes and a dozen
// open tabs cost a dozen small JSON answers per second. /api/stats joins the server's sources
// (model, scheduler, recent requests) with machine telemetry (runtime/telemetry): NVML for the GPU
// when the driver is present, /proc for the CPU, and the achieved-vs-ceiling throughput figures.
//
// Caching: page files are answered with an ETag and "no-cache" (revalidate every time: a 304 costs
// nothing, and a new binary must never run against a stale script); /api/stats is "no-store".
// The page gets a strict Content-Security-Policy: it loads nothing from elsewhere and has no
// inline script or style, so 'self' is all it needs.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "runtime/telemetry/telemetry.h"
#include "server/api_error.h"
#include "server/api_server.h"
#include "server/dashboard_routes.h"
#include "server/recent_requests.h"
#include "server/web_assets.h"

namespace ga::server {
namespace {

using nlohmann::json;

constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct DashboardState {
  explicit DashboardState(DashboardSources s) : sources(std::move(s)), started_unix_ms(unix_ms_now()) {
    if (!sources.telemetry) {  // starts the one-time memcpy measurement in the background
      own_telemetry = std::make_unique<telemetry::Telemetry>();
      sources.telemetry = own_telemetry.get();
    }
  }
  DashboardSources sources;
  int64_t started_unix_ms;
  std::unique_ptr<telemetry::Telemetry> own_telemetry;
};

std::string content_type_for(const std::string& path) {
  auto ends_with = [&path](const char* suffix) {
    const std::string s(suffix);
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".js") || ends_with(".mjs")) return "text/javascript; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  if (ends_with(".svg")) return "image/svg+xml";
  if (ends_with(".png")) return "image/png";
  if (ends_with(".ico")) return "image/x-icon";
  if (ends_with(".json")) return "application/json";
  if (ends_with(".txt")) return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

// A strong validator from the bytes (FNV-1a, 64 bits): it changes whenever the page does.
std::string etag_for(std::string_view bytes) {
  constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;
  uint64_t hash = kFnvOffset;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= kFnvPrime;
  }
  char text[24];
  std::snprintf(text, sizeof(text), "\"%016llx\"", static_cast<unsigned long long>(hash));
  return text;
}

// httplib route patterns are regular expressions: a file name's '.' must match only a dot.
std::string escape_regex(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void serve_asset(const WebAsset& asset, const httplib::Request& req, httplib::Response& res) {
  const std::string_view bytes = asset_bytes(asset);
  const std::string etag = etag_for(bytes);
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("Referrer-Policy", "no-referrer");
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  res.set_content(std::string(bytes), content_type_for(asset.path));
}

json call_or(const std::function<json()>& source, json fallback) { return source ? source() : std::move(fallback); }

json stats_json(DashboardState& state) {
  const json model = call_or(state.sources.model_info, json::object());
  const json scheduler = call_or(state.sources.scheduler_stats, json::object());
  json machine = state.sources.telemetry->snapshot(model, scheduler);
  return json{{"time_unix_ms", unix_ms_now()},
              {"started_unix_ms", state.started_unix_ms},
              {"model", model},
              {"device", std::move(machine["device"])},
              {"gpu", std::move(machine["gpu"])},
              {"cpu", std::move(machine["cpu"])},
              {"scheduler", scheduler},
              {"throughput", std::move(machine["throughput"])},
              {"recent_requests", call_or(state.sources.recent_requests, json::array())},
              {"host", call_or(state.sources.host_status, json(nullptr))}};
}

}  // namespace

void register_dashboard_routes(httplib::Server& server, DashboardSources sources) {
  auto state = std::make_shared<DashboardState>(std::move(sources));

  const WebAsset* index = nullptr;
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const WebAsset* asset = &kWebAssets[i];
    if (std::string_view(asset->path) == "index.html") index = asset;
    std::string pattern = "/";  // (not "/" + string: g++ 12 -O3 warns falsely on that, -Wrestrict)
    pattern += escape_regex(asset->path);
    server.Get(pattern, [asset](const httplib::Request& req, httplib::Response& res) { serve_asset(*asset, req, res); });
  }
  if (index) {
    server.Get("/", [index](const httplib::Request& req, httplib::Response& res) { serve_asset(*index, req, res); });
  }

  server.Get("/api/stats", [state](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    const std::string& key = state->sources.api_key;
    const std::string& admin = state->sources.host_admin_key;
    const std::string header = req.get_header_value("Authorization");
    if (!key.empty() && !authorized(header, key) && !(!admin.empty() && authorized(header, admin))) {
      const ApiError error(http_status::kUnauthorized, "This dashboard needs the server's API key (Authorization: Bearer KEY).",
                           "invalid_request_error", "", "invalid_api_key");
      res.status = error.status();
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content(dump_json(error.to_json()), "application/json");
      return;
    }
    res.set_content(dump_json(stats_json(*state)), "application/json");
  });
}

}  // namespace ga::server
