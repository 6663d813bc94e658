# Decides whether the CUDA parts (cuda executor backend, CUPTI collector) are built.
# FSDPTUNE_CUDA=AUTO builds them when the toolkit (nvcc, cuBLAS, CUPTI, NCCL) is found,
# ON requires them, OFF never builds them. Without them the same headers are compiled
# against stub implementations that report "built without CUDA".
set(FSDPTUNE_HAVE_CUDA OFF)
set(FSDPTUNE_HAVE_CUDNN OFF)
if(NOT FSDPTUNE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_library(FSDPTUNE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(FSDPTUNE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cupti
     AND FSDPTUNE_NCCL_LIBRARY AND FSDPTUNE_NCCL_INCLUDE)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H100 / H200
    endif()
    enable_language(CUDA)
    add_library(fsdptune::nccl UNKNOWN IMPORTED)
    set_target_properties(fsdptune::nccl PROPERTIES
      IMPORTED_LOCATION ${FSDPTUNE_NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${FSDPTUNE_NCCL_INCLUDE})
    set(FSDPTUNE_HAVE_CUDA ON)
    # cuDNN 9's graph API (cudnn_graph.h): the cuda kernels' fused attention
    # (include/fsdptune/cudnn_sdpa.hpp). Only the headers are needed to build:
    # libcudnn.so.9 is loaded at run time, so the binary still runs where cuDNN is absent
    # (the cuBLAS attention then). FSDPTUNE_CUDNN=OFF leaves it out.
    if(NOT FSDPTUNE_CUDNN STREQUAL "OFF")
      find_path(FSDPTUNE_CUDNN_INCLUDE cudnn_graph.h
        HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
      find_file(FSDPTUNE_CUDNN_LIBRARY libcudnn.so.9
        HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
      if(FSDPTUNE_CUDNN_INCLUDE)
        set(FSDPTUNE_HAVE_CUDNN ON)
      endif()
    endif()
  elseif(FSDPTUNE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FSDPTUNE_CUDA=ON but the CUDA toolkit with cuBLAS, CUPTI and NCCL was not found")
  endif()
endif()
message(STATUS "fsdptune: CUDA parts ${FSDPTUNE_HAVE_CUDA}, cuDNN attention ${FSDPTUNE_HAVE_CUDNN}")
