# Build-wide settings: compiler cache, output layout, warnings, and the third-party packages.

find_program(WANFW_CCACHE ccache)
if(WANFW_CCACHE)
  # Precompiled headers and ccache work together only with these sloppiness settings; the base
  # folder makes paths relative so that fresh clones (and CI) hit the cache. It is the repository's
  # root: a project inside it (tests/fuzz) compiles sources from all over the tree and sets
  # WANFW_SOURCE_ROOT, or every fresh clone would compile them anew.
  if(NOT WANFW_SOURCE_ROOT)
    set(WANFW_SOURCE_ROOT ${CMAKE_SOURCE_DIR})
  endif()
  set(_launcher ${CMAKE_COMMAND} -E env
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_BASEDIR=${WANFW_SOURCE_ROOT} CCACHE_NOHASHDIR=1
      ${WANFW_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
endif()

# Layout promised by the README: build/bin/wanfw, build/lib/libwanfw_core.so,
# build/lib/wanfw/plugins/*.so.
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
set(WANFW_PLUGIN_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/wanfw/plugins)
set(WANFW_TEST_PLUGIN_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/wanfw/test-plugins)

# Every translation unit is position independent so that one precompiled header serves
# libraries and executables alike.
string(APPEND CMAKE_CXX_FLAGS " -fPIC")
set(CMAKE_BUILD_RPATH_USE_ORIGIN ON)

# Release builds compile the host code at -O1 and the kernels at -O3 (wanfw_kernel_sources). The
# host code calls LibTorch's ops and spends about 1% of a training step's CPU time: a profile of
# the quick start (perf, cpu-clock) puts 66-69% in libtorch_cpu, 17-20% in OpenMP's threads, and
# 7% in libwanfw_wan_dit, nearly all of it the fused block kernels; libwanfw_core held 0.4% at
# -O3 and 0.5% at -O1. The quick start's target builds in 3 min 11 s at -O1 instead of 4 min 29 s
# (2 cores, cold) and trains as fast; the kernels at -O1 made it 25% slower. GCC keeps IEEE
# arithmetic at every -O level (no -ffast-math), so the results are the same bit for bit.
set(WANFW_HOST_OPTIMIZATION "-O1" CACHE STRING "GCC's -O level of wanfw's host code in Release builds (the kernels: -O3)")
string(REGEX REPLACE "-O[0-3s]" "${WANFW_HOST_OPTIMIZATION}" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")

# wanfw_kernel_sources(FILE...): FILEs (of the calling directory's targets) hold loops over tensor
# elements, compiled at -O3 in every build type that optimises, each a unit of its own (CMake
# leaves a source with COMPILE_OPTIONS out of unity batches) and without the precompiled header
# (built at the host code's level).
function(wanfw_kernel_sources)
  set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS $<$<CONFIG:Release,RelWithDebInfo>:-O3>)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# --- LibTorch from the project's torch wheel -------------------------------------------------
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS ${CUDAToolkit_ROOT}/bin/nvcc)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_ROOT}/bin/nvcc)
endif()
# No GPU on build machines: name the architectures instead of letting Caffe2 probe for devices.
if(NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
set(CMAKE_CUDA_STANDARD 17)
set(USE_SYSTEM_NVTX ON CACHE BOOL "Use the toolkit's nvtx3 headers")
find_package(Torch REQUIRED CONFIG)
# Real paths: the project's .venv is a link into a per-user cache, and what the build (and an
# install) records must not depend on the source folder.
file(REAL_PATH "${Torch_DIR}" WANFW_TORCH_CMAKE_DIR)
get_filename_component(WANFW_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
file(REAL_PATH "${WANFW_TORCH_LIB_DIR}" WANFW_TORCH_LIB_DIR)
include(wanfwTorch)  # wanfw_torch_identity(), shared with the installed package
wanfw_torch_identity("${WANFW_TORCH_CMAKE_DIR}" WANFW_TORCH_IDENTITY WANFW_TORCH_CUDA)
message(STATUS "wanfw: LibTorch ${WANFW_TORCH_IDENTITY} (CUDA ${WANFW_TORCH_CUDA}) from ${WANFW_TORCH_LIB_DIR}")

# wanfw::torch: LibTorch as the wheel ships it. TORCH_LIBRARIES would also link the system CUDA
# runtime and NVRTC directly into every binary, and the loader would then pick those (the
# toolkit's 13.0) over the ones the wheel was built with (found through libtorch_cuda's own
# RPATH). So link only LibTorch's libraries, and let the linker resolve their dependencies (NCCL,
# cuBLAS, ...) in the wheel's nvidia/ folders. Exported with the SDK: plugins get the same.
get_filename_component(_site_packages "${WANFW_TORCH_LIB_DIR}/../.." ABSOLUTE)
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${_site_packages}/nvidia/*/lib")
list(JOIN _nvidia_lib_dirs ":" _rpath_link)
get_target_property(_torch_definitions torch_cpu INTERFACE_COMPILE_DEFINITIONS)
add_library(wanfw_torch INTERFACE)
add_library(wanfw::torch ALIAS wanfw_torch)
set_target_properties(wanfw_torch PROPERTIES EXPORT_NAME torch)
set(_torch_includes)
foreach(_dir ${TORCH_INCLUDE_DIRS})
  file(REAL_PATH "${_dir}" _real)
  list(APPEND _torch_includes "${_real}")
endforeach()
# The CUDA toolkit's headers: LibTorch's CUDA headers include cuda_runtime_api.h.
target_include_directories(wanfw_torch SYSTEM INTERFACE ${_torch_includes} ${CUDAToolkit_INCLUDE_DIRS})
if(_torch_definitions)
  target_compile_definitions(wanfw_torch INTERFACE ${_torch_definitions})
endif()
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(wanfw_torch INTERFACE ${_torch_flags})
set(_torch_libs torch torch_cpu torch_cuda c10_cuda c10)
# The C++ runtime before LibTorch in every binary's search order: the wheels carry copies of
# parts of libstdc++ (std::filesystem among them, from their toolchain's static support library)
# and export them; found first, those copies, not the runtime our code is compiled against, would
# serve our calls (torch 2.11's std::filesystem::remove_all jumps to a null address that way).
target_link_libraries(wanfw_torch INTERFACE "-Wl,--no-as-needed,-lstdc++")
foreach(_lib ${_torch_libs})
  if(EXISTS "${WANFW_TORCH_LIB_DIR}/lib${_lib}.so")
    # --no-as-needed: LibTorch registers its CPU and CUDA kernels from static initialisers.
    target_link_libraries(wanfw_torch INTERFACE "-Wl,--no-as-needed,${WANFW_TORCH_LIB_DIR}/lib${_lib}.so")
  endif()
endforeach()
target_link_libraries(wanfw_torch INTERFACE "-Wl,--as-needed")
# LibTorch's intra-op threads. With AT_PARALLEL_OPENMP, at::parallel_for is a header template
# that uses the threads only where the including unit defines _OPENMP; elsewhere it runs the
# whole range on the calling thread, silently. So every unit (wanfw's and plugins') compiles
# with -fopenmp and links the OpenMP runtime LibTorch itself loads (the wheel's libgomp.so.1, a
# LibTorch archive's libgomp-<hash>.so.1): one runtime, one thread pool in the process. GCC
# only: clang's OpenMP code calls LLVM's runtime, not libgomp (there the loops stay serial).
file(STRINGS "${WANFW_TORCH_LIB_DIR}/../include/ATen/Config.h" _torch_openmp REGEX "define AT_PARALLEL_OPENMP 1")
if(_torch_openmp)
  file(GLOB _torch_gomp "${WANFW_TORCH_LIB_DIR}/libgomp*.so*")
  if(_torch_gomp)
    list(GET _torch_gomp 0 _torch_gomp)
    target_link_libraries(wanfw_torch INTERFACE "${_torch_gomp}")
  else()  # a LibTorch that uses the system's runtime
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    target_link_libraries(wanfw_torch INTERFACE ${OpenMP_CXX_LIBRARIES})
  endif()
  target_compile_options(wanfw_torch INTERFACE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-fopenmp>)
endif()
if(_rpath_link)
  target_link_options(wanfw_torch INTERFACE "LINKER:-rpath-link,${_rpath_link}")
endif()

# What code that creates c10d process groups needs besides LibTorch, applied per source file
# (wanfw_use_c10d): Gloo's headers from Debian's libgloo-dev (the wheel has none; declarations
# only, every symbol resolves in libtorch_cpu) and NCCL's header from the wheel's nvidia/nccl.
find_path(WANFW_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(NOT WANFW_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "wanfw: Gloo headers (gloo/algorithm.h) not found; scripts/setup.sh installs libgloo-dev")
endif()
set(WANFW_C10D_INCLUDE_DIRS ${WANFW_GLOO_INCLUDE_DIR})
set(WANFW_C10D_DEFINITIONS USE_C10D_GLOO)
if(EXISTS "${_site_packages}/nvidia/nccl/include/nccl.h" AND EXISTS "${WANFW_TORCH_LIB_DIR}/libtorch_cuda.so")
  list(APPEND WANFW_C10D_INCLUDE_DIRS "${_site_packages}/nvidia/nccl/include")
  list(APPEND WANFW_C10D_DEFINITIONS USE_C10D_NCCL)
endif()
# Compiles SOURCES with the c10d backends' headers (and without the shared precompiled header,
# whose definitions differ).
function(wanfw_use_c10d)
  set(_options)
  foreach(_dir ${WANFW_C10D_INCLUDE_DIRS})
    if(NOT _dir STREQUAL "/usr/include")  # already searched; -isystem on it breaks include_next
      list(APPEND _options "-isystem" "${_dir}")  # system: their warnings are not ours
    endif()
  endforeach()
  set_source_files_properties(${ARGN} PROPERTIES
    COMPILE_OPTIONS "${_options}"
    COMPILE_DEFINITIONS "${WANFW_C10D_DEFINITIONS}"
    SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# Compiles every source of TARGET with the c10d backends' headers and definitions.
function(wanfw_c10d_target target)
  foreach(_dir ${WANFW_C10D_INCLUDE_DIRS})
    if(NOT _dir STREQUAL "/usr/include")
      target_include_directories(${target} SYSTEM PRIVATE ${_dir})
    endif()
  endforeach()
  target_compile_definitions(${target} PRIVATE ${WANFW_C10D_DEFINITIONS})
endfunction()

find_package(Boost 1.74 REQUIRED COMPONENTS filesystem)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)  # CRC-32 of data set shards, PNG in TensorBoard images

# The torch wheel ships fmt 12 headers in its include folder, which would shadow the system fmt
# that spdlog is built against. A shim folder searched before LibTorch's puts the system fmt
# and spdlog first. (LibTorch's public C++ API headers do not include fmt themselves.)
set(WANFW_INCLUDE_SHIM ${CMAKE_BINARY_DIR}/include-shim)
file(MAKE_DIRECTORY ${WANFW_INCLUDE_SHIM})
foreach(_probe fmt/format.h spdlog/spdlog.h)
  get_filename_component(_lib ${_probe} DIRECTORY)
  find_path(_${_lib}_dir ${_probe} PATHS /usr/include NO_DEFAULT_PATH)
  if(NOT _${_lib}_dir)
    find_path(_${_lib}_dir ${_probe})
  endif()
  if(NOT _${_lib}_dir)
    message(FATAL_ERROR "wanfw: ${_probe} not found; run scripts/setup.sh to install the Debian packages")
  endif()
  file(CREATE_LINK ${_${_lib}_dir}/${_lib} ${WANFW_INCLUDE_SHIM}/${_lib} SYMBOLIC)
  set(WANFW_SHIM_${_lib}_DIR ${_${_lib}_dir})  # recorded by the installed package
endforeach()
include_directories(BEFORE SYSTEM ${WANFW_INCLUDE_SHIM})

# Warnings for wanfw's own code (third-party headers come in as system includes).
add_library(wanfw_warnings INTERFACE)
target_compile_options(wanfw_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter
                       $<$<BOOL:${WANFW_WERROR}>:-Werror>)
# GCC 13 reports -Warray-bounds and -Wstringop-overflow inside libstdc++'s vector<bool>::reserve
# and fmt's format_dragon when they are inlined into our units (from LibTorch's autograd
# Function::apply, every custom autograd function): false positives in third-party code that
# -isystem cannot hide, since the middle end warns after inlining.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  target_compile_options(wanfw_warnings INTERFACE -Wno-array-bounds -Wno-stringop-overflow)
endif()

# One precompiled header for every LibTorch translation unit.
add_library(wanfw_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/pch.cpp)
target_link_libraries(wanfw_pch PUBLIC wanfw::torch spdlog::spdlog fmt::fmt)
target_precompile_headers(wanfw_pch PRIVATE <torch/torch.h> <spdlog/spdlog.h> <vector> <string>
                          <map> <memory> <optional> <functional>)

# Use the shared precompiled header in TARGET.
function(wanfw_use_pch target)
  target_precompile_headers(${target} REUSE_FROM wanfw_pch)
endfunction()
