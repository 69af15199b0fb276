// See version.h. The GA_BUILD_* definitions are given to this file alone (apps/CMakeLists.txt), so that a new
// commit recompiles one file, not the tree.
#include "version.h"

namespace ga::cli {

std::string version_text() {
  std::string text = std::string("gpu-accel ") + GA_VERSION + "\n";
  text += std::string("commit: ") + GA_BUILD_GIT_COMMIT + "\n";
  text += std::string("cuda: ") + GA_BUILD_CUDA + "\n";
  text += std::string("server: ") + GA_BUILD_SERVER_TEXT + "\n";
  return text;
}

}  // namespace ga::cli
