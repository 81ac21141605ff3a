#include <cstring>
#include <string>

#include "events.hpp"
#include "png.hpp"
#include "proto.hpp"
#include "tf_record.hpp"
#include <doctest/doctest.h>

using namespace wanfw::tb;

TEST_CASE("CRC32C is the Castagnoli checksum (check value of \"123456789\")") {
  CHECK(crc32c("123456789") == 0xE3069283u);
}

TEST_CASE("a 24-byte record's length CRC matches TensorBoard's test vector") {
  const std::string record = tf_record(std::string(24, 'x'));
  CHECK(record.size() == 8 + 4 + 24 + 4);
  std::uint32_t length_crc = 0;
  std::memcpy(&length_crc, record.data() + 8, 4);
  CHECK(length_crc == 0x224b7fa3u);
}

TEST_CASE("the file_version event encodes wall_time as a double and the version string") {
  const std::string event = file_version_event(1.5);
  CHECK(event.size() == 24);  // 09 + 8-byte double + 1a 0d "brain.Event:2"
  CHECK(static_cast<unsigned char>(event[0]) == 0x09);
  CHECK(event.substr(9, 2) == std::string("\x1a\x0d"));
  CHECK(event.substr(11) == "brain.Event:2");
}

TEST_CASE("protobuf varints use seven bits per byte, low bits first") {
  CHECK(Proto().varint(2, 300).data() == std::string("\x10\xac\x02"));
}

TEST_CASE("a PNG starts with its signature and an IHDR of the image's size") {
  const std::uint8_t pixels[2 * 3 * 3] = {};
  const std::string png = encode_png(pixels, 2, 3, 3);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(png.substr(12, 4) == "IHDR");
  CHECK(png.substr(16, 8) == std::string("\0\0\0\3\0\0\0\2", 8));  // width 3, height 2
}
