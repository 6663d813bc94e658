// Error checks for CUDA runtime, cuBLAS and NCCL calls in the cuda backend: a failure
// becomes Error(kRuntime) naming the call and the file:line.
#pragma once

#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "fsdptune/error.hpp"

namespace fsdptune::cuda_detail {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw_runtime(std::string(file) + ":" + std::to_string(line),
                  std::string(call) + " failed: " + cudaGetErrorString(status));
  }
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_runtime(std::string(file) + ":" + std::to_string(line),
                  std::string(call) + " failed: " + cublasGetStatusString(status));
  }
}

}  // namespace fsdptune::cuda_detail

#define FSDPTUNE_CUDA_CHECK(call) \
  ::fsdptune::cuda_detail::check_cuda((call), #call, __FILE__, __LINE__)
#define FSDPTUNE_CUBLAS_CHECK(call) \
  ::fsdptune::cuda_detail::check_cublas((call), #call, __FILE__, __LINE__)
