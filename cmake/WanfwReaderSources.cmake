# The sources of wanfw's readers of untrusted files (safetensors files and indexes, bounded JSON,
# data set manifests),
# for the builds that compile them apart from libwanfw_core: the AddressSanitizer tests and the
# fuzz targets.
set(_core_src ${CMAKE_CURRENT_LIST_DIR}/../core/src)
set(WANFW_SAFETENSORS_SOURCES
  ${_core_src}/bounded_input.cpp
  ${_core_src}/error.cpp
  ${_core_src}/file_io.cpp
  ${_core_src}/safetensors_dtypes.cpp
  ${_core_src}/safetensors_file.cpp
  ${_core_src}/safetensors_header.cpp
  ${_core_src}/safetensors_index.cpp
  ${_core_src}/safetensors_writer.cpp)
# The data set folder reader (manifest, shards) and what it builds on.
set(WANFW_DATASET_SOURCES
  ${_core_src}/data.cpp
  ${_core_src}/dataset_manifest.cpp
  ${_core_src}/dataset_writer.cpp
  ${_core_src}/file_checksum.cpp
  ${_core_src}/generators.cpp
  ${_core_src}/finite_copy.cpp
  ${_core_src}/latent_shard_dataset.cpp
  ${_core_src}/sample_conform.cpp)
