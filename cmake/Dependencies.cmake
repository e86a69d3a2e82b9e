# Third-party dependencies, all from Debian packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
find_package(fmt REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# CUDA is optional: without nvcc everything else builds, and CUDA tests skip.
set(BAGUA_WITH_CUDA OFF)
if(NOT BAGUA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures")
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    # Debian 12's CMake 3.25 sets a property on CUDA::nvToolsExt without checking that it exists, and CUDA 13
    # ships no nvToolsExt (only the header-only nvtx3): a stand-in target lets FindCUDAToolkit finish. bagua
    # does not link it.
    if(NOT TARGET CUDA::nvToolsExt)
      add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(BAGUA_WITH_CUDA ON)
  elseif(BAGUA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "BAGUA_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "bagua: CUDA support ${BAGUA_WITH_CUDA}")
