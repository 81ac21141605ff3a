#include "file_checksum.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "wanfw/error.hpp"

namespace wanfw {

FileChecksum file_checksum(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::vector<char> buffer(4 << 20);
  FileChecksum sum;
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buffer.data()), got);
    sum.bytes += got;
  }
  if (in.bad()) throw FileError(fmt::format("{}: read error after {} bytes", path.string(), sum.bytes));
  sum.crc32 = static_cast<std::uint32_t>(crc);
  return sum;
}

}  // namespace wanfw
