// OpenAI-style API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
//
// Request handling throws ApiError wherever it finds a problem (parsing, validation, the scheduler
// refusing work); one catch at the edge of each route turns it into the response. ga::Error from
// the library is mapped by kind, so the engine never needs to know about HTTP: InvalidArgument and
// OutOfRange are the client's fault (400), Unavailable means "retry later" (503 + Retry-After),
// everything else is ours (500).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu_accel/error.h"

namespace ga::server {

namespace http_status {
constexpr int kOk = 200;
constexpr int kBadRequest = 400;
constexpr int kUnauthorized = 401;
constexpr int kForbidden = 403;
constexpr int kNotFound = 404;
constexpr int kMethodNotAllowed = 405;
constexpr int kPayloadTooLarge = 413;
constexpr int kUnsupportedMediaType = 415;
constexpr int kTooManyRequests = 429;
constexpr int kInternalServerError = 500;
constexpr int kServiceUnavailable = 503;
}  // namespace http_status

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::string param = {}, std::string code = {})
      : std::runtime_error(message),
        status_(status),
        message_(std::move(message)),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the offending request field, "" if none
  const std::string& code() const { return code_; }
  int retry_after_seconds() const { return retry_after_seconds_; }  // > 0: send a Retry-After header
  ApiError& with_retry_after(int seconds) {
    retry_after_seconds_ = seconds;
    return *this;
  }

  // {"error": {"message": ..., "type": ..., "param": ... or null, "code": ... or null}}
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string message_, type_, param_, code_;
  int retry_after_seconds_ = 0;
};

// 400 invalid_request_error, naming the field at fault.
ApiError invalid_request(const std::string& message, const std::string& param = {}, const std::string& code = {});

// The HTTP face of a library error (see the mapping above).
ApiError api_error_from(const ga::Error& error);

// Serializes for the wire. Text the model produced may hold partial UTF-8 (a logprob token's bytes),
// and error messages may quote invalid client bytes: both become U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& value);

}  // namespace ga::server
