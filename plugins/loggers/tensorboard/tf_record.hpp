#pragma once
// TFRecord framing, TensorBoard's event file records: length, payload, each with a masked CRC32C.

#include <cstdint>
#include <string>
#include <string_view>

namespace wanfw::tb {

/// CRC32C (Castagnoli) of `data`, and TFRecord's masked form of it.
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);
/// One TFRecord: u64 length (little endian), masked CRC of the length, payload, masked CRC.
std::string tf_record(std::string_view payload);

}  // namespace wanfw::tb
