#pragma once
// For fuzz targets that read a folder: a fresh temporary folder, removed when the fuzzer exits,
// and whether a path a reader resolved lies inside it.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <stdlib.h>

struct FuzzFolder {
  std::filesystem::path path;
  explicit FuzzFolder(const char* name) {
    std::string pattern = (std::filesystem::temp_directory_path() / (std::string(name) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path = pattern;
  }
  ~FuzzFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  FuzzFolder(const FuzzFolder&) = delete;
  FuzzFolder& operator=(const FuzzFolder&) = delete;

  bool holds(const std::filesystem::path& file) const {
    const std::filesystem::path relative = file.lexically_normal().lexically_relative(path);
    return !relative.empty() && *relative.begin() != "..";
  }
};
