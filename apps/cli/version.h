// What `gpu-accel --version` prints: the version, the git commit the build was configured from, and the build's
// options (CUDA on/off with its architectures, the HTTP server on/off).
#pragma once

#include <string>

namespace ga::cli {

std::string version_text();

}  // namespace ga::cli
