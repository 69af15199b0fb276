#include "core/env.h"

#include <cstdlib>
#include <cstring>

namespace ga {

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace ga
