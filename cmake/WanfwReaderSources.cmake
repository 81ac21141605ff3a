# The sources of wanfw's readers of untrusted files (safetensors files and indexes, bounded JSON,
# data set manifests, adapter files, fp8 checkpoints), for the builds that compile them apart from libwanfw_core: the AddressSanitizer tests and the
# fuzz targets.
set(_core_src ${CMAKE_CURRENT_LIST_DIR}/../core/src)
set(WANFW_SAFETENSORS_SOURCES
  ${_core_src}/io/bounded_input.cpp
  ${_core_src}/host/error.cpp
  ${_core_src}/io/file_io.cpp
  ${_core_src}/io/safetensors_dtypes.cpp
  ${_core_src}/io/safetensors_file.cpp
  ${_core_src}/io/safetensors_header.cpp
  ${_core_src}/io/safetensors_index.cpp
  ${_core_src}/io/safetensors_writer.cpp)
# The data set folder reader (manifest, shards: libs/latent_shards) and what it builds on.
set(_shards_src ${CMAKE_CURRENT_LIST_DIR}/../libs/latent_shards/src)
set(WANFW_DATASET_SOURCES
  ${_core_src}/data/data.cpp
  ${_core_src}/data/sample_conform.cpp
  ${_core_src}/numerics/finite_copy.cpp
  ${_shards_src}/dataset_manifest.cpp
  ${_shards_src}/dataset_writer.cpp
  ${_shards_src}/file_checksum.cpp
  ${_shards_src}/latent_shard_dataset.cpp)
# The format's name, version, manifest file and the keys of the manifest's objects:
# libs/latent_shards/dataset_format.json (which tools/dataset_folder.py reads too), as a header
# generated in the build tree from dataset_format.hpp.in.
set(_format_json ${_shards_src}/../dataset_format.json)
file(READ ${_format_json} _format)
string(JSON WANFW_DATASET_FORMAT_NAME GET "${_format}" format)
string(JSON WANFW_DATASET_FORMAT_VERSION GET "${_format}" version)
string(JSON WANFW_DATASET_MANIFEST_FILE GET "${_format}" manifest)
set(WANFW_DATASET_KEYS "")  # namespace <kind>_keys { inline constexpr const char* <key> = "<key>"; ... }
string(JSON _kinds LENGTH "${_format}" keys)
math(EXPR _last_kind "${_kinds} - 1")
foreach(_k RANGE ${_last_kind})
  string(JSON _kind MEMBER "${_format}" keys ${_k})
  string(APPEND WANFW_DATASET_KEYS "namespace ${_kind}_keys {\n")
  string(JSON _count LENGTH "${_format}" keys ${_kind})
  math(EXPR _last "${_count} - 1")
  foreach(_i RANGE ${_last})
    string(JSON _key GET "${_format}" keys ${_kind} ${_i})
    string(APPEND WANFW_DATASET_KEYS "inline constexpr const char* ${_key} = \"${_key}\";\n")
  endforeach()
  string(APPEND WANFW_DATASET_KEYS "}  // namespace ${_kind}_keys\n")
endforeach()
set(WANFW_DATASET_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated/latent_shards_format)
configure_file(${_shards_src}/../dataset_format.hpp.in ${WANFW_DATASET_GENERATED_DIR}/latent_shards/dataset_format.hpp
               @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_format_json})
set(WANFW_DATASET_INCLUDE_DIRS ${_shards_src} ${_shards_src}/../include ${WANFW_DATASET_GENERATED_DIR})
# The adapter file reader (every layout, its metadata, the tensor gate) and the Wan names it maps.
set(_wan ${CMAKE_CURRENT_LIST_DIR}/../libs/wan_dit)
set(WANFW_ADAPTER_SOURCES
  ${_core_src}/numerics/tensor_check.cpp
  ${_wan}/adapters/src/adapter_metadata.cpp
  ${_wan}/adapters/src/adapter_reader.cpp
  ${_wan}/network/src/wan_config.cpp
  ${_wan}/weight_files/src/weight_names.cpp)
set(WANFW_ADAPTER_INCLUDE_DIRS ${_wan}/adapters/src ${_wan}/adapters/include ${_wan}/network/include
    ${_wan}/weight_files/include)
# The reader of the community's fp8 checkpoints and the fp8 weight it returns (include dirs: the
# adapter reader's).
set(WANFW_FP8_SOURCES ${_wan}/weight_files/src/fp8_files.cpp ${_wan}/network/src/fp8_weight.cpp)
