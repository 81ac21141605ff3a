# The sources of wanfw's readers of untrusted files (safetensors files and indexes, bounded JSON,
# data set manifests, adapter files), for the builds that compile them apart from libwanfw_core: the AddressSanitizer tests and the
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
# The adapter file reader (every layout, its metadata, the tensor gate) and the Wan names it maps.
set(_wan_src ${CMAKE_CURRENT_LIST_DIR}/../plugins/models/wan_dit/src)
set(WANFW_ADAPTER_SOURCES
  ${_core_src}/tensor_check.cpp
  ${_wan_src}/adapter_metadata.cpp
  ${_wan_src}/adapter_reader.cpp
  ${_wan_src}/wan_config.cpp
  ${_wan_src}/weight_names.cpp)
set(WANFW_ADAPTER_INCLUDE_DIRS ${_wan_src} ${_wan_src}/../include)
