#include "pagoda/core/error.h"

#include <cstring>

namespace pagoda {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(ErrorKind::kInternal, str_cat("internal error at ", base, ":", line, ": check failed: ", cond,
                                            msg.empty() ? "" : ": ", msg));
}

}  // namespace pagoda
