include_guard(GLOBAL)
# core/src's folders as a graph the build enforces. Each folder is an OBJECT library whose units
# see their own folder's headers, the SDK (core/include), the third-party headers, and the
# headers of exactly the folders it declares it USES: including any other folder's header fails
# to compile ("train/trainer.hpp: No such file or directory"). libwanfw_core is the objects of
# every folder; in a unity build, their sources compiled in batches across folders
# (wanfw_library_from_folders, below), the graph checked before by source_layout.py --graph.
#
# A folder's headers are reached through an include root of its own in the build tree
# (<build>/core/folders/<name>/<name> links to core/src/<name>), so that `#include "data/data_loader.hpp"`
# resolves only where data/'s root is on the include path. Uses are PRIVATE: a folder that
# reaches another's headers through a third one's must use it too (the graph is explicit, and
# integration.source_layout checks it against the includes and the READMEs).

# wanfw_folder_uses(TARGET WHERE PREFIX [FOLDER...]): TARGET (the folder WHERE) sees the headers of
# each FOLDER, whose target is PREFIX<FOLDER> and must be declared before it. Shared by core's
# folders and the libraries' (cmake/WanfwSharedLibrary.cmake).
function(wanfw_folder_uses target where prefix)
  foreach(_used IN LISTS ARGN)
    if(NOT TARGET ${prefix}${_used})
      message(FATAL_ERROR "${where} uses ${_used}/, which is not a folder declared before it")
    endif()
    target_link_libraries(${target} PRIVATE ${prefix}${_used})
  endforeach()
endfunction()

# The settings every folder compiles with.
add_library(wanfw_core_folder_settings INTERFACE)
target_include_directories(wanfw_core_folder_settings INTERFACE ${PROJECT_SOURCE_DIR}/core/include)
target_compile_definitions(wanfw_core_folder_settings INTERFACE BOOST_DLL_USE_STD_FS)
target_compile_features(wanfw_core_folder_settings INTERFACE cxx_std_20)
target_link_libraries(wanfw_core_folder_settings INTERFACE
  wanfw::torch Boost::headers spdlog::spdlog fmt::fmt yaml-cpp nlohmann_json::nlohmann_json Threads::Threads
  wanfw_warnings)

# wanfw_core_folder(NAME [USES FOLDER...] SOURCES FILE...): core/src/NAME, whose FILEs (relative to
# it) include only its own headers and those of the FOLDERs, each declared before it.
function(wanfw_core_folder name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "USES;SOURCES")
  set(_root ${CMAKE_CURRENT_BINARY_DIR}/folders/${name})
  file(MAKE_DIRECTORY ${_root})
  if(NOT IS_SYMLINK ${_root}/${name})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/src/${name} ${_root}/${name} SYMBOLIC)
  endif()
  list(TRANSFORM ARG_SOURCES PREPEND src/${name}/)
  set(_target wanfw_core_${name})
  add_library(${_target} OBJECT ${ARG_SOURCES})
  target_include_directories(${_target} PUBLIC ${_root})
  set_target_properties(${_target} PROPERTIES WANFW_FOLDER_INCLUDES ${_root})
  target_link_libraries(${_target} PRIVATE wanfw_core_folder_settings)
  wanfw_folder_uses(${_target} core/src/${name} wanfw_core_ ${ARG_USES})
  wanfw_use_pch(${_target})
  set_property(GLOBAL APPEND PROPERTY WANFW_CORE_FOLDER_TARGETS ${_target})
endfunction()

# wanfw_library_from_folders(LIBRARY FOLDER_TARGET...): LIBRARY is the code of its folders. In a
# unity build (WANFW_UNITY_BUILD, the default) their sources compile as LIBRARY's own, in batches
# of up to WANFW_LIBRARY_BATCH across folders: LibTorch's inline functions and templates are then
# instantiated and optimised once a batch instead of once a folder (six core folders: 117 s as six
# units, 53 s as one). The folders' OBJECT libraries stay, outside `all`: the folder graph test
# compiles units with their commands (each folder's include path alone), and with
# -DWANFW_UNITY_BUILD=OFF the library is their objects, every unit compiled against its folder's
# include path, the graph enforced by the compiler. Runs at the end of the calling directory, after
# every source and definition its folders get. (Units that never touch LibTorch join the batches:
# batched apart without the precompiled header, core's 16 took 40 s, more than they add to the
# batches.)
set(WANFW_LIBRARY_BATCH 48 CACHE STRING "Sources a unity batch of a library built from folders holds")
function(wanfw_library_from_folders library)
  # The arguments as they are now: a deferred call expands variables when it runs.
  cmake_language(EVAL CODE "cmake_language(DEFER CALL _wanfw_library_from_folders ${library} ${ARGN})")
endfunction()
function(_wanfw_library_from_folders library)
  foreach(_folder IN LISTS ARGN)
    if(NOT WANFW_UNITY_BUILD)
      target_sources(${library} PRIVATE $<TARGET_OBJECTS:${_folder}>)
      continue()
    endif()
    get_target_property(_sources ${_folder} SOURCES)
    foreach(_source IN LISTS _sources)
      get_source_file_property(_own ${_source} WANFW_OWN_BATCH)  # a batch of its own (core's c10d units)
      if(NOT _own)
        target_sources(${library} PRIVATE ${_source})
      endif()
    endforeach()
    get_target_property(_includes ${_folder} WANFW_FOLDER_INCLUDES)
    target_include_directories(${library} PRIVATE ${_includes})
    target_compile_definitions(${library} PRIVATE $<TARGET_PROPERTY:${_folder},COMPILE_DEFINITIONS>)
    set_target_properties(${_folder} PROPERTIES EXCLUDE_FROM_ALL ON)
  endforeach()
  if(WANFW_UNITY_BUILD)
    # As few batches as WANFW_LIBRARY_BATCH allows, of even sizes (core, 91 sources: two of 46).
    get_target_property(_all ${library} SOURCES)
    list(FILTER _all INCLUDE REGEX "\\.cpp$")
    list(LENGTH _all _count)
    math(EXPR _batches "(${_count} + ${WANFW_LIBRARY_BATCH} - 1) / ${WANFW_LIBRARY_BATCH}")
    if(_batches LESS 1)
      set(_batches 1)
    endif()
    math(EXPR _size "(${_count} + ${_batches} - 1) / ${_batches}")
    set_target_properties(${library} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${_size})
    wanfw_use_pch(${library})
  endif()
endfunction()
