#include "plugin_host/plugin_file.hpp"

#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace fs = std::filesystem;

namespace wanfw {

namespace {

constexpr const char* kRecordSymbol = "wanfw_plugin_record";

#if defined(__x86_64__)
constexpr std::uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr std::uint16_t kHostMachine = EM_AARCH64;
#else
#error "wanfw reads plugin libraries as ELF64 little-endian files: add this machine's e_machine"
#endif

/// Bounds-checked reads from a file of known size.
class FileBytes {
 public:
  explicit FileBytes(const fs::path& path) : path_(path), in_(path, std::ios::binary) {
    std::error_code ec;
    size_ = fs::file_size(path, ec);
    if (!in_ || ec) fail("cannot be read", "check its permissions");
  }

  std::uint64_t size() const { return size_; }

  /// True when [offset, offset + length) lies inside the file (without overflow).
  bool contains(std::uint64_t offset, std::uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

  template <typename T>
  T read(std::uint64_t offset, const char* what) {
    T value{};
    read_into(&value, offset, sizeof(T), what);
    return value;
  }

  void read_into(void* out, std::uint64_t offset, std::uint64_t length, const char* what) {
    if (!contains(offset, length))
      fail(fmt::format("is truncated or malformed: its {} lies past the end of the file ({} bytes)", what, size_),
           "copy the library again (an interrupted copy leaves a partial file), or remove it");
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(length));
    if (!in_) fail(fmt::format("could not be read at byte {}", offset));
  }

  [[noreturn]] void fail(const std::string& problem, const std::string& hint = "") const {
    throw PluginError(fmt::format("{}: {}", path_.string(), problem), hint);
  }

 private:
  fs::path path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

/// The file offset of virtual address `address` (`length` bytes) inside a loadable segment's
/// file-backed bytes, or nothing.
std::optional<std::uint64_t> file_offset(const std::vector<Elf64_Phdr>& loads, std::uint64_t address,
                                         std::uint64_t length) {
  for (const auto& segment : loads) {
    if (address < segment.p_vaddr) continue;
    const std::uint64_t delta = address - segment.p_vaddr;
    if (delta <= segment.p_filesz && length <= segment.p_filesz - delta) return segment.p_offset + delta;
  }
  return std::nullopt;
}

}  // namespace

PluginRecord read_plugin_record(const fs::path& path) {
  FileBytes file(path);
  const char* not_a_library = "is not a shared library (no ELF header)";
  if (file.size() < sizeof(Elf64_Ehdr)) file.fail(not_a_library, "remove it from the plugin folder");
  const auto header = file.read<Elf64_Ehdr>(0, "ELF header");
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) file.fail(not_a_library, "remove it from the plugin folder");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    file.fail("is not a 64-bit little-endian ELF library", "build it for this machine");
  if (header.e_type != ET_DYN) file.fail("is an ELF file but not a shared library", "build plugins as shared libraries");
  if (header.e_machine != kHostMachine)
    file.fail(fmt::format("is built for another processor (ELF machine {}, this one is {})", header.e_machine,
                          kHostMachine),
              "build it on or for this machine");
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_shentsize != sizeof(Elf64_Shdr))
    file.fail("has malformed ELF headers (unexpected header sizes)");

  // Every loadable segment must lie inside the file: the loader maps them all.
  if (!file.contains(header.e_phoff, std::uint64_t{header.e_phnum} * sizeof(Elf64_Phdr)))
    file.fail("is truncated or malformed: its program headers lie past the end of the file",
              "copy the library again (an interrupted copy leaves a partial file), or remove it");
  std::vector<Elf64_Phdr> loads;
  for (std::uint16_t i = 0; i < header.e_phnum; ++i) {
    const auto segment = file.read<Elf64_Phdr>(header.e_phoff + std::uint64_t{i} * sizeof(Elf64_Phdr), "program header");
    if (segment.p_type != PT_LOAD) continue;
    if (!file.contains(segment.p_offset, segment.p_filesz))
      file.fail(fmt::format("is truncated: loadable segment {} needs bytes {}..{}, but the file has {}", loads.size(),
                            segment.p_offset, segment.p_offset + segment.p_filesz, file.size()),
                "copy the library again (an interrupted copy leaves a partial file), or remove it");
    loads.push_back(segment);
  }
  if (loads.empty()) file.fail("has no loadable segments");

  // The dynamic symbol table, through the section headers.
  if (!file.contains(header.e_shoff, std::uint64_t{header.e_shnum} * sizeof(Elf64_Shdr)))
    file.fail("is truncated or malformed: its section headers lie past the end of the file",
              "copy the library again (an interrupted copy leaves a partial file), or remove it");
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  for (std::uint16_t i = 0; i < header.e_shnum; ++i)
    sections[i] = file.read<Elf64_Shdr>(header.e_shoff + std::uint64_t{i} * sizeof(Elf64_Shdr), "section header");
  const char* not_a_plugin_hint = "plugins end with WANFW_PLUGIN(kind, describe); move other libraries out of plugin folders";
  for (const auto& symbols : sections) {
    if (symbols.sh_type != SHT_DYNSYM) continue;
    if (symbols.sh_entsize != sizeof(Elf64_Sym) || symbols.sh_link >= sections.size())
      file.fail("has a malformed dynamic symbol table");
    const Elf64_Shdr& names = sections[symbols.sh_link];
    if (!file.contains(symbols.sh_offset, symbols.sh_size) || !file.contains(names.sh_offset, names.sh_size))
      file.fail("is truncated: its dynamic symbol table lies past the end of the file",
                "copy the library again (an interrupted copy leaves a partial file), or remove it");
    std::string strings(names.sh_size, '\0');
    file.read_into(strings.data(), names.sh_offset, names.sh_size, "symbol names");
    const std::uint64_t count = symbols.sh_size / sizeof(Elf64_Sym);
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto symbol = file.read<Elf64_Sym>(symbols.sh_offset + i * sizeof(Elf64_Sym), "symbol");
      if (symbol.st_name >= strings.size() || symbol.st_shndx == SHN_UNDEF) continue;
      if (std::strcmp(strings.c_str() + symbol.st_name, kRecordSymbol) != 0) continue;
      // The fields every record version has; a newer, longer record is read up to what we know.
      constexpr std::uint64_t kFixedPrefix = offsetof(PluginRecord, torch_version);
      if (ELF64_ST_TYPE(symbol.st_info) != STT_OBJECT || symbol.st_size < kFixedPrefix)
        file.fail(fmt::format("exports '{}', but not as a wanfw plugin record", kRecordSymbol), not_a_plugin_hint);
      const std::uint64_t length = std::min<std::uint64_t>(symbol.st_size, sizeof(PluginRecord));
      const auto offset = file_offset(loads, symbol.st_value, length);
      if (!offset) file.fail(fmt::format("its '{}' lies outside the file's data", kRecordSymbol), not_a_plugin_hint);
      PluginRecord record{};
      file.read_into(&record, *offset, length, "plugin record");
      if (std::memcmp(record.magic, kPluginRecordMagic, sizeof(kPluginRecordMagic)) != 0)
        file.fail(fmt::format("exports '{}', but its contents are not a wanfw plugin record", kRecordSymbol),
                  not_a_plugin_hint);
      record.torch_version[sizeof(record.torch_version) - 1] = '\0';
      record.wanfw_version[sizeof(record.wanfw_version) - 1] = '\0';
      return record;
    }
  }
  file.fail(fmt::format("not a wanfw plugin (it exports no '{}')", kRecordSymbol), not_a_plugin_hint);
}

}  // namespace wanfw
