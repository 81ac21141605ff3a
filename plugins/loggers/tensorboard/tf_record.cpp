#include "tf_record.hpp"

#include <boost/crc.hpp>

#include "proto.hpp"

namespace wanfw::tb {

std::uint32_t crc32c(std::string_view data) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view payload) {
  std::string record;
  append_little_endian(record, static_cast<std::uint64_t>(payload.size()));
  append_little_endian(record, masked_crc32c(record));
  record.append(payload.data(), payload.size());
  append_little_endian(record, masked_crc32c(payload));
  return record;
}

}  // namespace wanfw::tb
