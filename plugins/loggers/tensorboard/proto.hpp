#pragma once
// Protocol-buffer wire encoding without libprotobuf: enough for the few messages a training run
// writes to TensorBoard.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace wanfw::tb {

/// Appends `value`'s bytes in little-endian order (fixed-width protobuf fields, TFRecord lengths).
template <typename T>
void append_little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little endian
  out.append(bytes, sizeof(T));
}

/// Protocol-buffer wire encoding of one message, field by field.
class Proto {
 public:
  Proto& varint(int field, std::uint64_t value);
  Proto& fixed64_double(int field, double value);
  Proto& fixed32_float(int field, float value);
  Proto& bytes(int field, std::string_view value);
  Proto& message(int field, const Proto& value) { return bytes(field, value.data_); }
  Proto& packed_doubles(int field, const std::vector<double>& values);
  const std::string& data() const { return data_; }

 private:
  void key(int field, int wire_type);
  void raw_varint(std::uint64_t value);
  std::string data_;
};

}  // namespace wanfw::tb
