// See api_error.h. The mapping from ga::ErrorKind to HTTP lives here and only here.
#include "server/api_error.h"

namespace ga::server {

namespace {

constexpr int kRetryAfterBusySeconds = 1;  // the queue drains at generation speed: retry soon

nlohmann::json null_if_empty(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

}  // namespace

nlohmann::json ApiError::to_json() const {
  return {{"error",
           {{"message", message_}, {"type", type_}, {"param", null_if_empty(param_)}, {"code", null_if_empty(code_)}}}};
}

ApiError invalid_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(http_status::kBadRequest, message, "invalid_request_error", param, code);
}

ApiError api_error_from(const ga::Error& error) {
  switch (error.kind()) {
    case ErrorKind::InvalidArgument:
      return invalid_request(error.message());
    case ErrorKind::OutOfRange:
      return invalid_request(error.message(), {}, "context_length_exceeded");
    case ErrorKind::Unsupported:
      return invalid_request(error.message(), {}, "unsupported");
    case ErrorKind::Unavailable:
      return ApiError(http_status::kServiceUnavailable, error.message(), "server_error", {}, "server_overloaded")
          .with_retry_after(kRetryAfterBusySeconds);
    case ErrorKind::InvalidFormat:
    case ErrorKind::Io:
    case ErrorKind::OutOfMemory:
    case ErrorKind::Internal:
      break;
  }
  return ApiError(http_status::kInternalServerError, error.message(), "server_error", {}, "internal_error");
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ga::server
