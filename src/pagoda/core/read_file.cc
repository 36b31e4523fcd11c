#include "pagoda/core/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "pagoda/core/error.h"

namespace pagoda {

std::string read_user_file(const std::string& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw_runtime_error("cannot read '", path, "': ", ec ? ec.message() : "no such file");
  // A FIFO or a device (/dev/zero) has no size to check and may never end.
  if (!fs::is_regular_file(st)) throw_config_error("'", path, "' is not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw_runtime_error("cannot read '", path, "': ", ec.message());
  if (size > max_bytes)
    throw_config_error("'", path, "' is ", format_bytes(double(size)), ", more than the ", format_bytes(double(max_bytes)),
                       " limit for this kind of file; is it the right file?");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_runtime_error("cannot read '", path, "': ", std::strerror(errno));
  std::string text(size_t(size), '\0');
  in.read(text.data(), std::streamsize(size));
  text.resize(size_t(in.gcount()));  // the file may have shrunk since file_size
  if (in.bad()) throw_runtime_error("cannot read '", path, "': read error");
  return text;
}

}  // namespace pagoda
