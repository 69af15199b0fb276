// gpu-accel serve, in a build without the HTTP server (cpp-httplib was not found when CMake ran, or
// GA_BUILD_SERVER=OFF): the command exists and says why it cannot run, instead of being "unknown".
#include "commands.h"
#include "gpu_accel/error.h"

namespace ga::cli {

int cmd_serve(int, char**) {
  GA_THROW(Unsupported,
           "this gpu-accel was built without the HTTP server: install cpp-httplib (Debian: libcpp-httplib-dev) and "
           "configure again with -DGA_BUILD_SERVER=AUTO or ON");
}

}  // namespace ga::cli
