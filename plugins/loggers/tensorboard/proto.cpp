#include "proto.hpp"

namespace wanfw::tb {

void Proto::raw_varint(std::uint64_t value) {
  while (value >= 0x80) {
    data_ += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  data_ += static_cast<char>(value);
}

void Proto::key(int field, int wire_type) { raw_varint((static_cast<std::uint64_t>(field) << 3) | wire_type); }

Proto& Proto::varint(int field, std::uint64_t value) {
  key(field, 0);
  raw_varint(value);
  return *this;
}

Proto& Proto::fixed64_double(int field, double value) {
  key(field, 1);
  append_little_endian(data_, value);
  return *this;
}

Proto& Proto::fixed32_float(int field, float value) {
  key(field, 5);
  append_little_endian(data_, value);
  return *this;
}

Proto& Proto::bytes(int field, std::string_view value) {
  key(field, 2);
  raw_varint(value.size());
  data_.append(value.data(), value.size());
  return *this;
}

Proto& Proto::packed_doubles(int field, const std::vector<double>& values) {
  key(field, 2);
  raw_varint(values.size() * sizeof(double));
  for (double v : values) append_little_endian(data_, v);
  return *this;
}

}  // namespace wanfw::tb
