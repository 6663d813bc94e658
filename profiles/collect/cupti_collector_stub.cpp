// The CUDA collector in a build without the CUDA toolkit (cmake/FsdptuneCuda.cmake picks
// this file or cupti_collector.cpp).
#include "fsdptune/collector.hpp"
#include "fsdptune/error.hpp"

namespace fsdptune {

std::unique_ptr<Collector> make_cuda_collector() {
  throw_runtime("--backend cuda", "fsdptune was built without CUDA",
                "rebuild with the CUDA toolkit (cuBLAS, CUPTI, NCCL) and -DFSDPTUNE_CUDA=ON, or "
                "profile with --backend cpu");
}

}  // namespace fsdptune
