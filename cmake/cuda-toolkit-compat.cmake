# Debian 12's CMake 3.25 sets a property on CUDA::nvToolsExt in FindCUDAToolkit without checking that the target
# exists, and CUDA 13 ships no nvToolsExt (only the header-only nvtx3). A stand-in target lets find_package
# (CUDAToolkit) finish; bagua does not link it. Included before every find_package(CUDAToolkit), here and in the
# installed bagua-config.cmake.
if(NOT TARGET CUDA::nvToolsExt)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
endif()
