#pragma once
// Internal: the size and CRC-32 of a file, read in chunks (shards of data set folders).

#include <cstdint>
#include <filesystem>

namespace wanfw {

struct FileChecksum {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;  ///< zlib's CRC-32 (Python: zlib.crc32)
};

/// Throws FileError naming the file when it cannot be read.
FileChecksum file_checksum(const std::filesystem::path& path);

}  // namespace wanfw
