include(WanfwCoreFolder)  # wanfw_folder_uses()

# wanfw_lib_folder(NAME [USES FOLDER...] SOURCES FILE...)
#
# One concern of a library split by concern (libs/wan_dit, libs/wan_vae): the folder NAME beside
# the library's CMakeLists.txt, with its public headers in NAME/include and its units in NAME/src.
# An OBJECT library wanfw_<library>_NAME whose units see their own include/ and src/, the SDK, the
# third-party headers, and the include/ of exactly the FOLDERs (of the same library, declared
# before it) it USES: including any other folder's header fails to compile, as in core/src
# (cmake/WanfwCoreFolder.cmake). integration.source_layout checks the graph against the includes and
# each folder's README.md.
function(wanfw_lib_folder name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "USES;SOURCES")
  get_filename_component(_library ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set(_dir ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  list(TRANSFORM ARG_SOURCES PREPEND ${_dir}/src/)
  set(_target wanfw_${_library}_${name})
  add_library(${_target} OBJECT ${ARG_SOURCES})
  if(IS_DIRECTORY ${_dir}/include)
    target_include_directories(${_target} PUBLIC ${_dir}/include)
  endif()
  target_include_directories(${_target} PRIVATE ${_dir}/src)
  set(_includes ${_dir}/src)
  if(IS_DIRECTORY ${_dir}/include)
    list(PREPEND _includes ${_dir}/include)
  endif()
  set_target_properties(${_target} PROPERTIES WANFW_FOLDER_INCLUDES "${_includes}")
  target_link_libraries(${_target} PRIVATE wanfw::sdk spdlog::spdlog fmt::fmt wanfw_warnings)
  wanfw_folder_uses(${_target} libs/${_library}/${name} wanfw_${_library}_ ${ARG_USES})
  wanfw_use_pch(${_target})
endfunction()

# wanfw_add_shared_library(NAME (SOURCES... [INCLUDE_DIR dir] | FOLDERS...) [LINK libs...])
#
# A library of this repository that plugins (and the command line) share: the Wan DiT
# (libs/wan_dit), the data set folder format (libs/latent_shards). A plain shared library in lib/
# next to libwanfw_core.so, never in the plugin folder (which holds only plugins): the plugins
# find it through their $ORIGIN/../.. RPATH, the command line through $ORIGIN/../lib. It builds
# on the SDK alone, like a plugin. A library of one concern lists its SOURCES (in src/; INCLUDE_DIR,
# default include/, is its public header folder); a library of several is the objects of its
# FOLDERS (wanfw_lib_folder, wanfw_library_from_folders), whose include/ folders are all public.
function(wanfw_add_shared_library name)
  cmake_parse_arguments(ARG "" "INCLUDE_DIR" "SOURCES;FOLDERS;LINK" ${ARGN})
  if(NOT ARG_INCLUDE_DIR)
    set(ARG_INCLUDE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  add_library(${name} SHARED ${ARG_SOURCES})
  if(ARG_FOLDERS)
    get_filename_component(_library ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    set(_folder_targets ${ARG_FOLDERS})
    list(TRANSFORM _folder_targets PREPEND wanfw_${_library}_)
    wanfw_library_from_folders(${name} ${_folder_targets})
    foreach(_folder IN LISTS ARG_FOLDERS)
      target_link_libraries(wanfw_${_library}_${_folder} PRIVATE ${ARG_LINK})
      if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_folder}/include)
        target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/${_folder}/include)
      endif()
    endforeach()
  else()
    target_include_directories(${name} PUBLIC ${ARG_INCLUDE_DIR} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
    wanfw_use_pch(${name})
  endif()
  target_link_libraries(${name} PUBLIC wanfw::sdk PRIVATE spdlog::spdlog fmt::fmt wanfw_warnings ${ARG_LINK})
  set_target_properties(${name} PROPERTIES
    DEFINE_SYMBOL ""
    BUILD_RPATH "$ORIGIN;${WANFW_TORCH_LIB_DIR}"
    INSTALL_RPATH "$ORIGIN;${WANFW_TORCH_LIB_DIR}")
  install(TARGETS ${name} LIBRARY DESTINATION lib)
endfunction()
